#!/usr/bin/env bash
# Far-memory emulation, side by side in one run (issue #3):
#  1. graph (build + BFS, OpenMP on all cores, the bfs-g20 stand-in): untraced vs
#     `fltrace record -L <half the peak>`, alternating, ROUNDS times: slowdown, faults the
#     runtime handled vs rows in the trace, peak RSS;
#  2. touch-512 under -L=2048 -M=4096 (no eviction, the original's 15x row in PEERS.md);
#  3. start-up: from launching `fltrace record -L.. -- prog` to prog's first instruction
#     (prog prints the time as it enters main), and the whole `fltrace record -- true`
#     (which adds the kernel's tear-down of tracepoints and ring buffers after the program);
#  4. CPU used by the runtime while the program sleeps 2 s;
#  5. per-fetch latency (median, p99) against a minimal userfaultfd handler.
# usage: bench/farmem.sh [scale=20] [ROUNDS=3]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
scale=${1:-20}; rounds=${2:-3}
work=$(mktemp -d /tmp/fltrace-farmem.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$root/scripts/setup.sh" >/dev/null
fltrace="$root/target/release/fltrace"
lib="$root/target/release/libfltrace_preload.so"
gcc -O2 -g -fopenmp -o "$work/graph" "$root/workloads/graph.c"
gcc -O2 -g -o "$work/touch" "$root/workloads/touch.c"
printf '#include <stdio.h>\n#include <time.h>\nint main(void){struct timespec t; clock_gettime(CLOCK_REALTIME,&t); printf("%%ld\\n", t.tv_sec*1000000000L+t.tv_nsec); return 0;}\n' >"$work/started.c"
gcc -O2 -o "$work/started" "$work/started.c"
gcc -O2 -o "$work/fetch_latency" "$root/bench/fetch_latency.c" -lpthread

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
stat_of() { grep -o "[ ,]$2:[0-9]*" "$1" | tail -1 | cut -d: -f2; }

# Peak of the untraced program, from its own rusage.
peak_kb=$(/usr/bin/time -f %M "$work/graph" "$scale" 1 2>&1 >/dev/null | tail -1)
peak_mb=$(( (peak_kb + 1023) / 1024 ))
half=$(( peak_mb / 2 )); max=$(( peak_mb * 2 ))
echo "graph $scale: peak ${peak_mb} MB untraced; far memory runs use -L=$half -M=$max"

untraced=(); traced=()
for ((r = 0; r < rounds; r++)); do
    t0=$(now); "$work/graph" "$scale" 1 >/dev/null; t1=$(now)
    untraced+=("$(echo "$t1 - $t0" | bc)")
    dir="$work/far-$r"; mkdir -p "$dir"; cd "$dir"
    t0=$(now); "$fltrace" record -q -L=$half -M=$max -- "$work/graph" "$scale" 1 >/dev/null; t1=$(now)
    traced+=("$(echo "$t1 - $t0" | bc)")
done
u=$(printf '%s\n' "${untraced[@]}" | median); t=$(printf '%s\n' "${traced[@]}" | median)
stats=$(ls "$work/far-$((rounds - 1))"/fltrace-data-stats-*.out | head -1)
echo "graph slowdown at half the peak: $(echo "scale=2; $t / $u" | bc)x (untraced ${u}s, traced ${t}s)"
echo "  runtime handled $(stat_of "$stats" rt_faults) faults ($(stat_of "$stats" faults_fetch) fetches, $(stat_of "$stats" evict_pages_done) evictions); trace rows $(stat_of "$stats" faults); unmatched log entries $(stat_of "$stats" rt_unmatched); lost $(stat_of "$stats" lost)"
echo "  local memory peak $(( $(stat_of "$stats" memory_used) / 1048576 )) MB of -L $half MB; process peak RSS $(( $(stat_of "$stats" hwm) / 1048576 )) MB (untraced ${peak_mb} MB)"

cd "$work"; mkdir -p touch-run; cd touch-run
t0=$(now); "$work/touch" 512 4; t1=$(now)
"$fltrace" record -q -L=2048 -M=4096 -- "$work/touch" 512 4; t2=$(now)
echo "touch-512 under -L=2048 -M=4096: $(echo "scale=2; ($t2 - $t1) / ($t1 - $t0)" | bc)x"

startup() { local s=(); for i in 1 2 3 4 5; do t0=$(now); "$@" >/dev/null 2>&1; t1=$(now); s+=("$(echo "$t1 - $t0" | bc)"); done; printf '%s\n' "${s[@]}" | median; }
# Until the program's first instruction: the program prints the time it reached main.
until_main() { local s=(); for i in 1 2 3 4 5; do t0=$(date +%s%N); t1=$("$@" 2>/dev/null | tail -1); s+=("$(echo "($t1 - $t0) / 1000000000" | bc -l)"); done; printf '%s\n' "${s[@]}" | median; }
cd "$work"
echo "start-up until the program's main (median of 5): bare $(until_main "$work/started")s; fltrace record $(until_main "$fltrace" record -q -- "$work/started")s; fltrace record -L=100 -M=200 $(until_main "$fltrace" record -q -L=100 -M=200 -- "$work/started")s; fltrace record --allocs $(until_main "$fltrace" record -q --allocs -- "$work/started")s"
echo "whole command (median of 5): true $(startup true)s; fltrace record -- true $(startup "$fltrace" record -q -- true)s; fltrace record -L=100 -M=200 -- true $(startup "$fltrace" record -q -L=100 -M=200 -- true)s; runtime alone (LD_PRELOAD, no recorder) $(startup env LD_PRELOAD="$lib" FLTRACE_RT_LOCAL_PAGES=25600 FLTRACE_RT_MAX_PAGES=51200 true)s"

idle=$( { /usr/bin/time -f "%U %S" env LD_PRELOAD="$lib" FLTRACE_RT_LOCAL_PAGES=25600 FLTRACE_RT_MAX_PAGES=51200 sleep 2; } 2>&1 | tail -1)
echo "CPU while the program sleeps 2 s (user sys): $idle"

for i in 1 2 3; do
    raw=$("$work/fetch_latency" raw 20000)
    rt=$(env LD_PRELOAD="$lib" FLTRACE_RT_LOCAL_PAGES=4096 FLTRACE_RT_MAX_PAGES=131072 "$work/fetch_latency" runtime 20000)
    echo "fetch latency ns (median p99): minimal handler $raw; fltrace runtime $rt"
done
echo "(bench/farmem.sh $scale $rounds)"
