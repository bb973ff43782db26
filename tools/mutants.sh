#!/usr/bin/env bash
# The mutant catalogue: realistic bugs (shared/testkit/mutants/*.patch, each a diff of the
# production code with a comment saying what the bug is), applied one at a time to a clean copy
# of HEAD; the simulator is built with the bug in and run until a seed breaks an invariant, at most
# SEEDS seeds from FROM. One line per mutant: how many seeds it took to be found, or NOT FOUND.
# A mutant the simulator cannot find is a gap in it (exit 1), unless its patch explains in a
# `# equivalent:` line why the bug changes nothing the promise covers.
#
#   tools/mutants.sh                 every mutant, 1000 seeds each
#   MUTANT=lease-never-honoured tools/mutants.sh
#   SEEDS=2000 FROM=50000 tools/mutants.sh
#   tools/mutants.sh --check         only that every patch still applies to the working tree
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} == --check ]]; then
  stale=0
  for patch in shared/testkit/mutants/*.patch; do
    git apply --check "$patch" 2>/dev/null || { echo "mutant $(basename "$patch" .patch) no longer applies: regenerate it" >&2; stale=1; }
  done
  [[ $stale == 0 ]] && echo "mutants: $(ls shared/testkit/mutants/*.patch | wc -l) patches apply"
  exit $stale
fi
SEEDS=${SEEDS:-1000}
FROM=${FROM:-0}
ONLY=${MUTANT:-}
export CARGO_INCREMENTAL=0
# Its own target directory: the mutants' builds never disturb the workspace's.
export CARGO_TARGET_DIR="$PWD/target/mutants"
work=$(mktemp -d)
cleanup() {
  git worktree remove --force "$work/tree" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
git worktree add --quiet --detach "$work/tree" HEAD

printf '%-42s %10s %10s %8s\n' MUTANT FOUND_AT SEEDS SECONDS
status=0
found=0
total=0
for patch in shared/testkit/mutants/*.patch; do
  name=$(basename "$patch" .patch)
  [[ -n $ONLY && $name != "$ONLY" ]] && continue
  total=$((total + 1))
  git -C "$work/tree" checkout --quiet -- .
  if ! git -C "$work/tree" apply "$PWD/$patch"; then
    echo "$name: the patch no longer applies to HEAD; bring it up to date" >&2
    status=1
    continue
  fi
  (cd "$work/tree" && cargo build --locked --release --quiet -p recon-testkit --bin simulate)
  start=$(date +%s)
  line=$("$CARGO_TARGET_DIR/release/simulate" --from "$FROM" --count "$SEEDS" --until-violated 2>/dev/null \
    | grep '^simulate: found at seed' || true)
  secs=$(( $(date +%s) - start ))
  if [[ -n $line ]]; then
    seed=$(sed -E 's/.*seed ([0-9]+), after ([0-9]+) seeds/\1/' <<<"$line")
    took=$(sed -E 's/.*seed ([0-9]+), after ([0-9]+) seeds/\2/' <<<"$line")
    printf '%-42s %10s %10s %8s\n' "$name" "$seed" "$took" "$secs"
    found=$((found + 1))
  elif grep -q '^# equivalent:' "$patch"; then
    printf '%-42s %10s %10s %8s  (%s)\n' "$name" EQUIVALENT "$SEEDS" "$secs" "$(grep '^# equivalent:' "$patch" | head -1 | cut -c15-)"
  else
    printf '%-42s %10s %10s %8s\n' "$name" "NOT FOUND" "$SEEDS" "$secs"
    status=1
  fi
done
echo "mutants: $found of $total found within $SEEDS seeds (from seed $FROM)"
exit $status
