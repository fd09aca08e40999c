#!/usr/bin/env bash
# In-kernel fault counting side by side on touch-512 (../shared/PEERS.md): the workload
# untraced, under `fltrace faults` (system-wide, by user and kernel stack and comm), under
# `fltrace count page-faults` (by comm) and under the chapter's bpftrace one-liner
# `software:page-faults:1 { @[ustack, comm] = count(); }`, alternating, ROUNDS times each.
# Each tracer is started first and the workload timed alone while it counts. Prints the
# slowdown of each (ratio of medians), the faults each counted for the workload, and how
# many of those faults have a user stack reaching main, and what each said it lost (fltrace:
# the loss line on stderr; bpftrace: its "Lost N events"). `dwarf` is the command mode,
# `fltrace faults -- touch ...` (DWARF stacks in user space), timed as a whole run.
# usage: bench/system.sh [MiB=512] [rounds-of-touch=4] [ROUNDS=3]
# FLTRACE=path/to/fltrace uses that binary instead of building the release one.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mib=${1:-512}; passes=${2:-4}; rounds=${3:-3}
work=$(mktemp -d /tmp/fltrace-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
if [[ -z ${FLTRACE:-} ]]; then "$root/scripts/setup.sh" >/dev/null; fi
command -v bpftrace >/dev/null || apt-get install -y -qq bpftrace >/dev/null
fltrace="${FLTRACE:-$root/target/release/fltrace}"
gcc -O2 -g -fomit-frame-pointer -o "$work/touch" "$root/workloads/touch.c"
ulimit -l unlimited 2>/dev/null || true

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# Starts a tracer in the background and waits until it reports that it counts.
start() { # name, ready-pattern, command...
    local name=$1 ready=$2; shift 2
    "$@" >"$work/$name.out" 2>"$work/$name.err" &
    tracer=$!
    for _ in $(seq 600); do
        grep -q "$ready" "$work/$name.err" "$work/$name.out" 2>/dev/null && return
        sleep 0.05
    done
    echo "$name did not start" >&2; cat "$work/$name.err" >&2; exit 1
}
stop() { kill -INT "$tracer"; wait "$tracer" || true; }

declare -A times
for ((r = 0; r < rounds; r++)); do
    for tool in untraced faults count bpftrace dwarf; do
        if [[ $tool == dwarf ]]; then
            t0=$(now)
            "$fltrace" faults --format json --top 100000 -- "$work/touch" "$mib" "$passes" \
                >"$work/dwarf.out" 2>"$work/dwarf.err" || true
            t1=$(now)
            times[$tool]+="$(echo "$t1 - $t0" | bc) "
            continue
        fi
        case $tool in
            untraced) tracer= ;;
            faults) start faults counting "$fltrace" faults --format json --top 100000 ;;
            count) start count counting "$fltrace" count page-faults --by comm --format json ;;
            bpftrace) start bpftrace Attaching bpftrace -e 'software:page-faults:1 { @[ustack, comm] = count(); }' ;;
        esac
        t0=$(now)
        "$work/touch" "$mib" "$passes"
        t1=$(now)
        [[ -n $tracer ]] && stop
        times[$tool]+="$(echo "$t1 - $t0" | bc) "
    done
done

base=$(echo ${times[untraced]} | tr ' ' '\n' | median)
expected=$((mib * 256 * passes))
printf '%-10s %10s %9s %14s %22s %10s\n' tool median_s slowdown touch_faults faults_with_main lost
# The losses a run said (the last round's): fltrace's loss line, bpftrace's "Lost N events".
lost_of() {
    python3 -c 'import re,sys
text=open(sys.argv[1]).read()
n=sum(int(x) for x in re.findall(r"(\d+) (?:samples lost|not counted|user stacks not kept)", text))
n+=sum(int(x) for x in re.findall(r"Lost (\d+) events", text))
print(n)' "$1"
}
for tool in untraced faults count bpftrace dwarf; do
    m=$(echo ${times[$tool]} | tr ' ' '\n' | median)
    case $tool in
        untraced) counted=$expected; complete=- ;;
        faults | dwarf)
            read -r counted complete < <(python3 -c 'import json,sys
rows=[r for r in json.load(open(sys.argv[1])) if r.get("comm")=="touch"]
n=sum(r["count"] for r in rows)
m=sum(r["count"] for r in rows if any(f.startswith("main ") for f in r["ustack"] or []))
print(n, m)' "$work/$tool.out") ;;
        count)
            counted=$(python3 -c 'import json,sys
print(sum(r["count"] for r in json.load(open(sys.argv[1])) if r.get("comm")=="touch"))' "$work/count.out")
            complete=- ;;
        bpftrace)
            read -r counted complete < <(python3 -c 'import re,sys
text=open(sys.argv[1]).read(); n=m=0
for key, count in re.findall(r"@\[(.*?)\]: (\d+)", text, re.S):
    if not key.rstrip().endswith(", touch"): continue
    n+=int(count); m+=int(count) if re.search(r"\bmain\+", key) else 0
print(n, m)' "$work/bpftrace.out") ;;
    esac
    lost=-
    [[ $tool != untraced ]] && lost=$(lost_of "$work/$tool.err")
    [[ $tool == bpftrace ]] && lost=$(( $(lost_of "$work/bpftrace.err") + $(lost_of "$work/bpftrace.out") ))
    printf '%-10s %10.3f %8.2fx %14s %22s %10s\n' "$tool" "$m" "$(echo "$m / $base" | bc -l)" "$counted" "$complete" "$lost"
done
echo "expected faults of touch: $expected"
