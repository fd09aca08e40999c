#!/usr/bin/env bash
# The report side of issue 28: `fltrace report --allocs`, `visualize --by-allocation` and
# `heatmap --allocs 20` time and peak RSS on malloc-4m
# (workloads/allocs.c malloc4m: malloc/free pairs of 16 to 527 bytes, every seventh block kept
# in a ring of 1,024, -O2 without frame pointers) at 8M and 40M calls, the one-pass report
# against the whole-table path it replaced (FLTRACE_ALLOCS_WHOLE_TABLE=1, kept as the tests'
# oracle). Kept apart from bench/allocs.sh (the record side).
# usage: bench/allocs_report.sh [FLTRACE=target/release/fltrace]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
fltrace=${1:-$root/target/release/fltrace}
work=$(mktemp -d /tmp/fltrace-bench-report.XXXXXX)
trap 'rm -rf "$work"' EXIT
gcc -O2 -g -fomit-frame-pointer -o "$work/allocs" "$root/workloads/allocs.c" -ldl -lpthread
printf "%-8s %-26s %-12s %10s %12s\n" calls command path "seconds" "peak RSS MB"
for pairs in 4000000 20000000; do
    dir="$work/$pairs"; mkdir -p "$dir"; cd "$dir"
    "$fltrace" record -q --allocs -- "$work/allocs" malloc4m "$pairs" >/dev/null
    # The allocation pictures too: the flamegraphs by allocation stack, the heatmap's blocks.
    for command in "report --allocs" "visualize --by-allocation" "heatmap --allocs 20 -o h.svg"; do
        for path in whole-table one-pass; do
            env=()
            [[ $path == whole-table ]] && env=(FLTRACE_ALLOCS_WHOLE_TABLE=1)
            # shellcheck disable=SC2086 # the command's words
            env "${env[@]}" /usr/bin/time -o time.txt -f "%e %M" "$fltrace" $command >/dev/null 2>&1
            out=$(tail -1 time.txt)
            printf "%-8s %-26s %-12s %10s %12d\n" "$((2 * pairs / 1000000))M" "${command% -o*}" "$path" "${out% *}" $(( ${out#* } / 1024 ))
        done
    done
    cd "$work"; rm -rf "$dir"
done
