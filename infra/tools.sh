#!/usr/bin/env bash
# Tools the checks need, installed on first use under .local-aws (git-ignored): into
# .local-aws/tools-venv cfn-lint and checkov (template checks), the SAM translator (deploy
# rehearsal), cargo-lambda (build, watch, invoke); into .local-aws/iam-simulate, from npm at the
# versions infra/iam-simulate/package-lock.json pins, the offline IAM policy simulator
# tests/iam_offline.rs runs (@cloud-copilot/iam-simulate, AGPL-3.0: a development tool, never
# shipped with the functions).
#
#   infra/tools.sh install      install (idempotent)
#   infra/tools.sh bin          print the venv's bin directory
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.local-aws/tools-venv"
stamp="$venv/.installed-v3"

install() {
  [ -f "$stamp" ] && return 0
  echo "[tools] installing cfn-lint, checkov, the SAM translator and cargo-lambda into .local-aws/tools-venv, the IAM simulator into .local-aws/iam-simulate (a minute or two)" >&2
  mkdir -p "$root/.local-aws"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --upgrade pip >/dev/null
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    'cfn-lint==1.58.0' 'checkov==3.3.30' 'cargo-lambda==1.9.2' 'aws-sam-translator==1.110.0'
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
