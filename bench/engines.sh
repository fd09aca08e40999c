#!/usr/bin/env bash
# The documented top-sites query (docs/FORMAT.md, "The series as one dataset") over a series
# of a few million faults, in DuckDB and in Spark local mode (PySpark from target/venv,
# default settings, local[2]); and the cost of layout 3's plain column types against layout
# 2's (OLD_FLTRACE: a build of fltrace before the change): faults table size and `report`
# time on the same workload recorded by each.
# usage: OLD_FLTRACE=/path/to/old/fltrace bench/engines.sh [REPS=2]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
reps=${1:-2}
fltrace=${FLTRACE:-$root/target/debug/fltrace}
python="$root/target/venv/bin/python"
work=$(mktemp -d /tmp/fltrace-bench-engines.XXXXXX)
trap 'rm -rf "$work"' EXIT
gcc -O2 -g -fomit-frame-pointer -o "$work/touch" "$root/workloads/touch.c"

(cd "$work" && "$fltrace" runs -o s -n "$reps" -- "$work/touch 256 10" "$work/touch 128 20" >/dev/null)
"$python" "$root/bench/engines_topsites.py" "$work/s" "$root/docs/FORMAT.md"

if [ -n "${OLD_FLTRACE:-}" ]; then
    for which in old new; do
        bin=$fltrace; [ $which = old ] && bin=$OLD_FLTRACE
        mkdir -p "$work/$which"
        (cd "$work/$which" && "$bin" record -q -- "$work/touch" 256 10 >/dev/null)
        size=$(stat -c %s "$work/$which"/fltrace-data-faults-*.parquet)
        for _ in 1 2 3; do
            t0=$(date +%s%N)
            (cd "$work/$which" && "$bin" report --top 5 >/dev/null)
            echo "$which report: $(( ($(date +%s%N) - t0) / 1000000 )) ms"
        done
        echo "$which faults table: $size bytes"
    done
fi
