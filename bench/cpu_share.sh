#!/bin/sh
# Run a command under the CPU share Lambda gives a memory size (1,769 MB is one vCPU): a CPU
# cgroup of its own, quota MB/1769 of one CPU per 100 ms, removed when the command ends. Needs a
# writable cgroup filesystem (root, as a rule). For the harnesses that are not functions:
#   bench/cpu_share.sh 1024 target/release/replay-drain --count 2000 --invocations 1 --latency-ms 0
# and, as evidence's --dlqctl, a two-line script that runs dlqctl through it.
# Exits with the command's status. (bench/cold_start.py --memory does the same for the functions.)
set -eu
[ $# -ge 2 ] || { echo "usage: $0 MEMORY_MB COMMAND [ARG...]" >&2; exit 2; }
mb=$1
shift
quota=$((100000 * mb / 1769))
[ "$quota" -ge 1000 ] || quota=1000
name="recon-share-$$-$mb"
if [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
  d=/sys/fs/cgroup/cpu/$name
  mkdir "$d"
  trap 'rmdir "$d" 2>/dev/null || true' EXIT
  echo 100000 > "$d/cpu.cfs_period_us"
  echo "$quota" > "$d/cpu.cfs_quota_us"
else
  d=/sys/fs/cgroup/$name
  mkdir "$d"
  trap 'rmdir "$d" 2>/dev/null || true' EXIT
  echo "$quota 100000" > "$d/cpu.max"
fi
status=0
sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$d" "$@" || status=$?
exit "$status"
