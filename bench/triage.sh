#!/usr/bin/env bash
# Peak RSS of `fltrace triage` (the kernel's maximum resident set of the process, from wait4),
# ROUNDS runs, with the load average beside it: triage is meant for machines short of memory,
# and its peak depends on what the busiest processes map (their libraries' symbol tables).
# usage: bench/triage.sh [ROUNDS=5] [DURATION=2s]
# FLTRACE=path/to/fltrace uses that binary instead of building the release one.
# STACKS=N runs `workloads/memtools stacks N` twice while triage counts: N faults under as
# many distinct stacks each, the heavy case (every stack of the processes shown is distinct).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rounds=${1:-5}; duration=${2:-2s}
if [[ -z ${FLTRACE:-} ]]; then (cd "$root" && cargo build --release --locked -p fltrace >/dev/null); fi
fltrace="${FLTRACE:-$root/target/release/fltrace}"
memtools=""
if [[ -n ${STACKS:-} ]]; then
    scratch="$(mktemp -d)"; trap 'rm -rf "$scratch"' EXIT
    memtools="$scratch/memtools"
    gcc -O2 -g -fno-omit-frame-pointer -o "$memtools" "$root/workloads/memtools.c"
fi
for ((r = 0; r < rounds; r++)); do
    python3 - "$fltrace" "$duration" "$memtools" "${STACKS:-0}" <<'PY'
import os, subprocess, sys
fltrace, duration, memtools, stacks = sys.argv[1:5]
child = subprocess.Popen([fltrace, "triage", "--duration", duration],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
if memtools:
    # Once its counters run (it says so on stderr).
    for line in child.stderr:
        if "watching" in line:
            break
    for _ in range(2):
        subprocess.run([memtools, "stacks", stacks], check=True)
child.stderr.read()
_, status, usage = os.wait4(child.pid, 0)
load = open("/proc/loadavg").read().split()[0]
print(f"peak RSS {usage.ru_maxrss / 1024:6.1f} MiB  exit {os.waitstatus_to_exitcode(status)}  load {load}")
PY
done
