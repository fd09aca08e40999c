#!/usr/bin/env bash
# The floor of far-memory emulation on this machine (issue #12): what any userfaultfd handler
# costs per fault on graph with its OpenMP threads, against what fltrace adds. Runs, in
# interleaved rounds (A B C D E A B C D E ...), for each scheduling setup:
#   untraced     the program alone
#   min_uffd     bench/min_uffd.c preloaded: one handler thread, UFFDIO_ZEROPAGE per missing
#                fault, a bump allocator, no recording, no eviction (the floor)
#   runtime      fltrace's runtime preloaded alone (no recorder), local memory ample
#   record-ample fltrace record -L=<2x the peak> (no eviction)
#   record-half  fltrace record -L=<half the peak>
#   record-half-copy      the same with FLTRACE_RT_MOVE=0 (pages copied, not moved)
#   record-half-2handlers the same with FLTRACE_RT_HANDLERS=2 (a handler per CPU)
#   record-half-busy      the same with FLTRACE_RT_BUSY_POLL=1 (the handler never sleeps)
# and prints the median time of each and the time added per handled fault against untraced.
# Scheduling setups: "spin" (OpenMP default: threads spin-wait), "passive"
# (OMP_WAIT_POLICY=passive), "1thread" (OMP_NUM_THREADS=1: the handler has a CPU to itself),
# "pinned" (taskset -c 0: program, handler and recorder share one CPU).
# With autogroup scheduling (kernel.sched_autogroup_enabled=1) nice only orders processes of
# one session; run it in a session of its own with a raised share to get the CPUs from the
# niced builds of other sessions:
#   setsid bash -c 'echo -20 >/proc/self/autogroup; bench/farmem-floor.sh 18 5'
# usage: bench/farmem-floor.sh [scale=18] [ROUNDS=5] [setups="spin passive 1thread pinned"]
#        [configs="untraced min_uffd runtime record-ample record-half"]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
scale=${1:-18}; rounds=${2:-5}
read -ra setups <<<"${3:-spin passive 1thread pinned}"
read -ra configs <<<"${4:-untraced min_uffd runtime record-ample record-half}"
work=$(mktemp -d /tmp/fltrace-floor.XXXXXX)
trap 'rm -rf "$work"' EXIT
# FLTRACE_BIN_DIR: binaries copied aside, so that a build meanwhile does not change them mid-run.
bin=${FLTRACE_BIN_DIR:-$root/target/release}
fltrace="$bin/fltrace"
lib="$bin/libfltrace_preload.so"
gcc -O2 -g -fopenmp -o "$work/graph" "$root/workloads/graph.c"
gcc -O2 -shared -fPIC -o "$work/min_uffd.so" "$root/bench/min_uffd.c" -lpthread

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
stat_of() { grep -o "[ ,]$2:[0-9]*" "$1" | tail -1 | cut -d: -f2; }

peak_kb=$(/usr/bin/time -f %M "$work/graph" "$scale" 1 2>&1 >/dev/null | tail -1)
peak_mb=$(( (peak_kb + 1023) / 1024 ))
half=$(( peak_mb / 2 )); ample=$(( peak_mb * 2 )); max=$(( peak_mb * 4 ))
echo "graph $scale: peak ${peak_mb} MB; ample -L=$ample, half -L=$half, -M=$max; ${rounds} rounds; $(nproc) CPUs"

# Runs one config under one setup; prints "seconds faults".
run() {
    local setup=$1 config=$2 dir="$work/run" prefix=() t0 t1 faults=0
    rm -rf "$dir"; mkdir -p "$dir"; cd "$dir"
    case $setup in
        spin) prefix=(env) ;;
        passive) prefix=(env OMP_WAIT_POLICY=passive) ;;
        1thread) prefix=(env OMP_NUM_THREADS=1) ;;
        pinned) prefix=(taskset -c 0 env) ;;
    esac
    case $config in
        untraced) t0=$(now); "${prefix[@]}" "$work/graph" "$scale" 1 >/dev/null; t1=$(now) ;;
        min_uffd)
            t0=$(now)
            "${prefix[@]}" LD_PRELOAD="$work/min_uffd.so" MIN_UFFD_VERBOSE=1 "$work/graph" "$scale" 1 >/dev/null 2>"$dir/err"
            t1=$(now)
            faults=$(grep -o '[0-9]* faults served' "$dir/err" | cut -d' ' -f1) ;;
        runtime)
            # No recorder, so no stats file: its faults are min_uffd's (the same first touches).
            t0=$(now)
            "${prefix[@]}" LD_PRELOAD="$lib" FLTRACE_RT_LOCAL_PAGES=$((ample * 256)) FLTRACE_RT_MAX_PAGES=$((max * 256)) "$work/graph" "$scale" 1 >/dev/null
            t1=$(now) ;;
        record-*)
            local l=$half knobs=()
            case $config in
                record-ample) l=$ample ;;
                record-half-copy) knobs=(FLTRACE_RT_MOVE=0) ;;
                record-half-2handlers) knobs=(FLTRACE_RT_HANDLERS=2) ;;
                record-half-busy) knobs=(FLTRACE_RT_BUSY_POLL=1) ;;
            esac
            t0=$(now); "${prefix[@]}" "${knobs[@]}" "$fltrace" record -q -L=$l -M=$max -- "$work/graph" "$scale" 1 >/dev/null; t1=$(now)
            faults=$(stat_of "$(ls "$dir"/fltrace-data-stats-*.out | head -1)" rt_faults) ;;
    esac
    echo "$(echo "$t1 - $t0" | bc) ${faults:-0}"
}

for setup in "${setups[@]}"; do
    declare -A times=() faults=()
    for ((r = 0; r < rounds; r++)); do
        for config in "${configs[@]}"; do
            read -r t f < <(run "$setup" "$config")
            times[$config]+="$t "; faults[$config]=$f
        done
    done
    u=$(printf '%s\n' ${times[untraced]:-0} | median)
    echo "setup $setup (load $(cut -d' ' -f1-3 /proc/loadavg)):"
    for config in "${configs[@]}"; do
        t=$(printf '%s\n' ${times[$config]} | median)
        f=${faults[$config]}; [[ $config == runtime ]] && f=${faults[min_uffd]:-0}
        added="-"; ((f > 0)) && added=$(echo "scale=1; ($t - $u) * 1000000 / $f" | bc)
        echo "  $config: median ${t}s ($(echo "scale=2; $t / $u" | bc)x), ${f} faults, added per fault ${added} us; runs: ${times[$config]}"
    done
    unset times faults
done
echo "(bench/farmem-floor.sh $scale $rounds \"${setups[*]}\" \"${configs[*]}\")"
