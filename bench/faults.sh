#!/usr/bin/env bash
# Page-fault recording side by side on touch-512 (../shared/PEERS.md): untraced, fltrace
# record, perf record -g (frame pointers, on a frame-pointer build) and perf --call-graph
# dwarf, alternating, ROUNDS times each. Prints, per tool: slowdown (ratio of medians), faults
# kept, bytes on disk per fault, share of stacks that reach main or a thread start, and the
# recorder's peak memory.
# usage: bench/faults.sh [MiB=512] [rounds-of-touch=4] [ROUNDS=3]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mib=${1:-512}; passes=${2:-4}; rounds=${3:-3}
work=$(mktemp -d /tmp/fltrace-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$root/scripts/setup.sh" >/dev/null
command -v perf >/dev/null || { apt-get install -y -qq linux-perf >/dev/null; }
fltrace="$root/target/release/fltrace"
gcc -O2 -g -fomit-frame-pointer -o "$work/touch" "$root/workloads/touch.c"
gcc -O2 -g -fno-omit-frame-pointer -o "$work/touch_fp" "$root/workloads/touch.c"
expected=$((mib * 256 * passes))

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

declare -A times
for ((r = 0; r < rounds; r++)); do
    for tool in untraced fltrace perf-fp perf-dwarf; do
        dir="$work/$tool-$r"; mkdir -p "$dir"; cd "$dir"
        t0=$(now)
        case $tool in
            untraced) "$work/touch" "$mib" "$passes" ;;
            fltrace) "$fltrace" record -- "$work/touch" "$mib" "$passes" 2>"$dir/fltrace.err" ;;
            perf-fp) perf record -q -o perf.data -e page-faults -c 1 -g -- "$work/touch_fp" "$mib" "$passes" 2>/dev/null ;;
            perf-dwarf) perf record -q -o perf.data -e page-faults -c 1 --call-graph dwarf -- "$work/touch" "$mib" "$passes" 2>/dev/null ;;
        esac
        t1=$(now)
        times[$tool]+="$(echo "$t1 - $t0" | bc) "
        # Keep only the last round's output for the counts below.
        ((r == rounds - 1)) || rm -rf "$dir"
    done
done

base=$(echo ${times[untraced]} | tr ' ' '\n' | median)
last=$((rounds - 1))
reach_main='import sys,json
d=json.load(sys.stdin); ok=tot=0
for g in d["groups"]:
    st=g.get("stack") or []
    tot+=g["count"]
    if st and st[-1]["function"] in ("_start","main","start_thread","clone3","clone"): ok+=g["count"]
print(f"{ok/tot:.4f}" if tot else "0")'
perf_reach_main='import sys
ok=tot=0; last=None; insample=False
for line in sys.stdin:
    s=line.strip()
    if not s:
        if insample:
            tot+=1; ok+= last in ("_start","main","start_thread","clone3","clone","__libc_start_main_impl","__libc_start_call_main")
        insample=False; last=None; continue
    if line[0] not in " \t": insample=True; continue
    parts=s.split(None,1)
    if len(parts)>1: last=parts[1].split("+")[0].split(" (")[0]
print(f"{ok/tot:.4f}" if tot else "0")'

printf "%-11s %9s %12s %14s %12s %10s\n" tool slowdown faults_kept bytes/fault reach_main peak_rss
printf "%-11s %9s %12s %14s %12s %10s\n" untraced "1.00x" "$expected" - - -
for tool in fltrace perf-fp perf-dwarf; do
    med=$(echo ${times[$tool]} | tr ' ' '\n' | median)
    ratio=$(echo "scale=2; $med / $base" | bc)
    dir="$work/$tool-$last"; cd "$dir"
    case $tool in
        fltrace)
            pid=$(ls fltrace-data-faults-*.parquet | grep -o '[0-9]\+' | head -1)
            kept=$(grep -o 'faults:[0-9]*' "fltrace-data-stats-$pid.out" | tail -1 | cut -d: -f2)
            bytes=$(cat fltrace-data-faults-*.parquet fltrace-data-stacks-*.parquet fltrace-data-mmaps-*.parquet | wc -c)
            share=$("$fltrace" report --by stack --top 0 --format json | python3 -c "$reach_main")
            rss=$(grep -o 'recorder peak [0-9]* MB' "$dir/fltrace.err" | grep -o '[0-9]*' || echo "?")
            rss="${rss} MB" ;;
        perf-*)
            kept=$(perf report -i perf.data --stats 2>/dev/null | grep -m1 'SAMPLE events:' | grep -o '[0-9][0-9,]*' | head -1 | tr -d ,)
            bytes=$(stat -c %s perf.data)
            share=$(perf script -i perf.data -F comm,tid,ip,sym 2>/dev/null | python3 -c "$perf_reach_main")
            rss="-" ;;
    esac
    printf "%-11s %8sx %12s %14s %12s %10s\n" "$tool" "$ratio" "$kept" "$(echo "scale=1; $bytes / ($kept + 0.0001)" | bc)" "$share" "$rss"
done
echo "(touch $mib MiB x $passes, $rounds alternating rounds, untraced median ${base}s; bench/faults.sh $mib $passes $rounds)"
