#!/usr/bin/env bash
# Allocation tracing side by side on malloc-4m (../shared/PEERS.md): untraced, `fltrace record
# --allocs` and heaptrack, alternating, ROUNDS times each. Prints per tool the program's own
# run time (it prints how long its loop took), the whole command's wall time (what the user
# waits for: fltrace's includes converting the logs into tables, heaptrack's its interpreter),
# the CPU time of the whole command (user + system, children included: the figure to trust on
# a loaded machine, where wall times stretch), the ratios of medians to untraced, the time and
# peak memory of the report (fltrace report --allocs, heaptrack_print), and the bytes on disk,
# in all and per call (pairs x 2). "fltrace" is the default, which converts large logs while
# the program runs (the drain); "fltrace-end" turns the drain off (FLTRACE_ALLOCS_DRAIN=0):
# every log converted after the program ends.
# usage: bench/allocs.sh [pairs=4000000] [ROUNDS=5]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
pairs=${1:-4000000}; rounds=${2:-5}
work=$(mktemp -d /tmp/fltrace-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$root/scripts/setup.sh" >/dev/null
command -v heaptrack >/dev/null || apt-get install -y -qq heaptrack >/dev/null
fltrace="$root/target/release/fltrace"
gcc -O2 -g -fomit-frame-pointer -o "$work/allocs" "$root/workloads/allocs.c" -ldl -lpthread

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
ratio() { echo "scale=2; $1 / $2" | bc; }

load=$(cut -d' ' -f1-3 /proc/loadavg)
declare -A loop wall cpu
for ((r = 0; r < rounds; r++)); do
    for tool in untraced fltrace fltrace-end heaptrack; do
        dir="$work/$tool-$r"; mkdir -p "$dir"; cd "$dir"
        t0=$(now)
        # /usr/bin/time's user + system time covers the command and everything it waited for.
        case $tool in
            untraced) /usr/bin/time -f "%U %S" -o cpu.txt "$work/allocs" malloc4m "$pairs" >out.txt ;;
            fltrace) /usr/bin/time -f "%U %S" -o cpu.txt "$fltrace" record -q --allocs -- "$work/allocs" malloc4m "$pairs" >out.txt ;;
            fltrace-end) FLTRACE_ALLOCS_DRAIN=0 /usr/bin/time -f "%U %S" -o cpu.txt "$fltrace" record -q --allocs -- "$work/allocs" malloc4m "$pairs" >out.txt ;;
            heaptrack) /usr/bin/time -f "%U %S" -o cpu.txt heaptrack -o "$dir/ht" "$work/allocs" malloc4m "$pairs" >out.txt 2>/dev/null ;;
        esac
        t1=$(now)
        wall[$tool]+="$(echo "$t1 - $t0" | bc) "
        cpu[$tool]+="$(awk '{print $1 + $2}' cpu.txt) "
        loop[$tool]+="$(awk '/^elapsed_s/ {print $2}' out.txt) "
        ((r == rounds - 1)) || rm -rf "$dir"
    done
done

last=$((rounds - 1))
base_loop=$(echo ${loop[untraced]} | tr ' ' '\n' | median)
base_wall=$(echo ${wall[untraced]} | tr ' ' '\n' | median)
printf "malloc-4m: %d malloc/free pairs, %d rounds, medians\n" "$pairs" "$rounds"
printf "load average before: %s\n" "$load"
printf "%-11s %10s %8s %11s %10s %11s %10s\n" tool "loop s" "loop x" "command s" "command x" "command cpu" "cpu x ht"
ht_wall=$(echo ${wall[heaptrack]} | tr ' ' '\n' | median)
ht_cpu=$(echo ${cpu[heaptrack]} | tr ' ' '\n' | median)
for tool in untraced fltrace fltrace-end heaptrack; do
    l=$(echo ${loop[$tool]} | tr ' ' '\n' | median)
    w=$(echo ${wall[$tool]} | tr ' ' '\n' | median)
    c=$(echo ${cpu[$tool]} | tr ' ' '\n' | median)
    printf "%-11s %10.4f %8s %11.3f %10s %11.2f %10s\n" "$tool" "$l" "$(ratio "$l" "$base_loop")" "$w" "$(ratio "$w" "$base_wall")" "$c" "$(ratio "$c" "$ht_cpu")"
done
for tool in fltrace fltrace-end; do
    printf "%s's whole command over heaptrack's: %s (wall), %s (cpu)\n" "$tool" \
        "$(ratio "$(echo ${wall[$tool]} | tr ' ' '\n' | median)" "$ht_wall")" \
        "$(ratio "$(echo ${cpu[$tool]} | tr ' ' '\n' | median)" "$ht_cpu")"
done

cd "$work/fltrace-$last"
report=$( { /usr/bin/time -f "%e %M" "$fltrace" report --allocs >report.txt; } 2>&1 | tail -1)
fbytes=$(cat fltrace-data-alloc*-*.parquet | wc -c)
cd "$work/heaptrack-$last"
hreport=$( { /usr/bin/time -f "%e %M" heaptrack_print ht* >report.txt; } 2>&1 | tail -1)
hbytes=$(cat ht* | wc -c)
calls=$((2 * pairs))
printf "%-10s %12s %12s %14s %14s\n" tool "report s" "report MB" "bytes on disk" "bytes a call"
printf "%-10s %12s %12d %14d %14s\n" fltrace "${report% *}" $(( ${report#* } / 1024 )) "$fbytes" "$(awk -v b="$fbytes" -v c="$calls" 'BEGIN {printf "%.4f", b / c}')"
printf "%-10s %12s %12d %14d %14s\n" heaptrack "${hreport% *}" $(( ${hreport#* } / 1024 )) "$hbytes" "$(awk -v b="$hbytes" -v c="$calls" 'BEGIN {printf "%.4f", b / c}')"
