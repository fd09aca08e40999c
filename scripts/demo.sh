#!/usr/bin/env bash
# The main job end to end on the bundled example workload: set up, record, report, visualize.
# Writes into ./demo-output (or the directory given as $1).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/demo-output}"
"$root/scripts/setup.sh"
mkdir -p "$out"
gcc -O2 -g -fopenmp -o "$out/graph" "$root/workloads/graph.c"
fltrace="$root/target/release/fltrace"
cd "$out"
echo "== fltrace record -- ./graph 18 2"
"$fltrace" record -- ./graph 18 2
echo "== peak memory (the seed's grep)"
pid=$(ls -t fltrace-data-stats-*.out | head -1 | grep -o '[0-9]\+')
grep -o "memory_used:\([0-9]\+\)" "fltrace-data-stats-$pid.out" | tail -1
echo "== fltrace report"
"$fltrace" report --top 10
echo "== fltrace visualize"
"$fltrace" visualize
echo "== far memory: the same run with half of its peak memory local"
peak_mb=$(( $(grep -o "memory_used:\([0-9]\+\)" "fltrace-data-stats-$pid.out" | tail -1 | cut -d: -f2) / 1048576 ))
"$fltrace" record -L=$(( peak_mb / 2 )) -M=$(( peak_mb * 2 )) -- ./graph 18 2
"$fltrace" report --top 5
"$fltrace" visualize
echo "== allocations: which allocation sites the faults landed in"
"$fltrace" record --allocs -- ./graph 18 2
"$fltrace" report --allocs --top 5
"$fltrace" report --by alloc-site --top 5
"$fltrace" heatmap
echo "Open the SVG files above in a browser; the CSV reports are fltrace-data-report-<pid>.out in $out."
