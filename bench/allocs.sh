#!/usr/bin/env bash
# Allocation tracing side by side on malloc-4m (../shared/PEERS.md): untraced, `fltrace record
# --allocs` and heaptrack, alternating, ROUNDS times each, at each number of malloc/free pairs
# (default 4M and 20M pairs: 8M and 40M calls). Prints every round (its load average, each
# tool's whole command in wall and CPU time, fltrace's over heaptrack's) and then per tool the
# program's own run time (it prints how long its loop took), the whole command's wall time
# (what the user waits for: fltrace's includes converting the logs into tables, heaptrack's
# its interpreter), the CPU time of the whole command (user + system, children included: the
# figure to trust on a loaded machine, where wall times stretch) and the ratios of medians,
# then the bytes on disk, in all and per call (pairs x 2). "fltrace" is the default, which
# converts large logs while the program runs (the drain); with END=1 "fltrace-end" also runs,
# the drain off (FLTRACE_ALLOCS_DRAIN=0): every log converted after the program ends; with
# NOPAIR=1 "fltrace-nopair", without pairing the calls for the reports while converting them
# (FLTRACE_ALLOCS_PAIR=0: what that costs); with BASE=<another fltrace binary> "fltrace-base",
# that binary's `record --allocs` (a build before a change, measured in the same rounds, its
# preload library beside it). The report side (report --allocs against
# heaptrack_print) is bench/allocs_report.sh.
# usage: bench/allocs.sh ["PAIRS ..."=4000000 20000000] [ROUNDS=3]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
sizes=${1:-4000000 20000000}; rounds=${2:-3}
work=$(mktemp -d /tmp/fltrace-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
command -v heaptrack >/dev/null || "$root/scripts/setup.sh" >/dev/null
fltrace=${FLTRACE:-$root/target/release/fltrace}
gcc -O2 -g -fomit-frame-pointer -o "$work/allocs" "$root/workloads/allocs.c" -ldl -lpthread
tools=(untraced fltrace heaptrack)
[[ -n ${END:-} ]] && tools+=(fltrace-end)
[[ -n ${NOPAIR:-} ]] && tools+=(fltrace-nopair)
[[ -n ${BASE:-} ]] && tools+=(fltrace-base)

now() { date +%s.%N; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# $1 / $2 to three decimals, rounded (bc's scale truncates: 0.609 was printed 0.60); "-"
# when $2 is 0.
ratio() {
    if [[ $(echo "$2 == 0" | bc) == 1 ]]; then echo -; return; fi
    printf '%.3f' "$(echo "scale=6; $1 / $2" | bc)"
}

for pairs in $sizes; do
    declare -A loop=() wall=() cpu=()
    calls=$((2 * pairs))
    printf "malloc-4m: %d malloc/free pairs (%dM calls), %d rounds\n" "$pairs" $((calls / 1000000)) "$rounds"
    printf "%-6s %-15s %-22s %-22s %-14s\n" round load "fltrace wall (cpu)" "heaptrack wall (cpu)" "ratio wall (cpu)"
    for ((r = 0; r < rounds; r++)); do
        load=$(cut -d' ' -f1-3 /proc/loadavg)
        declare -A this_wall=() this_cpu=()
        for tool in "${tools[@]}"; do
            dir="$work/$tool-$pairs-$r"; mkdir -p "$dir"; cd "$dir"
            t0=$(now)
            # /usr/bin/time's user + system time covers the command and everything it waited for.
            case $tool in
                untraced) /usr/bin/time -f "%U %S" -o cpu.txt "$work/allocs" malloc4m "$pairs" >out.txt ;;
                fltrace) /usr/bin/time -f "%U %S" -o cpu.txt "$fltrace" record -q --allocs -- "$work/allocs" malloc4m "$pairs" >out.txt ;;
                fltrace-end) FLTRACE_ALLOCS_DRAIN=0 /usr/bin/time -f "%U %S" -o cpu.txt "$fltrace" record -q --allocs -- "$work/allocs" malloc4m "$pairs" >out.txt ;;
                fltrace-nopair) FLTRACE_ALLOCS_PAIR=0 /usr/bin/time -f "%U %S" -o cpu.txt "$fltrace" record -q --allocs -- "$work/allocs" malloc4m "$pairs" >out.txt ;;
                fltrace-base) /usr/bin/time -f "%U %S" -o cpu.txt "$BASE" record -q --allocs -- "$work/allocs" malloc4m "$pairs" >out.txt ;;
                heaptrack) /usr/bin/time -f "%U %S" -o cpu.txt heaptrack -o "$dir/ht" "$work/allocs" malloc4m "$pairs" >out.txt 2>/dev/null ;;
            esac
            t1=$(now)
            this_wall[$tool]=$(echo "$t1 - $t0" | bc)
            this_cpu[$tool]=$(awk '{print $1 + $2}' cpu.txt)
            wall[$tool]+="${this_wall[$tool]} "
            cpu[$tool]+="${this_cpu[$tool]} "
            loop[$tool]+="$(awk '/^elapsed_s/ {print $2}' out.txt) "
            ((r == rounds - 1)) || { cd "$work"; rm -rf "$dir"; }
        done
        printf "%-6s %-15s %-22s %-22s %-14s\n" $((r + 1)) "$load" \
            "$(printf "%.3f s (%.2f s)" "${this_wall[fltrace]}" "${this_cpu[fltrace]}")" \
            "$(printf "%.3f s (%.2f s)" "${this_wall[heaptrack]}" "${this_cpu[heaptrack]}")" \
            "$(ratio "${this_wall[fltrace]}" "${this_wall[heaptrack]}")x ($(ratio "${this_cpu[fltrace]}" "${this_cpu[heaptrack]}")x)"
    done
    base_loop=$(echo ${loop[untraced]} | median)
    base_wall=$(echo ${wall[untraced]} | median)
    ht_wall=$(echo ${wall[heaptrack]} | median)
    ht_cpu=$(echo ${cpu[heaptrack]} | median)
    printf "medians:\n%-11s %10s %8s %11s %10s %11s %10s %10s\n" tool "loop s" "loop x" "command s" "command x" "command cpu" "wall x ht" "cpu x ht"
    for tool in "${tools[@]}"; do
        l=$(echo ${loop[$tool]} | median)
        w=$(echo ${wall[$tool]} | median)
        c=$(echo ${cpu[$tool]} | median)
        printf "%-11s %10.4f %8s %11.3f %10s %11.2f %10s %10s\n" "$tool" "$l" "$(ratio "$l" "$base_loop")" "$w" "$(ratio "$w" "$base_wall")" "$c" "$(ratio "$w" "$ht_wall")" "$(ratio "$c" "$ht_cpu")"
    done
    last=$((rounds - 1))
    fbytes=$(cat "$work/fltrace-$pairs-$last"/fltrace-data-alloc*-*.parquet | wc -c)
    hbytes=$(cat "$work/heaptrack-$pairs-$last"/ht* | wc -c)
    printf "%-10s %14s %14s\n" tool "bytes on disk" "bytes a call"
    printf "%-10s %14d %14s\n" fltrace "$fbytes" "$(awk -v b="$fbytes" -v c="$calls" 'BEGIN {printf "%.4f", b / c}')"
    printf "%-10s %14d %14s\n" heaptrack "$hbytes" "$(awk -v b="$hbytes" -v c="$calls" 'BEGIN {printf "%.4f", b / c}')"
    rm -rf "$work"/*-"$pairs"-*
    echo
done
printf "load average after: %s\n" "$(cut -d' ' -f1-3 /proc/loadavg)"
