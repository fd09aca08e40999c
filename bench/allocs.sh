#!/usr/bin/env bash
# Allocation tracing side by side on malloc-4m (../shared/PEERS.md): untraced, `fltrace record
# --allocs` and heaptrack, alternating, ROUNDS times each. Prints per tool the program's own
# run time (it prints how long its loop took), the whole command's wall time, the ratios of
# medians to untraced, the time and peak memory of the report (fltrace report --allocs,
# heaptrack_print), and the bytes on disk.
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

declare -A loop wall
for ((r = 0; r < rounds; r++)); do
    for tool in untraced fltrace heaptrack; do
        dir="$work/$tool-$r"; mkdir -p "$dir"; cd "$dir"
        t0=$(now)
        case $tool in
            untraced) "$work/allocs" malloc4m "$pairs" >out.txt ;;
            fltrace) "$fltrace" record -q --allocs -- "$work/allocs" malloc4m "$pairs" >out.txt ;;
            heaptrack) heaptrack -o "$dir/ht" "$work/allocs" malloc4m "$pairs" >out.txt 2>/dev/null ;;
        esac
        t1=$(now)
        wall[$tool]+="$(echo "$t1 - $t0" | bc) "
        loop[$tool]+="$(awk '/^elapsed_s/ {print $2}' out.txt) "
        ((r == rounds - 1)) || rm -rf "$dir"
    done
done

last=$((rounds - 1))
base_loop=$(echo ${loop[untraced]} | tr ' ' '\n' | median)
base_wall=$(echo ${wall[untraced]} | tr ' ' '\n' | median)
printf "malloc-4m: %d malloc/free pairs, %d rounds, medians\n" "$pairs" "$rounds"
printf "%-10s %12s %10s %12s %10s\n" tool "loop s" "loop x" "command s" "command x"
for tool in untraced fltrace heaptrack; do
    l=$(echo ${loop[$tool]} | tr ' ' '\n' | median)
    w=$(echo ${wall[$tool]} | tr ' ' '\n' | median)
    printf "%-10s %12.4f %10s %12.3f %10s\n" "$tool" "$l" "$(ratio "$l" "$base_loop")" "$w" "$(ratio "$w" "$base_wall")"
done

cd "$work/fltrace-$last"
report=$( { /usr/bin/time -f "%e %M" "$fltrace" report --allocs >report.txt; } 2>&1 | tail -1)
fbytes=$(cat fltrace-data-allocs-*.parquet fltrace-data-allocstacks-*.parquet | wc -c)
cd "$work/heaptrack-$last"
hreport=$( { /usr/bin/time -f "%e %M" heaptrack_print ht* >report.txt; } 2>&1 | tail -1)
hbytes=$(cat ht* | wc -c)
printf "%-10s %12s %12s %14s\n" tool "report s" "report MB" "bytes on disk"
printf "%-10s %12s %12d %14d\n" fltrace "${report% *}" $(( ${report#* } / 1024 )) "$fbytes"
printf "%-10s %12s %12d %14d\n" heaptrack "${hreport% *}" $(( ${hreport#* } / 1024 )) "$hbytes"
