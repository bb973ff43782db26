#!/usr/bin/env bash
# Local AWS stack for development and tests, without Docker:
#   - LocalStack 4.13.1 in host mode (SQS, S3, CloudFormation, IAM, STS, EventBridge, Scheduler,
#     CloudWatch, Logs) in a project-local virtualenv;
#   - AWS's DynamoDB Local (the jar shipped in the npm package amplify-dynamodb-simulator) on Java;
#   - a real PostgreSQL from Debian's packages (infra/local/postgres.sh), for the PostgreSQL ledger.
# Everything is installed on first use under .local-aws/ (git-ignored) and listens on loopback only.
#
#   infra/local/stack.sh install   install both emulators (idempotent)
#   infra/local/stack.sh up        install if needed, start both, wait until healthy (idempotent)
#   infra/local/stack.sh down      stop both
#   infra/local/stack.sh status    print what is running
#
# Ports: LOCALSTACK_PORT (default 4566), DYNAMODB_PORT (default 8000).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dir="$root/.local-aws"
venv="$dir/venv"
ddb_dir="$dir/dynamodb-local"
ls_port="${LOCALSTACK_PORT:-4566}"
ddb_port="${DYNAMODB_PORT:-8000}"
localstack_version="4.13.1"
ddb_pkg="amplify-dynamodb-simulator@2.9.30"
# sha256 of that package's tarball (npm pack), checked before it is unpacked
ddb_sha256="3503ffac19f183407909fecdacf4db51ab1fdad1da7b2f177016670b2d80e4b9"

log() { printf '[local-aws] %s\n' "$*" >&2; }

install_localstack() {
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import localstack' 2>/dev/null &&
     [ -f "$venv/.installed-$localstack_version-hashed" ]; then
    return 0
  fi
  log "installing LocalStack $localstack_version into .local-aws/venv (about a minute)"
  mkdir -p "$dir"
  python3 -m venv "$venv"
  # Every distribution pinned by version and hash (infra/requirements/localstack.txt).
  "$venv/bin/pip" install --quiet --disable-pip-version-check --require-hashes \
    -r "$root/infra/requirements/localstack.txt"
  touch "$venv/.installed-$localstack_version-hashed"
}

install_dynamodb() {
  if [ -f "$ddb_dir/DynamoDBLocal.jar" ]; then
    return 0
  fi
  log "installing DynamoDB Local from $ddb_pkg"
  command -v java >/dev/null || { log "java is required for DynamoDB Local (install a JRE 17)"; exit 1; }
  local tmp
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "$ddb_pkg" >/dev/null)
  # The package's tarball must be the one these scripts were tested with.
  local digest
  digest=$(sha256sum "$tmp"/*.tgz | cut -d' ' -f1)
  if [ "$digest" != "$ddb_sha256" ]; then
    log "$ddb_pkg has sha256 $digest, expected $ddb_sha256: refusing to install it"
    rm -rf "$tmp"
    exit 1
  fi
  (cd "$tmp" && tar -xzf ./*.tgz)
  mkdir -p "$ddb_dir"
  cp -r "$tmp/package/emulator/." "$ddb_dir/"
  rm -rf "$tmp"
  [ -f "$ddb_dir/DynamoDBLocal.jar" ] || { log "DynamoDBLocal.jar missing from $ddb_pkg"; exit 1; }
}

healthy_localstack() { curl -fsS "http://127.0.0.1:$ls_port/_localstack/health" 2>/dev/null | grep -q '"sqs": "\(running\|available\)"'; }
# DynamoDB Local answers an unsigned request with a 400 JSON error: any HTTP answer means it is up.
healthy_dynamodb() { curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$ddb_port/" 2>/dev/null | grep -q '^[1-5]'; }

wait_for() {
  local what=$1 check=$2 logfile=$3 i
  for i in $(seq 1 120); do
    if $check; then log "$what is up"; return 0; fi
    sleep 0.5
  done
  log "$what did not become healthy in 60 s; last lines of $logfile:"
  tail -n 30 "$logfile" >&2 || true
  exit 1
}

# Start a command in its own session (so `down` can stop its whole process group), detached from
# this shell, with its output in a log file; the pid file holds the session leader's pid.
start_daemon() {
  local pidfile=$1 logfile=$2
  shift 2
  setsid sh -c 'echo $$ > "$0"; exec "$@"' "$pidfile" "$@" >"$logfile" 2>&1 </dev/null &
  for _ in $(seq 1 50); do [ -s "$pidfile" ] && return 0; sleep 0.1; done
  log "could not start $1"; exit 1
}

up() {
  install_localstack
  install_dynamodb
  mkdir -p "$dir/logs"
  if healthy_localstack; then
    log "LocalStack already running on 127.0.0.1:$ls_port"
  else
    log "starting LocalStack on 127.0.0.1:$ls_port"
    # hypercorn honours the listen address (LocalStack's default twisted server binds every
    # interface whatever GATEWAY_LISTEN says). SQS_DISABLE_CLOUDWATCH_METRICS: LocalStack
    # otherwise publishes an AWS/SQS metric to itself per SQS call, and after a few thousand
    # messages it spends a core for minutes catching up, beside every later test and benchmark
    # (nothing here reads AWS/SQS metrics; the functions' own metrics are unaffected).
    # S3_SKIP_SIGNATURE_VALIDATION=0: a presigned URL (the console's bundle download) is checked
    # as S3 checks it, so a changed one is refused (LocalStack skips the check by default).
    (cd "$dir" && start_daemon "$dir/localstack.pid" "$dir/logs/localstack.log" \
      env GATEWAY_LISTEN="127.0.0.1:$ls_port" GATEWAY_SERVER=hypercorn \
      SERVICES=sqs,s3,cloudformation,iam,sts,events,scheduler,cloudwatch,logs,secretsmanager \
      PERSISTENCE=0 SKIP_SSL_CERT_DOWNLOAD=1 DISABLE_EVENTS=1 SQS_DISABLE_CLOUDWATCH_METRICS=1 \
      S3_SKIP_SIGNATURE_VALIDATION=0 \
      LOCALSTACK_VOLUME_DIR="$dir/volume" \
      "$venv/bin/python" -m localstack.runtime.main)
  fi
  if healthy_dynamodb; then
    log "DynamoDB Local already running on 127.0.0.1:$ddb_port"
  else
    log "starting DynamoDB Local on port $ddb_port"
    # -sharedDb: one database whatever the access key, as AWS keeps one per account (without it,
    # a second identity's keys, an approver's, would see tables of their own).
    (cd "$ddb_dir" && start_daemon "$dir/dynamodb.pid" "$dir/logs/dynamodb.log" \
      java -Djava.library.path=DynamoDBLocal_lib -jar DynamoDBLocal.jar -inMemory -sharedDb -disableTelemetry -port "$ddb_port")
  fi
  wait_for "DynamoDB Local" healthy_dynamodb "$dir/logs/dynamodb.log"
  wait_for "LocalStack" healthy_localstack "$dir/logs/localstack.log"
  "$root/infra/local/postgres.sh" up
}

stop_pid() {
  local name=$1 pidfile=$2
  if [ -f "$pidfile" ]; then
    local pid
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
      log "stopping $name (pid $pid)"
      kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
      kill -9 -- "-$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
  fi
}

down() {
  stop_pid LocalStack "$dir/localstack.pid"
  stop_pid "DynamoDB Local" "$dir/dynamodb.pid"
  "$root/infra/local/postgres.sh" down
}

status() {
  if healthy_localstack; then echo "LocalStack: up on 127.0.0.1:$ls_port"; else echo "LocalStack: down"; fi
  if healthy_dynamodb; then echo "DynamoDB Local: up on 127.0.0.1:$ddb_port"; else echo "DynamoDB Local: down"; fi
  "$root/infra/local/postgres.sh" status
}

case "${1:-}" in
  install) install_localstack; install_dynamodb; "$root/infra/local/postgres.sh" install ;;
  up) up ;;
  down) down ;;
  status) status ;;
  *) echo "usage: $0 install|up|down|status" >&2; exit 2 ;;
esac
