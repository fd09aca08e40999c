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
#  5. per-fetch latency (median, p99) against a minimal userfaultfd handler;
#  and (issue #12) where each handled fault's time goes, from the stats file, for the runtime
#  with each of its changes switched off in turn, and the peak RSS of a read-mostly
#  two-threaded scan (workloads/readscan.c, READSCAN_MB per thread) at half its peak.
# usage: bench/farmem.sh [scale=20] [ROUNDS=3]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
scale=${1:-20}; rounds=${2:-3}
work=$(mktemp -d /tmp/fltrace-farmem.XXXXXX)
trap 'rm -rf "$work"' EXIT
# SKIP_SETUP=1: use the release build as it is (setup.sh would wait for a cargo build).
[[ ${SKIP_SETUP:-0} == 1 ]] || "$root/scripts/setup.sh" >/dev/null
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
# Where each handled fault's time went (the runtime's and the recorder's breakdown in the stats
# file): per handled fault in us, counts per handled fault. $1 stats file, $2 label.
per() { echo "scale=2; ${1:-0} / ${2:-1}" | bc; }
breakdown() {
    local s=$1 n m
    n=$(stat_of "$s" rt_faults); n=${n:-1}; ((n > 0)) || n=1
    m=$(stat_of "$s" rt_matched); m=${m:-1}; ((m > 0)) || m=1
    echo "  breakdown ($2), per handled fault ($n faults, $(stat_of "$s" rt_msgs) messages in $(stat_of "$s" rt_reads) reads):"
    echo "    fault -> handler reads it: $(per "$(stat_of "$s" rt_wait_ns)" $((m * 1000))) us (p50 <$(( $(stat_of "$s" rt_wait_p50_ns) / 1000 )) us, p99 <$(( $(stat_of "$s" rt_wait_p99_ns) / 1000 )) us); fault -> resolved: $(per "$(stat_of "$s" rt_resolve_ns)" $((m * 1000))) us"
    echo "    handler work: $(per "$(stat_of "$s" rt_handle_ns)" $((n * 1000))) us (p50 <$(( $(stat_of "$s" rt_handle_p50_ns) / 1000 )) us, p99 <$(( $(stat_of "$s" rt_handle_p99_ns) / 1000 )) us): eviction $(per "$(stat_of "$s" rt_evict_ns)" $((n * 1000))) (write-protect $(per "$(stat_of "$s" rt_evict_wp_ns)" $((n * 1000))), copy $(per "$(stat_of "$s" rt_evict_copy_ns)" $((n * 1000))), MADV_DONTNEED $(per "$(stat_of "$s" rt_evict_drop_ns)" $((n * 1000)))), fill ioctl $(per "$(stat_of "$s" rt_fill_ns)" $((n * 1000))), lock wait $(per "$(stat_of "$s" rt_lock_wait_ns)" $((n * 1000)))"
    echo "    program threads waiting for a CPU: $(per "$(stat_of "$s" program_run_delay_ns)" $((n * 1000))) us; handler threads waiting for a CPU: $(per "$(stat_of "$s" handler_run_delay_ns)" $((n * 1000))) us; handler CPU: $(per "$(stat_of "$s" handler_cpu_ns)" $((n * 1000))) us; recorder CPU: $(per "$(stat_of "$s" recorder_cpu_ns)" $((n * 1000))) us; program CPU: $(per "$(stat_of "$s" program_cpu_ns)" $((n * 1000))) us"
    echo "    TLB shootdowns received $(per "$(stat_of "$s" tlb_remote)" "$n"), local $(per "$(stat_of "$s" tlb_local)" "$n"), IPIs sent $(per "$(stat_of "$s" ipi_sent)" "$n"), context switches $(per "$(stat_of "$s" context_switches)" "$n"); evicted pages $(per "$(stat_of "$s" evict_pages_done)" "$n") ($(stat_of "$s" rt_evict_ahead_pages) ahead of need)"
}

# Peak of the untraced program, from its own rusage.
peak_kb=$(/usr/bin/time -f %M "$work/graph" "$scale" 1 2>&1 >/dev/null | tail -1)
peak_mb=$(( (peak_kb + 1023) / 1024 ))
half=$(( peak_mb / 2 )); max=$(( peak_mb * 2 ))
echo "graph $scale: peak ${peak_mb} MB untraced; far memory runs use -L=$half -M=$max"

# The runtime's changes of issue #12 side by side, each switched off alone, and all of them
# (the runtime as it was): alternating with the untraced program, ROUNDS times each.
configs=("default" "FLTRACE_RT_MOVE=0" "FLTRACE_RT_REALTIME=1" "FLTRACE_RT_EVICT_AHEAD=0" "FLTRACE_RT_MOVE=0 FLTRACE_RT_EVICT_AHEAD=0 FLTRACE_RT_CLEAN_COPIES=100")
untraced=(); declare -A traced
for ((r = 0; r < rounds; r++)); do
    for ((c = 0; c < ${#configs[@]}; c++)); do
        t0=$(now); "$work/graph" "$scale" 1 >/dev/null; t1=$(now)
        untraced+=("$(echo "$t1 - $t0" | bc)")
        dir="$work/far-$c-$r"; mkdir -p "$dir"; cd "$dir"
        knobs=(); [[ ${configs[$c]} == default ]] || read -ra knobs <<<"${configs[$c]}"
        t0=$(now); env "${knobs[@]}" "$fltrace" record -q -L=$half -M=$max -- "$work/graph" "$scale" 1 >/dev/null; t1=$(now)
        traced[$c]+="$(echo "$t1 - $t0" | bc) "
    done
done
# One more run of each, untimed, for the breakdown: with the TLB and IPI counters, which the
# timed runs leave off (closing them costs the program 30-50 ms each at exit).
for ((c = 0; c < ${#configs[@]}; c++)); do
    dir="$work/far-$c-breakdown"; mkdir -p "$dir"; cd "$dir"
    knobs=(); [[ ${configs[$c]} == default ]] || read -ra knobs <<<"${configs[$c]}"
    env FLTRACE_RT_TLB_COUNT=1 "${knobs[@]}" "$fltrace" record -q -L=$half -M=$max -- "$work/graph" "$scale" 1 >/dev/null
done
u=$(printf '%s\n' "${untraced[@]}" | median)
echo "graph untraced: median ${u}s of $((rounds * ${#configs[@]})) runs; load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((c = 0; c < ${#configs[@]}; c++)); do
    t=$(printf '%s\n' ${traced[$c]} | median)
    stats=$(ls "$work/far-$c-breakdown"/fltrace-data-stats-*.out | head -1)
    echo "graph at half the peak, ${configs[$c]}: $(echo "scale=2; $t / $u" | bc)x (traced ${t}s, runs: ${traced[$c]})"
    echo "  runtime handled $(stat_of "$stats" rt_faults) faults ($(stat_of "$stats" faults_fetch) fetches, $(stat_of "$stats" evict_pages_done) evictions); trace rows $(stat_of "$stats" faults); unmatched log entries $(stat_of "$stats" rt_unmatched); rows the kernel resolved alone $(stat_of "$stats" rt_rows_unhandled); lost $(stat_of "$stats" lost)"
    echo "  local memory peak $(( $(stat_of "$stats" memory_used) / 1048576 )) MB of -L $half MB; process peak RSS $(( $(stat_of "$stats" hwm) / 1048576 )) MB (untraced ${peak_mb} MB)"
    echo "  added time per handled fault: $(echo "scale=2; ($t - $u) * 1000000 / $(stat_of "$stats" rt_faults)" | bc) us"
    breakdown "$stats" "a run with the TLB counters"
done

# Read-mostly: two threads each scanning their own array, at half the program's peak. The
# clean copies held twice are bounded (default 10% of -L) against kept (100, as before).
rs_mb=${READSCAN_MB:-128}
gcc -O2 -g -o "$work/readscan" "$root/workloads/readscan.c" -lpthread
rs_kb=$(/usr/bin/time -f %M "$work/readscan" "$rs_mb" 4 2>&1 >/dev/null | tail -1)
rs_peak=$(( (rs_kb + 1023) / 1024 )); rs_half=$(( rs_peak / 2 ))
# Moving pages (the default) holds none twice; copying keeps clean copies up to 10% or 100%.
for copies in move 10 100; do
    dir="$work/readscan-$copies"; mkdir -p "$dir"; cd "$dir"
    knobs=(FLTRACE_RT_MOVE=0 FLTRACE_RT_CLEAN_COPIES=$copies); [[ $copies == move ]] && knobs=(FLTRACE_RT_MOVE=1)
    t0=$(now); env "${knobs[@]}" "$fltrace" record -q -L=$rs_half -M=$(( rs_peak * 2 )) -- "$work/readscan" "$rs_mb" 4 >/dev/null; t1=$(now)
    stats=$(ls "$dir"/fltrace-data-stats-*.out | head -1)
    hwm=$(( $(stat_of "$stats" hwm) / 1048576 ))
    echo "readscan 2x${rs_mb} MB, 4 passes, -L=$rs_half (peak ${rs_peak} MB untraced), ${knobs[*]}: peak RSS ${hwm} MB = $(echo "scale=3; $hwm / $rs_peak" | bc)x, $(echo "$t1 - $t0" | bc)s, $(stat_of "$stats" rt_faults) faults, $(stat_of "$stats" evict_writes) evictions written to the store"
    breakdown "$stats" "readscan, ${knobs[*]}"
done

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
