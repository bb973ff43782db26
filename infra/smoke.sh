#!/usr/bin/env bash
# Smoke test of the five Lambda binaries as Lambda runs them: each runs under `cargo lambda
# watch` (the Lambda runtime API emulator) against the local stack, is invoked with its sample
# event from events/, and its response and its effect on the stores are checked.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export PATH="$(infra/tools.sh bin):$PATH"
invoke_port="${SMOKE_INVOKE_PORT:-9011}"
prefix="smoke-$$"
# dlqctl and the consumer from the build `make test` runs its checks on, in the directory it
# passes (Makefile, BUILD_TESTED and TESTED): a build of one package would compile the AWS SDK
# again for its own feature set.
bin="${1:?usage: infra/smoke.sh DIR, the directory of the debug binaries make test built}"
dlqctl=("$bin/dlqctl" --prefix "$prefix")
log=".local-aws/logs/smoke-watch.log"
fail() { echo "smoke: FAILED: $*" >&2; echo "--- cargo lambda watch log ---" >&2; tail -n 40 "$log" >&2 || true; exit 1; }

"$bin/xtask" --prefix "$prefix" setup >/dev/null
# The functions' environment as the template would set it (every name), pointed at the local
# stack: what `make watch` gives cargo lambda watch too.
mkdir -p .local-aws/logs
envfile=".local-aws/smoke.env"
"${dlqctl[@]}" env > "$envfile"
# The emulator gives each invocation a few seconds; keep a small margin.
echo "DLQ_DEADLINE_MARGIN_MS=500" >> "$envfile"
echo "RUST_LOG=info" >> "$envfile"
set -a; . "$envfile"; set +a

echo "smoke: a bad setting stops a function at start-up with one JSON line naming it"
out=$(DLQ_REPLAY_MAX_PER_ENVELOPE=0 DLQ_MAX_ATTEMPTS=0 "$bin/consumer" 2>&1) && fail "the consumer started with DLQ_MAX_ATTEMPTS=0"
echo "$out" | python3 -c '
import json, sys
lines = [l for l in sys.stdin.read().splitlines() if l.strip()]
assert len(lines) == 1, lines
d = json.loads(lines[0])
assert d["level"] == "ERROR" and d["variable"] == "DLQ_MAX_ATTEMPTS", d
assert "allowed: 1-1000 receives" in d["error"], d
' || fail "start-up error not one JSON line naming the variable: $out"

cargo lambda watch --invoke-port "$invoke_port" --env-file "$envfile" >"$log" 2>&1 &
watch_pid=$!
trap 'kill "$watch_pid" 2>/dev/null || true; pkill -P "$watch_pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 60); do
  curl -s -o /dev/null "http://127.0.0.1:$invoke_port/" && break
  sleep 0.5
done

invoke() { cargo lambda invoke "$1" --invoke-port "$invoke_port" --data-file "$2" 2>&1; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }
stats() { "${dlqctl[@]}" stats --json; }

echo "smoke: consumer <- events/consumer-sqs-batch.json"
out=$(invoke consumer events/consumer-sqs-batch.json) || fail "consumer invoke: $out"
[ "$(echo "$out" | json 'len(d["batchItemFailures"])')" = 0 ] || fail "consumer reported failures: $out"
s=$(stats)
[ "$(echo "$s" | json 'd["ledger"]["postings"]')" = 1 ] || fail "expected 1 posting: $s"
[ "$(echo "$s" | json 'd["dead_letter_queue"]["visible"]')" = 2 ] || fail "expected 2 dead letters: $s"
[ "$(echo "$s" | json 'd["audit"].get("DUPLICATE_SUPPRESSED", 0)')" = 1 ] || fail "expected 1 duplicate audited: $s"

# Logs as Powertools writes them: the invocation's keys on every line inside it.
python3 - "$log" <<'PY' || fail "log lines without Powertools' keys"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
inside = [d for d in lines if "function_request_id" in d]
assert inside, "no log line inside an invocation"
for d in inside:
    for key in ("timestamp", "level", "message", "service", "cold_start", "function_request_id"):
        assert key in d, (key, d)
assert any(d.get("decision") == "COMMITTED" for d in inside), "the decision events are not inside the invocation"
PY

echo "smoke: enricher <- events/enricher-dlq-batch.json"
out=$(invoke enricher events/enricher-dlq-batch.json) || fail "enricher invoke: $out"
[ "$(echo "$out" | json 'len(d["batchItemFailures"])')" = 0 ] || fail "enricher reported failures: $out"
s=$(stats)
[ "$(echo "$s" | json 'd["envelopes"].get("PENDING", 0)')" = 2 ] || fail "expected 2 PENDING envelopes: $s"
[ "$(echo "$s" | json 'd["envelopes"].get("QUARANTINED", 0)')" = 1 ] || fail "expected 1 QUARANTINED envelope: $s"

echo "smoke: replay <- events/replay-scheduled.json (naming this stack's schedule)"
scheduled="$(mktemp)"
sed "s/recon-dlq-replay-sweep/$prefix-replay-sweep/" events/replay-scheduled.json > "$scheduled"
out=$(invoke replay "$scheduled") || fail "replay invoke: $out"
[ "$(echo "$out" | json "d['completed'] and d['triggered_by'] == 'schedule:$prefix-replay-sweep' and bool(d['invocation'])")" = True ] || fail "unexpected sweep report (its invocation named?): $out"

echo "smoke: replay <- events/replay-seal.json (this stack's seal schedule: seals, nothing else)"
sed "s/recon-dlq-audit-seal/$prefix-audit-seal/" events/replay-seal.json > "$scheduled"
out=$(invoke replay "$scheduled") || fail "replay invoke: $out"
[ "$(echo "$out" | json "d['sealed'].startswith('audit-seals/') and d['seal']['seq'] >= 2")" = True ] || fail "unexpected seal answer: $out"
out=$("${dlqctl[@]}" audit verify) || fail "the audit trail does not verify after the functions ran: $out"
echo "smoke: the trail from the bucket alone (the records each seal wrote beside it), verified and exported"
out=$("${dlqctl[@]}" --json audit verify --from-bucket) || fail "the trail does not verify from the bucket alone: $out"
[ "$(echo "$out" | json "d['from_bucket'] and d['records'] > 0 and d['seals'] >= 2")" = True ] || fail "unexpected bucket verify: $out"
out=$("${dlqctl[@]}" evidence export --from-bucket --out .local-aws/smoke-bucket-bundle.json) || fail "export from the bucket: $out"
out=$(python3 tools/verify_bundle.py .local-aws/smoke-bucket-bundle.json) || fail "the bucket's bundle does not verify standalone: $out"

echo "smoke: replay <- events/replay-scheduled.json as it is (another stack's schedule: must be refused)"
out=$(invoke replay events/replay-scheduled.json || true)
echo "$out" | grep -q "a scheduled event must come from" || fail "a foreign schedule was not refused: $out"
rm -f "$scheduled"

echo "smoke: replay <- a replay by hand naming its actor (must be refused: the control plane's)"
echo '{"reason": "XAU mapped", "triggered_by": "alice@finops.example", "dry_run": true}' > .local-aws/smoke-replay.json
out=$(invoke replay .local-aws/smoke-replay.json || true)
echo "$out" | grep -q "runs only its schedules" || fail "a replay by hand was not refused by the replay function: $out"

echo "smoke: reference-audit <- events/reference-stream.json (a period re-opened by a direct write)"
out=$(invoke reference-audit events/reference-stream.json) || fail "reference-audit invoke: $out"
[ "$(echo "$out" | json 'len(d["batchItemFailures"])')" = 0 ] || fail "reference-audit reported failures: $out"
s=$(stats)
[ "$(echo "$s" | json 'd["audit"].get("REFERENCE_CHANGED", 0)')" = 1 ] || fail "expected the change audited: $s"
[ "$(echo "$s" | json 'd["audit"].get("CONFIG_CHANGED", 0) >= 4')" = True ] || fail "each function must record its configuration at start-up: $s"

echo "smoke: control <- an HTTP API request as API Gateway gives it (IAM-verified caller; none)"
request() {  # $1: the caller's ARN, or "" for none
  python3 - "$1" <<'PY'
import json, sys
ctx = {"requestId": "smoke", "http": {"method": "POST", "path": "/operations"}}
if sys.argv[1]:
    ctx["authorizer"] = {"iam": {"userArn": sys.argv[1]}}
print(json.dumps({"version": "2.0", "routeKey": "POST /operations", "rawPath": "/operations",
                  "body": json.dumps({"operation": "whoami"}), "isBase64Encoded": False, "requestContext": ctx}))
PY
}
request "arn:aws:sts::000000000000:assumed-role/$prefix-viewer/vera" > .local-aws/smoke-control.json
out=$(invoke control .local-aws/smoke-control.json) || fail "control invoke: $out"
[ "$(echo "$out" | json 'd["statusCode"]')" = 200 ] || fail "whoami as a viewer: $out"
[ "$(echo "$out" | json 'json.loads(d["body"])["role"]')" = viewer ] || fail "the viewer's role not read from the verified ARN: $out"
request "" > .local-aws/smoke-control.json
out=$(invoke control .local-aws/smoke-control.json) || fail "control invoke: $out"
[ "$(echo "$out" | json 'd["statusCode"]')" = 401 ] || fail "a request no IAM verified was not refused: $out"

echo "smoke: dlqctl reconcile --fan-out: the period read as three segments the control plane reads for an auditor"
# Through the control plane (in this process, as the auditor the local STS vouches for): the same
# reconciliation as the read in this process. (Exit 1 is a reconciliation that does not hold:
# compared anyway.)
here=$("${dlqctl[@]}" --json reconcile --period 2026-11 || true)
asked=$("${dlqctl[@]}" --as auditor:audrey --json reconcile --period 2026-11 --fan-out 3 || true)
python3 - "$here" "$asked" <<'PY' || fail "a fan-out's reconciliation differs from the local read: $asked"
import json, sys
here, asked = (json.loads(a) for a in sys.argv[1:3])
assert here["by_state"].get("COMMITTED", {}).get("count", 0) >= 1, here
for key in ("by_state", "by_entity_period", "problems", "holds"):
    assert here[key] == asked[key], (key, here[key], asked[key])
PY
out=$("${dlqctl[@]}" --as maker:mo reconcile --period 2026-11 --fan-out 3 2>&1) && fail "a maker read a period's postings through the control plane"
echo "$out" | grep -q "HTTP 403" || fail "a maker's segment read not refused by the control plane: $out"

echo "smoke: all five functions answered and changed the stores as expected"
