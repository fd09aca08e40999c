#!/usr/bin/env bash
# Mapping churn (workloads/churn.c): one thread maps a page, touches it and unmaps it, CYCLES
# times (3 events a cycle: the mapping, its fault, the unmapping). For each count: the time
# untraced and under `fltrace record` (release build, default buffer), the events a second the
# recorder took in with what it lost, its peak memory and its own CPU time, and the sizes of procmaps
# and the mmaps table.
# usage: bench/churn.sh [CYCLES...]   (default: 200000 2000000)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
counts=("$@"); ((${#counts[@]})) || counts=(200000 2000000)
work=$(mktemp -d /tmp/fltrace-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
fltrace="$root/target/release/fltrace"
[[ -x $fltrace ]] || (cd "$root" && cargo build --release --locked -p fltrace -p fltrace-preload >/dev/null)
gcc -O2 -g -fomit-frame-pointer -o "$work/churn" "$root/workloads/churn.c"

now() { date +%s.%N; }
# The program's file of a kind, beside the smaller one of `time` that runs it.
largest() { stat -c %s $1 | sort -n | tail -1; }
printf '%10s %10s %10s %14s %6s %12s %14s %12s %12s\n' cycles untraced_s traced_s events_per_s lost peak_MB recorder_cpu_s procmaps_B mmaps_B
for cycles in "${counts[@]}"; do
    t0=$(now); "$work/churn" "$cycles" >/dev/null; t1=$(now)
    dir="$work/rec-$cycles"; mkdir -p "$dir"; cd "$dir"
    t2=$(now)
    # The outer time counts the recorder and, reaped by it, the program; the inner one the
    # program alone (its own faults are a handful): the recorder's CPU is the difference.
    /usr/bin/time -f '%U %S' -o "$dir/time" "$fltrace" record -- \
        /usr/bin/time -f '%U %S' -o "$dir/time-program" "$work/churn" "$cycles" >/dev/null 2>"$dir/err"
    t3=$(now)
    summary=$(grep '^fltrace: .* recorder peak' "$dir/err")
    lost=$(sed -E 's/.*, ([0-9]+) lost,.*/\1/' <<<"$summary")
    peak=$(sed -E 's/.*recorder peak ([0-9]+) MB.*/\1/' <<<"$summary")
    cpu=$(echo "$(awk '{print $1 + $2}' "$dir/time") - $(awk '{print $1 + $2}' "$dir/time-program")" | bc)
    untraced=$(echo "$t1 - $t0" | bc); traced=$(echo "$t3 - $t2" | bc)
    printf '%10d %10.2f %10.2f %14.0f %6d %12d %14.2f %12d %12d\n' "$cycles" "$untraced" "$traced" \
        "$(echo "3 * $cycles / $traced" | bc -l)" "$lost" "$peak" "$cpu" \
        "$(largest 'fltrace-data-procmaps-*.out')" "$(largest 'fltrace-data-mmaps-*.parquet')"
    cd "$root"; rm -rf "$dir"
done
