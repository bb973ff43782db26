#!/usr/bin/env python3
"""The size of each function's deployment package, as Lambda counts it.

Reads the bootstrap binaries `make build` (cargo lambda) left under target/lambda/, deflates each
into a zip as `bootstrap` (level 9, as `cargo lambda build --output-format zip` and SAM do), and
prints the binary and the zip beside the 5 MB goal. Exit status 1 when a binary is missing.
"""

import argparse
import io
import pathlib
import sys
import zipfile

GOAL = 5_000_000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="target/lambda", help="where cargo lambda leaves <function>/bootstrap")
    ap.add_argument("functions", nargs="*", default=["consumer", "enricher", "replay", "reference-audit"])
    args = ap.parse_args()
    missing = 0
    print(f"{'function':<16} {'binary':>12} {'zipped':>12}  vs 5 MB")
    for name in args.functions:
        path = pathlib.Path(args.dir) / name / "bootstrap"
        if not path.is_file():
            print(f"{name:<16} missing: {path} (run `make build` first)", file=sys.stderr)
            missing += 1
            continue
        data = path.read_bytes()
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
            info = zipfile.ZipInfo("bootstrap")
            info.external_attr = 0o755 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data, compresslevel=9)
        zipped = len(buf.getvalue())
        verdict = "met" if zipped <= GOAL else f"over by {zipped - GOAL:,} bytes"
        print(f"{name:<16} {len(data):>12,} {zipped:>12,}  {verdict}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
