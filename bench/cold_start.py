"""Cold start of each function binary, against a mock Lambda runtime API (`make bench-cold-start`).

For each binary and run: start the process with the functions' environment (`dlqctl env`: the
local stack) and AWS_LAMBDA_RUNTIME_API pointing at a runtime API served here, then measure
- init: from the process's start to its first `GET /runtime/invocation/next` (what Lambda reports
  as Init Duration; it includes the start-up requests to the local stack over loopback — the
  configuration record — and the process's exec);
- first invocation: from handing it its sample event (events/) to its response;
- peak memory: the process's peak resident set (VmHWM) after that first invocation.
Figures, not assertions; a function that reports an init error or an invocation error fails the run.

    python3 bench/cold_start.py --env-file FILE [--runs N] BINARY[=EVENT] ...
"""

import argparse
import io
import json
import os
import statistics
import subprocess
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

API = "/2018-06-01/runtime"


class Runtime:
    """One process's view of the runtime API: hands out one event, then holds the next poll."""

    def __init__(self, event: bytes):
        self.event = event
        self.first_poll = None
        self.handed_out = None
        self.answered = None
        self.answer = b""
        self.error = None
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
            if rt.first_poll is not None:
                # The second poll: the process is idle again; hold it until it is stopped.
                rt.release.wait(30)
                try:
                    self.send_error(503)
                except OSError:
                    pass  # the process is gone: nothing to answer
                return
            rt.first_poll = time.perf_counter()
            deadline_ms = int((time.time() + 60) * 1000)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Lambda-Runtime-Aws-Request-Id", "cold-start-1")
            self.send_header("Lambda-Runtime-Deadline-Ms", str(deadline_ms))
            self.send_header("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:000000000000:function:bench")
            self.send_header("Lambda-Runtime-Trace-Id", "Root=1-00000000-000000000000000000000000;Sampled=0")
            self.send_header("Content-Length", str(len(rt.event)))
            self.end_headers()
            rt.handed_out = time.perf_counter()
            self.wfile.write(rt.event)

        def do_POST(self):
            rt = runtime_of()
            body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
            if self.path.endswith("/response"):
                rt.answered, rt.answer = time.perf_counter(), body
            else:  # /error or /init/error
                rt.answered, rt.error = time.perf_counter(), f"{self.path}: {body[:300]!r}"
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
            rt.done.set()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def one_run(binary: str, event: bytes, env: dict, server_box: list) -> dict:
    rt = Runtime(event)
    server_box[0] = rt
    started = time.perf_counter()
    proc = subprocess.Popen([binary], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        if not rt.done.wait(60):
            raise SystemExit(f"{binary}: no answer within 60 s")
        if rt.error:
            raise SystemExit(f"{binary}: {rt.error}")
        answer = json.loads(rt.answer or b"null")
        if isinstance(answer, dict) and answer.get("batchItemFailures"):
            raise SystemExit(f"{binary}: its sample event's records failed: {answer}")
        time.sleep(0.05)  # let it come back to its next poll
        peak = peak_rss_kib(proc.pid)
    finally:
        rt.release.set()
        proc.kill()
        _, err = proc.communicate(timeout=10)
    if rt.first_poll is None:
        raise SystemExit(f"{binary}: never polled: {err.decode(errors='replace')[-500:]}")
    return {
        "init_ms": (rt.first_poll - started) * 1000,
        "first_ms": (rt.answered - rt.handed_out) * 1000,
        "peak_mib": peak / 1024,
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--env-file", required=True)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("binaries", nargs="+", help="BINARY=EVENT_FILE")
    args = p.parse_args()
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
    env.setdefault("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
    env.setdefault("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
    print(f"{args.runs} cold starts each, mock runtime API on loopback, the local stack behind it")
    for spec in args.binaries:
        binary, event_file = spec.split("=", 1)
        name = os.path.basename(binary)
        env["AWS_LAMBDA_FUNCTION_NAME"] = f"bench-{name}"
        with open(event_file, "rb") as f:
            event = f.read()
        runs = [one_run(binary, event, env, box) for _ in range(args.runs)]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        worst = {k: max(r[k] for r in runs) for k in runs[0]}
        size = os.path.getsize(binary) / 2**20
        zipped = io.BytesIO()
        with zipfile.ZipFile(zipped, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
            z.write(binary, "bootstrap")
        zipped_mib = len(zipped.getvalue()) / 2**20
        print(
            f"{name:<16} init {med['init_ms']:6.1f} ms (max {worst['init_ms']:6.1f})"
            f"  first invocation {med['first_ms']:6.1f} ms (max {worst['first_ms']:6.1f})"
            f"  peak RSS {med['peak_mib']:5.1f} MiB (max {worst['peak_mib']:5.1f})  binary {size:5.1f} MiB, zipped {zipped_mib:4.1f} MiB"
        )
    server.shutdown()


if __name__ == "__main__":
    main()
