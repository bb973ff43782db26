#!/usr/bin/env bash
# The console's browser tests: Debian's Chromium (installed from Debian's packages on first use)
# driven by playwright-core (from the npm registry, at the version package-lock.json pins; it
# downloads no browser), against the local stack, with the dlqctl and xtask of BIN_DIR.
#
#   tests/browser/run.sh [BIN_DIR]   (default: target/debug)
#
# Screenshots of each step go to target/console-e2e; with SCREENSHOTS=DIR, also the ones the
# README shows, into DIR (docs/console).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="${1:-$root/target/debug}"
log() { echo "[browser] $*" >&2; }

if ! command -v chromium >/dev/null; then
  log "installing Chromium from Debian's packages (chromium)"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
if [ ! -f "$here/node_modules/.package-lock.json" ] || ! cmp -s "$here/package-lock.json" "$here/node_modules/.lock-installed"; then
  log "installing playwright-core (npm ci)"
  (cd "$here" && npm ci --no-audit --no-fund --silent && cp package-lock.json node_modules/.lock-installed)
fi

out="$root/target/console-e2e"
rm -rf "$out"
DLQCTL="$bin/dlqctl" XTASK="$bin/xtask" OUT="$out" CHROMIUM="$(command -v chromium)" node "$here/console.test.mjs"
if [ -n "${SCREENSHOTS:-}" ]; then
  mkdir -p "$SCREENSHOTS"
  for shot in 01-triage 02-dry-run 03-request 06-edit-diff 08-reconcile 11-envelope-lineage 12-bundle-exported; do cp "$out/$shot.png" "$SCREENSHOTS/"; done
  log "screenshots copied to $SCREENSHOTS"
fi
