#!/usr/bin/env bash
# The floor of far-memory emulation on this machine (issue #12): what any userfaultfd handler
# costs per fault on graph with its OpenMP threads, against what fltrace adds. Runs, in
# interleaved rounds (A B C D E A B C D E ...), for each scheduling setup:
#   untraced     the program alone
#   min_uffd     bench/min_uffd.c preloaded: one handler thread, UFFDIO_ZEROPAGE per missing
#                fault, a bump allocator, no recording, no eviction (the floor)
#   min_uffd-sigbus  the same with UFFD_FEATURE_SIGBUS: each fault served in the faulting
#                thread by a SIGBUS handler, no handler thread (the floor of the in-thread path)
#   runtime      fltrace's runtime preloaded alone (no recorder), local memory ample
#   record-plain fltrace record with no far memory: what recording a fault with its stack costs
#                (added per fault of its own first touches)
#   record-true  fltrace record -- true: fltrace's fixed start and end, taken off record-plain's
#                time in the floor line
#   record-ample fltrace record -L=<2x the peak> (no eviction)
#   record-half  fltrace record -L=<half the peak> with FLTRACE_RT_FAULT_PATH=signal (faults
#                served in the faulting thread, where the kernel has UFFD_FEATURE_SIGBUS)
#   record-half-threads   the same with FLTRACE_RT_FAULT_PATH=thread (handler threads serve,
#                         the default)
#   record-half-move      record-half with FLTRACE_RT_MOVE=1 (in the thread, pages moved)
#   record-half-copy      the same with FLTRACE_RT_MOVE=0 (pages copied, not moved)
#   record-half-2handlers the same with FLTRACE_RT_HANDLERS=2 (a handler per CPU)
#   record-half-busy      the same with FLTRACE_RT_BUSY_POLL=1 (the handler never sleeps)
# and prints the median time of each and the time added per handled fault against untraced.
#   record-half-base, record-half-threads-base   record-half and record-half-threads with the
#                binaries of BASE_BIN_DIR (another build, measured in the same rounds)
# Then (unless SCAN_MB=0) the two-threaded scan of workloads/readscan.c (SCAN_MB per thread,
# 4 passes, read-mostly) at -L=<SCAN_MB> (half its peak), untraced and recorded on each path,
# alternating: the time added per handled fault on each (and on each path with BASE_BIN_DIR's
# binaries, when given).
# Scheduling setups: "spin" (OpenMP default: threads spin-wait), "passive"
# (OMP_WAIT_POLICY=passive), "1thread" (OMP_NUM_THREADS=1: the handler has a CPU to itself),
# "pinned" (taskset -c 0: program, handler and recorder share one CPU).
# With autogroup scheduling (kernel.sched_autogroup_enabled=1) nice only orders processes of
# one session; run it in a session of its own with a raised share to get the CPUs from the
# niced builds of other sessions:
#   setsid bash -c 'echo -20 >/proc/self/autogroup; bench/farmem-floor.sh 18 5'
# usage: bench/farmem-floor.sh [scale=18] [ROUNDS=5] [setups="spin passive 1thread pinned"]
#        [configs="untraced min_uffd min_uffd-sigbus runtime record-ample record-half
#                  record-half-threads"]
# The in-thread path against the handler-thread path (issue #38), bfs-g20 at half its peak:
#   bench/farmem-floor.sh 20 3 spin
# Whether 2x untraced is within reach at all (the floor line: fill + recording + eviction per
# fault against the budget 2x leaves):
#   SCAN_MB=0 bench/farmem-floor.sh 20 3 spin "untraced min_uffd-sigbus record-true record-plain record-half"
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
scale=${1:-18}; rounds=${2:-5}
read -ra setups <<<"${3:-spin passive 1thread pinned}"
read -ra configs <<<"${4:-untraced min_uffd min_uffd-sigbus runtime record-ample record-half record-half-threads}"
work=$(mktemp -d /tmp/fltrace-floor.XXXXXX)
trap 'rm -rf "$work"' EXIT
# FLTRACE_BIN_DIR: binaries copied aside, so that a build meanwhile does not change them mid-run.
bin=${FLTRACE_BIN_DIR:-$root/target/release}
fltrace="$bin/fltrace"
base_fltrace=${BASE_BIN_DIR:+$BASE_BIN_DIR/fltrace}
lib="$bin/libfltrace_preload.so"
gcc -O2 -g -fopenmp -o "$work/graph" "$root/workloads/graph.c"
gcc -O2 -shared -fPIC -o "$work/min_uffd.so" "$root/bench/min_uffd.c" -lpthread
gcc -O2 -g -o "$work/readscan" "$root/workloads/readscan.c" -lpthread

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
stat_of() { grep -o "[ ,]$2:[0-9]*" "$1" | tail -1 | cut -d: -f2; }

peak_kb=$(/usr/bin/time -f %M "$work/graph" "$scale" 1 2>&1 >/dev/null | tail -1)
peak_mb=$(( (peak_kb + 1023) / 1024 ))
half=$(( peak_mb / 2 )); ample=$(( peak_mb * 2 )); max=$(( peak_mb * 4 ))
echo "graph $scale: peak ${peak_mb} MB; ample -L=$ample, half -L=$half, -M=$max; ${rounds} rounds; $(nproc) CPUs"

# Runs a command, its wall time and CPU time (user + system, its children's too: the program
# under fltrace record) into $wall and $cpu.
timed() {
    /usr/bin/time -o "$work/time" -f "%e %U %S" "$@"
    read -r wall user sys <"$work/time"
    cpu=$(echo "$user + $sys" | bc)
}

# Runs one config under one setup; prints "seconds cpu-seconds faults evict-ns" (the last the
# runtime's eviction time, from record-* runs' stats files).
run() {
    local setup=$1 config=$2 dir="$work/run" prefix=() faults=0 evict_ns=0
    rm -rf "$dir"; mkdir -p "$dir"; cd "$dir"
    case $setup in
        spin) prefix=(env) ;;
        passive) prefix=(env OMP_WAIT_POLICY=passive) ;;
        1thread) prefix=(env OMP_NUM_THREADS=1) ;;
        pinned) prefix=(taskset -c 0 env) ;;
    esac
    case $config in
        untraced) timed "${prefix[@]}" "$work/graph" "$scale" 1 >/dev/null ;;
        min_uffd|min_uffd-sigbus)
            local sigbus=0; [[ $config == min_uffd-sigbus ]] && sigbus=1
            timed "${prefix[@]}" LD_PRELOAD="$work/min_uffd.so" MIN_UFFD_VERBOSE=1 MIN_UFFD_SIGBUS=$sigbus "$work/graph" "$scale" 1 >/dev/null 2>"$dir/err"
            faults=$(grep -o '[0-9]* faults served' "$dir/err" | cut -d' ' -f1) ;;
        runtime)
            # No recorder, so no stats file: its faults are min_uffd's (the same first touches).
            timed "${prefix[@]}" LD_PRELOAD="$lib" FLTRACE_RT_LOCAL_PAGES=$((ample * 256)) FLTRACE_RT_MAX_PAGES=$((max * 256)) "$work/graph" "$scale" 1 >/dev/null ;;
        record-true) timed "${prefix[@]}" "$fltrace" record -q -- true ;;
        record-plain)
            timed "${prefix[@]}" "$fltrace" record -- "$work/graph" "$scale" 1 >/dev/null 2>"$dir/err"
            faults=$(grep -o '[0-9]* faults from' "$dir/err" | cut -d' ' -f1) ;;
        record-*)
            local l=$half knobs=() exe=$fltrace
            if [[ $config == *-base ]]; then
                exe=${base_fltrace:?"BASE_BIN_DIR is needed for $config"}
                config=${config%-base}
            fi
            case $config in
                record-ample) l=$ample ;;
                record-half) knobs=(FLTRACE_RT_FAULT_PATH=signal) ;;
                record-half-threads) knobs=(FLTRACE_RT_FAULT_PATH=thread) ;;
                record-half-move) knobs=(FLTRACE_RT_FAULT_PATH=signal FLTRACE_RT_MOVE=1) ;;
                record-half-copy) knobs=(FLTRACE_RT_MOVE=0) ;;
                record-half-2handlers) knobs=(FLTRACE_RT_HANDLERS=2) ;;
                record-half-busy) knobs=(FLTRACE_RT_BUSY_POLL=1) ;;
            esac
            timed "${prefix[@]}" "${knobs[@]}" "$exe" record -q -L=$l -M=$max -- "$work/graph" "$scale" 1 >/dev/null
            local stats; stats=$(ls "$dir"/fltrace-data-stats-*.out | head -1)
            faults=$(stat_of "$stats" rt_faults); evict_ns=$(stat_of "$stats" rt_evict_ns) ;;
    esac
    echo "$wall $cpu ${faults:-0} ${evict_ns:-0}"
}

# Prints one config's line: medians of wall and CPU time, and the time each adds per fault
# against the untraced medians $u (wall) and $uc (CPU). $1 name, $2 walls, $3 CPU times,
# $4 faults.
summary() {
    local t c f=$4 added="-" added_cpu="-"
    t=$(printf '%s\n' $2 | median); c=$(printf '%s\n' $3 | median)
    if ((f > 0)); then
        added=$(echo "scale=1; ($t - $u) * 1000000 / $f" | bc)
        added_cpu=$(echo "scale=1; ($c - $uc) * 1000000 / $f" | bc)
    fi
    echo "  $1: median ${t}s ($(echo "scale=2; $t / $u" | bc)x), CPU ${c}s ($(echo "scale=2; $c / $uc" | bc)x), ${f} faults, added per fault ${added} us (CPU ${added_cpu} us); runs: $2"
}

# The value of the bc expression $1 to two decimals (bc alone prints ".92").
calc() { printf '%.2f' "$(echo "scale=6; $1" | bc)"; }

# Added us per fault of config $1 against untraced (wall), from the medians; empty when not run.
added_of() {
    local f=${faults[$1]:-0} t
    ((f > 0)) || return 0
    t=$(printf '%s\n' ${times[$1]} | median)
    calc "($t - $u) * 1000000 / $f"
}

# What each part of a record-half fault costs, against what "at most 2x untraced" leaves it:
# the in-thread floor (min_uffd-sigbus: a fault delivered to its thread and a zero page
# placed, no eviction, no recording), recording a fault with its stack (record-plain less
# record-true's fixed start and end when run), both wall time added, and the runtime's
# eviction time per fault (record-half's stats file, median: summed over the threads that
# evicted, so to be read against the CPU budget). $1 record-half's faults, $2 its eviction
# times (ns).
floor() {
    local f=$1 fill rec evict plain fixed=0
    ((f > 0 && ${faults[record-plain]:-0} > 0)) || return 0
    fill=$(added_of min_uffd-sigbus)
    [[ -n $fill ]] || return 0
    plain=$(printf '%s\n' ${times[record-plain]} | median)
    [[ -n ${times[record-true]:-} ]] && fixed=$(printf '%s\n' ${times[record-true]} | median)
    rec=$(calc "($plain - $u - $fixed) * 1000000 / ${faults[record-plain]}")
    evict=$(calc "$(printf '%s\n' $2 | median) / 1000 / $f")
    echo "  floor of record-half per fault: fill $fill us + recording $rec us (wall) + eviction $evict us (thread time) = $(calc "$fill + $rec + $evict") us; at most 2x untraced leaves $(calc "$u * 1000000 / $f") us of wall time a fault, $(calc "$uc * 1000000 / $f") us of CPU ($f faults; untraced ${u}s, ${uc}s CPU)"
}

for setup in "${setups[@]}"; do
    declare -A times=() cpus=() faults=() evicts=()
    for ((r = 0; r < rounds; r++)); do
        for config in "${configs[@]}"; do
            read -r t c f e < <(run "$setup" "$config")
            times[$config]+="$t "; cpus[$config]+="$c "; faults[$config]=$f; evicts[$config]+="$e "
        done
    done
    u=$(printf '%s\n' ${times[untraced]:-0} | median)
    uc=$(printf '%s\n' ${cpus[untraced]:-0} | median)
    echo "setup $setup (load $(cut -d' ' -f1-3 /proc/loadavg)):"
    for config in "${configs[@]}"; do
        f=${faults[$config]}; [[ $config == runtime ]] && f=${faults[min_uffd]:-${faults[min_uffd-sigbus]:-0}}
        summary "$config" "${times[$config]}" "${cpus[$config]}" "$f"
    done
    floor "${faults[record-half]:-0}" "${evicts[record-half]:-}"
    unset times cpus faults evicts
done
# The two-threaded scan: untraced, then recorded on each path, alternating.
scan_mb=${SCAN_MB:-128}
if ((scan_mb > 0)); then
    scan_peak_kb=$(/usr/bin/time -f %M "$work/readscan" "$scan_mb" 4 2>&1 >/dev/null | tail -1)
    scan_peak=$(( (scan_peak_kb + 1023) / 1024 ))
    declare -A stimes=() scpus=() sfaults=()
    scan_configs=(untraced in-thread threads)
    [[ -n $base_fltrace ]] && scan_configs+=(in-thread-base threads-base)
    for ((r = 0; r < rounds; r++)); do
        for config in "${scan_configs[@]}"; do
            dir="$work/scan"; rm -rf "$dir"; mkdir -p "$dir"; cd "$dir"
            knobs=(FLTRACE_RT_FAULT_PATH=thread); [[ $config == in-thread* ]] && knobs=(FLTRACE_RT_FAULT_PATH=signal)
            exe=$fltrace; [[ $config == *-base ]] && exe=$base_fltrace
            if [[ $config == untraced ]]; then
                timed "$work/readscan" "$scan_mb" 4 >/dev/null
            else
                timed env "${knobs[@]}" "$exe" record -q -L="$scan_mb" -M=$(( scan_peak * 4 )) -- "$work/readscan" "$scan_mb" 4 >/dev/null
                sfaults[$config]=$(stat_of "$(ls "$dir"/fltrace-data-stats-*.out | head -1)" rt_faults)
            fi
            stimes[$config]+="$wall "; scpus[$config]+="$cpu "
        done
    done
    u=$(printf '%s\n' ${stimes[untraced]} | median)
    uc=$(printf '%s\n' ${scpus[untraced]} | median)
    echo "readscan 2x${scan_mb} MB, 4 passes, -L=$scan_mb (peak ${scan_peak} MB) (load $(cut -d' ' -f1-3 /proc/loadavg)):"
    for config in "${scan_configs[@]}"; do
        summary "$config" "${stimes[$config]}" "${scpus[$config]}" "${sfaults[$config]:-0}"
    done
fi
echo "(bench/farmem-floor.sh $scale $rounds \"${setups[*]}\" \"${configs[*]}\"; SCAN_MB=$scan_mb${BASE_BIN_DIR:+; BASE_BIN_DIR=$BASE_BIN_DIR})"
