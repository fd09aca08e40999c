#!/usr/bin/env bash
# Peak RSS of `fltrace triage` (the kernel's maximum resident set of the process, from wait4),
# ROUNDS runs, with the load average beside it: triage is meant for machines short of memory,
# and its peak depends on what the busiest processes map (their libraries' symbol tables).
# usage: bench/triage.sh [ROUNDS=5] [DURATION=2s]
# FLTRACE=path/to/fltrace uses that binary instead of building the release one.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rounds=${1:-5}; duration=${2:-2s}
if [[ -z ${FLTRACE:-} ]]; then (cd "$root" && cargo build --release --locked -p fltrace >/dev/null); fi
fltrace="${FLTRACE:-$root/target/release/fltrace}"
for ((r = 0; r < rounds; r++)); do
    python3 - "$fltrace" "$duration" <<'PY'
import os, subprocess, sys
child = subprocess.Popen([sys.argv[1], "triage", "--duration", sys.argv[2]],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
_, status, usage = os.wait4(child.pid, 0)
load = open("/proc/loadavg").read().split()[0]
print(f"peak RSS {usage.ru_maxrss / 1024:6.1f} MiB  exit {os.waitstatus_to_exitcode(status)}  load {load}")
PY
done
