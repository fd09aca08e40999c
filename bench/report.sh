#!/usr/bin/env bash
# `fltrace report` on 10M and 100M faults of touch.c, against `perf report` on the same
# workload's perf.data, in one run: wall time and peak RSS (/usr/bin/time -v), as ratios.
# The 10M input is a real recording (`fltrace record -- touch 512 PASSES`, 131,072 faults a
# pass); the 100M one is that recording with its faults table written TIMES times over by
# crates/fltrace-trace/examples/replicate_faults.rs (same stacks and mappings, times shifted).
# perf records `touch 512 PERF_PASSES` (frame-pointer build, -g): perf.data grows by about 60
# bytes a fault, so it stays at a size perf report handles; its figures are compared per fault.
# usage: [NO_BUILD=1] bench/report.sh [PASSES=80] [TIMES=10] [PERF_PASSES=8]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
passes=${1:-80}; times=${2:-10}; perf_passes=${3:-8}
work=$(mktemp -d /tmp/fltrace-bench-report.XXXXXX)
trap 'rm -rf "$work"' EXIT
command -v perf >/dev/null || { apt-get install -y -qq linux-perf >/dev/null; }
# NO_BUILD=1 uses the release binaries as they are.
[ -n "${NO_BUILD:-}" ] || (cd "$root" && cargo build --release -q -p fltrace -p fltrace-trace --bins --example replicate_faults)
fltrace="$root/target/release/fltrace"
replicate="$root/target/release/examples/replicate_faults"
gcc -O2 -g -fomit-frame-pointer -o "$work/touch" "$root/workloads/touch.c"
gcc -O2 -g -fno-omit-frame-pointer -o "$work/touch_fp" "$root/workloads/touch.c"

mkdir -p "$work/10m" "$work/perf"
(cd "$work/10m" && "$fltrace" record -q -- "$work/touch" 512 "$passes")
"$replicate" "$work/10m" "$work/100m" "$times" 2>/dev/null
(cd "$work/perf" && perf record -q -o perf.data -e page-faults -c 1 -g -- "$work/touch_fp" 512 "$perf_passes" >/dev/null 2>&1)

rows() { python3 -c 'import sys,json; print(json.load(sys.stdin)["faults"])'; }
# Prints "seconds peak_kb" of a command, its output discarded.
measure() {
    /usr/bin/time -v "$@" >/dev/null 2>"$work/time.txt"
    awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2,t,":"); s=0; for(i=1;i<=n;i++) s=s*60+t[i]}
        /Maximum resident set size/ {kb=$2} END {print s, kb}' "$work/time.txt"
}

faults10=$(cd "$work/10m" && "$fltrace" report --format json | rows)
faults100=$(cd "$work/100m" && "$fltrace" report --format json | rows)
perf_samples=$(perf report -i "$work/perf/perf.data" --stats 2>/dev/null | grep -m1 'SAMPLE events:' | grep -o '[0-9][0-9,]*' | head -1 | tr -d ,)

read -r t10 m10 < <(cd "$work/10m" && measure "$fltrace" report)
read -r t100 m100 < <(cd "$work/100m" && measure "$fltrace" report)
read -r t100s m100s < <(cd "$work/100m" && measure "$fltrace" report --by stack --format csv)
read -r tp mp < <(measure perf report -i "$work/perf/perf.data" --stdio --sort sym)

ns_per() { echo "scale=1; $1 * 1000000000 / $2" | bc; }
printf "%-38s %12s %9s %11s %13s\n" input faults time peak_RSS ns/fault
printf "%-38s %12s %8ss %8d MB %13s\n" "fltrace report (real recording)" "$faults10" "$t10" $((m10 / 1024)) "$(ns_per "$t10" "$faults10")"
printf "%-38s %12s %8ss %8d MB %13s\n" "fltrace report (x$times replica)" "$faults100" "$t100" $((m100 / 1024)) "$(ns_per "$t100" "$faults100")"
printf "%-38s %12s %8ss %8d MB %13s\n" "fltrace report --by stack (x$times)" "$faults100" "$t100s" $((m100s / 1024)) "$(ns_per "$t100s" "$faults100")"
printf "%-38s %12s %8ss %8d MB %13s\n" "perf report --sort sym" "$perf_samples" "$tp" $((mp / 1024)) "$(ns_per "$tp" "$perf_samples")"
echo "time per fault, fltrace report (x$times) against perf report: $(echo "scale=4; ($t100 * $perf_samples) / ($tp * $faults100)" | bc)x"
echo "peak RSS, fltrace report on $faults100 faults against perf report on $perf_samples: $(echo "scale=2; $m100 / $mp" | bc)x"
echo "(bench/report.sh $passes $times $perf_passes)"
