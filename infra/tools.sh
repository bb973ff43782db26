#!/usr/bin/env bash
# Python-packaged tools the checks need, installed on first use into .local-aws/tools-venv
# (git-ignored): cfn-lint and checkov (template checks), the SAM translator (deploy rehearsal),
# cargo-lambda (build, watch, invoke).
#
#   infra/tools.sh install      install (idempotent)
#   infra/tools.sh bin          print the venv's bin directory
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.local-aws/tools-venv"
stamp="$venv/.installed-v2"

install() {
  [ -f "$stamp" ] && return 0
  echo "[tools] installing cfn-lint, checkov, the SAM translator and cargo-lambda into .local-aws/tools-venv (a minute or two)" >&2
  mkdir -p "$root/.local-aws"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --upgrade pip >/dev/null
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    'cfn-lint==1.58.0' 'checkov==3.3.30' 'cargo-lambda==1.9.2' 'aws-sam-translator==1.110.0'
  touch "$stamp"
}

case "${1:-}" in
  install) install ;;
  bin) echo "$venv/bin" ;;
  *) echo "usage: $0 install|bin" >&2; exit 2 ;;
esac
