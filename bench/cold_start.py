"""Cold start of each function binary, against a mock Lambda runtime API (`make bench-cold-start`),
and its invocations' durations under the CPU share each Lambda memory size gives (`make bench-memory`).

For each binary and run: start the process with the functions' environment (`dlqctl env`: the
local stack) and AWS_LAMBDA_RUNTIME_API pointing at a runtime API served here, then measure
- init: from the process's start to its first `GET /runtime/invocation/next` (what Lambda reports
  as Init Duration; it includes the start-up requests to the local stack over loopback — the
  configuration record — and the process's exec);
- first invocation: from handing it its sample event (events/) to its response;
- warm invocations (`--warm K`): K more events to the same process, each timed the same way. The
  consumer and the enricher get fresh batches of ten built from their sample's first record (new
  SQS ids, new transactions with their canonical source_hash; for the consumer one in ten a
  duplicate of an earlier transaction and one in twenty poison, a currency nobody maps, as
  `make bench-e2e`); the others get their sample event again;
- the CPU time (user and system) the warm invocations used, each on average;
- peak memory: the process's peak resident set (VmHWM) after its last invocation.
With `--memory 128,256,...` each size runs in a CPU cgroup whose quota is the share of one CPU
Lambda gives that size (1,769 MB is one vCPU; `cpu.cfs_quota_us`, or `cpu.max` on cgroup v2; a
shell joins the process to it before exec, so init counts that shell's start too), and
AWS_LAMBDA_FUNCTION_MEMORY_SIZE says it. This needs a writable cgroup filesystem (root, as a
rule): `--can-limit-cpu` says whether this machine lets it (exit 0) or not (exit 1, and why).
Figures, not assertions; a function that reports an init error or an invocation error fails the run.

    python3 bench/cold_start.py --env-file FILE [--runs N] [--warm K] [--memory MB,...] [--no-sizes] BINARY=EVENT ...
    python3 bench/cold_start.py --can-limit-cpu
(bench/cpu_share.sh runs any other command under a size's CPU share.)
"""

import argparse
import hashlib
import io
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from source_hash import FIELDS, source_hash

API = "/2018-06-01/runtime"


class Runtime:
    """One process's view of the runtime API: hands out its events one by one, then holds the
    next poll."""

    def __init__(self, events: list):
        self.events = events
        self.first_poll = None
        self.handed_out = []
        self.answered = []
        self.answers = []
        self.error = None
        self.pid = None
        self.cpu_after_first = None
        self.done = threading.Event()
        self.release = threading.Event()


def serve(runtime_of):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            rt = runtime_of()
            if self.path != f"{API}/invocation/next":
                self.send_error(404)
                return
            if rt.first_poll is None:
                rt.first_poll = time.perf_counter()
            n = len(rt.handed_out)
            if n >= len(rt.events) or rt.error:
                # Every event handed out: the process is idle again; hold it until it is stopped.
                rt.release.wait(30)
                try:
                    self.send_error(503)
                except OSError:
                    pass  # the process is gone: nothing to answer
                return
            event = rt.events[n]
            deadline_ms = int((time.time() + 60) * 1000)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Lambda-Runtime-Aws-Request-Id", f"bench-{n + 1}")
            self.send_header("Lambda-Runtime-Deadline-Ms", str(deadline_ms))
            self.send_header("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:000000000000:function:bench")
            self.send_header("Lambda-Runtime-Trace-Id", "Root=1-00000000-000000000000000000000000;Sampled=0")
            self.send_header("Content-Length", str(len(event)))
            self.end_headers()
            rt.handed_out.append(time.perf_counter())
            self.wfile.write(event)

        def do_POST(self):
            rt = runtime_of()
            body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
            rt.answered.append(time.perf_counter())
            if len(rt.answered) == 1 and rt.pid:
                rt.cpu_after_first = cpu_seconds(rt.pid)
            if self.path.endswith("/response"):
                rt.answers.append(body)
            else:  # /error or /init/error
                rt.error = f"{self.path}: {body[:300]!r}"
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
            if rt.error or len(rt.answered) >= len(rt.events):
                rt.done.set()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def cpu_seconds(pid: int) -> float:
    """CPU time the process has used so far, user and system, its threads included."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def in_cgroup(procs_file, command: list) -> list:
    """`command`, started so that it runs in the cgroup of `procs_file` from its first instruction
    (a shell joins it, then execs the command: no Python runs between fork and exec)."""
    if not procs_file:
        return command
    return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', procs_file] + command


def one_run(binary: str, events: list, env: dict, server_box: list, procs_file) -> dict:
    rt = Runtime(events)
    server_box[0] = rt
    started = time.perf_counter()
    proc = subprocess.Popen(
        in_cgroup(procs_file, [binary]), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    rt.pid = proc.pid
    try:
        limit = time.monotonic() + 60 + 5 * len(events)
        while not rt.done.wait(0.2):
            if proc.poll() is not None or time.monotonic() > limit:
                why = f"exited ({proc.returncode})" if proc.returncode is not None else "timed out"
                raise SystemExit(f"{binary}: {why} after {len(rt.answered)} of {len(events)} events")
        if rt.error:
            raise SystemExit(f"{binary}: {rt.error}")
        for answer in rt.answers:
            answer = json.loads(answer or b"null")
            if isinstance(answer, dict) and answer.get("batchItemFailures"):
                raise SystemExit(f"{binary}: records of its events failed: {answer}")
        time.sleep(0.05)  # let it come back to its next poll
        peak = peak_rss_kib(proc.pid)
        cpu_end = cpu_seconds(proc.pid)
    finally:
        rt.release.set()
        proc.kill()
        _, err = proc.communicate(timeout=10)
    if rt.first_poll is None:
        raise SystemExit(f"{binary}: never polled: {err.decode(errors='replace')[-500:]}")
    took = [(a - h) * 1000 for h, a in zip(rt.handed_out, rt.answered)]
    return {
        "init_ms": (rt.first_poll - started) * 1000,
        "first_ms": took[0],
        "warm_ms": took[1:],
        # CPU the warm invocations used, each on average (the clock's ticks: 10 ms, so averaged).
        "warm_cpu_ms": (cpu_end - rt.cpu_after_first) * 1000 / (len(took) - 1)
        if len(took) > 1 and rt.cpu_after_first is not None
        else None,
        "peak_mib": peak / 1024,
    }


def _write(path: str, text: str):
    with open(path, "w") as f:
        f.write(text)


# Lambda allocates CPU in proportion to memory: 1,769 MB is one vCPU.
ONE_VCPU_MB = 1769
PERIOD_US = 100_000


def cpu_cgroup(memory_mb: int):
    """A CPU cgroup (named for this run) holding the share of one CPU that `memory_mb` gets on
    Lambda: its directory and procs file. Raises OSError, with the reason, where this machine does
    not let us make one (it needs a writable cgroup filesystem: root, as a rule)."""
    quota = max(1000, PERIOD_US * memory_mb // ONE_VCPU_MB)
    name = f"recon-bench-{os.getpid()}-{memory_mb}"
    v1 = "/sys/fs/cgroup/cpu"
    if os.path.isfile(f"{v1}/cpu.cfs_quota_us"):
        d = f"{v1}/{name}"
        limits = [("cpu.cfs_period_us", str(PERIOD_US)), ("cpu.cfs_quota_us", str(quota))]
    elif os.path.isfile("/sys/fs/cgroup/cgroup.subtree_control"):
        with open("/sys/fs/cgroup/cgroup.subtree_control") as f:
            if "cpu" not in f.read().split():
                raise OSError("cgroup v2 with its cpu controller not enabled for children "
                              "(echo +cpu > /sys/fs/cgroup/cgroup.subtree_control, as root)")
        d = f"/sys/fs/cgroup/{name}"
        limits = [("cpu.max", f"{quota} {PERIOD_US}")]
    else:
        raise OSError("no cgroup cpu controller mounted")
    os.makedirs(d)
    try:
        for file, value in limits:
            _write(f"{d}/{file}", value)
    except OSError:
        os.rmdir(d)
        raise
    return d, f"{d}/cgroup.procs"


def remove_cgroup(d: str):
    try:
        os.rmdir(d)
    except OSError:
        pass  # a process still in it, or gone already


def can_limit_cpu() -> int:
    """Exit status 0 when a process can be started under a CPU share here, 1 (and why) if not."""
    try:
        d, procs = cpu_cgroup(ONE_VCPU_MB)
        try:
            subprocess.run(in_cgroup(procs, ["true"]), check=True, stderr=subprocess.PIPE)
        finally:
            remove_cgroup(d)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"cannot limit a process's CPU share here: {e}", file=sys.stderr)
        return 1
    print("a process's CPU share can be limited here", file=sys.stderr)
    return 0


def canonical_hash(f: dict) -> str:
    """The canonical source_hash of a body whose amount is canonical already (an absent
    counterparty is empty)."""
    return source_hash(*(str(f.get(k) or "") for k in FIELDS))


def fresh_batches(template: bytes, count: int, tag: str, mixed: bool) -> list:
    """`count` SQS events of ten records each, made from the template event's first record: new
    SQS message ids, each record a new transaction (or, when `mixed`, one in ten a duplicate of
    the last valid transaction before it under a new message, one in twenty poison)."""
    first = json.loads(template)["Records"][0]
    base = json.loads(first["body"])
    events, n, last = [], 0, None
    for b in range(count):
        records = []
        for _ in range(10):
            n += 1
            if mixed and n % 10 == 0 and last:
                fields = dict(last)
            else:
                fields = dict(base)
                fields["external_ref"] = f"BENCH-{tag}-{n:06d}"
                fields["amount"] = f"{n % 997 + 1}.{n % 9 + 1}"
                poison = mixed and n % 20 == 19
                if poison:
                    fields["currency"] = "XTS"  # mapped by nobody: poison
                fields["source_hash"] = canonical_hash(fields)
                if not poison:
                    last = fields
            fields["message_id"] = f"m-{tag}-{n}"
            fields["trace_id"] = f"trace-{tag}-{n}"
            r = json.loads(json.dumps(first))
            r["messageId"] = f"{tag}-{n:08d}"
            r["receiptHandle"] = f"rh-{tag}-{n}"
            r["body"] = json.dumps(fields)
            r["md5OfBody"] = hashlib.md5(r["body"].encode()).hexdigest()
            records.append(r)
        events.append(json.dumps({"Records": records}).encode())
    return events


def for_this_stack(template: bytes, env: dict) -> bytes:
    """A scheduled event as this deployment's sweep schedule sends it (the replay function refuses
    a schedule not its own)."""
    event = json.loads(template)
    if isinstance(event, dict) and event.get("detail-type") == "Scheduled Event" and env.get("DLQ_SWEEP_SCHEDULE"):
        event["resources"] = [env["DLQ_SWEEP_SCHEDULE"]]
        return json.dumps(event).encode()
    return template


def events_for(name: str, template: bytes, warm: int, tag: str) -> list:
    if warm and name in ("consumer", "enricher") and b'"Records"' in template:
        return [template] + fresh_batches(template, warm, tag, mixed=name == "consumer")
    return [template] * (1 + warm)


def quantile(xs: list, q: float) -> float:
    """The nearest-rank quantile: the smallest value with at least q of them at or below it."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))] if xs else float("nan")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--env-file")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--warm", type=int, default=0, help="invocations after the first, per process")
    p.add_argument("--memory", default="", help="Lambda memory sizes in MB, comma-separated")
    p.add_argument("--can-limit-cpu", action="store_true")
    p.add_argument("--no-sizes", action="store_true", help="leave out the binary and zip sizes")
    p.add_argument("binaries", nargs="*", help="BINARY=EVENT_FILE")
    args = p.parse_args()
    if args.can_limit_cpu:
        raise SystemExit(can_limit_cpu())
    if not args.env_file or not args.binaries or args.runs < 1:
        p.error("--env-file, --runs of at least 1 and at least one BINARY=EVENT_FILE are needed")
    memories = [int(m) for m in args.memory.split(",") if m.strip()]
    env = dict(os.environ)
    with open(args.env_file) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                k, v = line.split("=", 1)
                env[k] = v
    box = [None]
    server = serve(lambda: box[0])
    env["AWS_LAMBDA_RUNTIME_API"] = f"127.0.0.1:{server.server_address[1]}"
    env.setdefault("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
    print(
        f"{args.runs} cold starts each, {args.warm} warm invocations after each, mock runtime API "
        "on loopback, the local stack behind it"
        + (f"; CPU share of one core as Lambda gives {args.memory} MB" if memories else "")
    )
    stamp = f"{int(time.time())}"
    limits = []
    try:
        for m in memories:
            try:
                limits.append((m, cpu_cgroup(m)))
            except OSError as e:
                raise SystemExit(f"cannot limit a process's CPU share here ({e}): run as root, or leave out --memory")
        for spec in args.binaries:
            binary, event_file = spec.split("=", 1)
            name = os.path.basename(binary)
            env["AWS_LAMBDA_FUNCTION_NAME"] = f"bench-{name}"
            with open(event_file, "rb") as f:
                template = for_this_stack(f.read(), env)
            for memory, cgroup in limits or [(None, None)]:
                env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] = str(memory or 256)
                runs = []
                for r in range(args.runs):
                    events = events_for(name, template, args.warm, f"{stamp}-{memory}-{r}")
                    runs.append(one_run(binary, events, env, box, cgroup[1] if cgroup else None))
                first = memory is None or memory == memories[0]
                report(name, memory, binary, runs, sizes=first and not args.no_sizes)
    finally:
        server.shutdown()
        for _, cgroup in limits:
            remove_cgroup(cgroup[0])


def report(name: str, memory, binary: str, runs: list, sizes: bool):
    med = {k: statistics.median(r[k] for r in runs) for k in ("init_ms", "first_ms", "peak_mib")}
    worst = {k: max(r[k] for r in runs) for k in med}
    label = f"{name:<16}" + (f" {memory:>5} MB ({memory / ONE_VCPU_MB:4.2f} vCPU)" if memory else "")
    line = (
        f"{label} init {med['init_ms']:6.1f} ms (max {worst['init_ms']:6.1f})"
        f"  first invocation {med['first_ms']:6.1f} ms (max {worst['first_ms']:6.1f})"
    )
    warm = [t for r in runs for t in r["warm_ms"]]
    if warm:
        line += (
            f"  warm p50 {quantile(warm, 0.5):6.1f} ms p99 {quantile(warm, 0.99):6.1f} ms"
            f" max {max(warm):6.1f} ms mean {statistics.mean(warm):6.1f} ms (n={len(warm)})"
            f"  CPU {statistics.mean(r['warm_cpu_ms'] for r in runs):5.2f} ms each"
        )
    if warm and memory:
        # What Lambda bills: memory times duration (rounded up to the millisecond), per invocation.
        billed = statistics.mean(memory / 1024 * math.ceil(t) for t in warm)
        line += f"  {billed:6.2f} GB-ms each"
    line += f"  peak RSS {med['peak_mib']:5.1f} MiB (max {worst['peak_mib']:5.1f})"
    if sizes:
        size = os.path.getsize(binary) / 2**20
        zipped = io.BytesIO()
        with zipfile.ZipFile(zipped, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
            z.write(binary, "bootstrap")
        line += f"  binary {size:5.1f} MiB, zipped {len(zipped.getvalue()) / 2**20:4.1f} MiB"
    print(line, flush=True)


if __name__ == "__main__":
    main()
