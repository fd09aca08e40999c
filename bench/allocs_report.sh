#!/usr/bin/env bash
# The report side of allocation tracing against heaptrack's: `fltrace report --allocs` against
# heaptrack_print on the same program's calls, alternating, ROUNDS times each, at each number
# of malloc/free pairs (default 4M and 20M: 8M and 40M calls) of malloc-4m
# (workloads/allocs.c malloc4m: malloc/free pairs of 16 to 527 bytes, every seventh block kept
# in a ring of 1,024, -O2 without frame pointers): wall time, CPU time (user + system) and
# peak RSS of each, fltrace's over heaptrack_print's, and the machine's load. Then the charts
# (`visualize --allocs`, SVG, and `--format csv`), which heaptrack draws only in its GUI: their
# time and peak RSS. Each tool records once per size (bench/allocs.sh times that).
# usage: bench/allocs_report.sh ["PAIRS ..."=4000000 20000000] [ROUNDS=3]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
sizes=${1:-4000000 20000000}; rounds=${2:-3}
fltrace=${FLTRACE:-$root/target/release/fltrace}
work=$(mktemp -d /tmp/fltrace-bench-report.XXXXXX)
trap 'rm -rf "$work"' EXIT
command -v heaptrack_print >/dev/null || "$root/scripts/setup.sh" >/dev/null
gcc -O2 -g -fomit-frame-pointer -o "$work/allocs" "$root/workloads/allocs.c" -ldl -lpthread
# $1 / $2 to three decimals, rounded (bc's scale truncates: 0.609 was printed 0.60); "-"
# when $2 is 0.
ratio() {
    if [[ $(echo "$2 == 0" | bc) == 1 ]]; then echo -; return; fi
    printf '%.3f' "$(echo "scale=6; $1 / $2" | bc)"
}
# `/usr/bin/time` of a command run in the current directory: "wall cpu peak-MB".
timed() {
    /usr/bin/time -o time.txt -f "%e %U %S %M" "$@" >/dev/null 2>&1
    awk '{printf "%.2f %.2f %d\n", $1, $2 + $3, $4 / 1024}' time.txt
}
for pairs in $sizes; do
    calls=$((2 * pairs))
    dir="$work/$pairs"; mkdir -p "$dir/f" "$dir/h"
    (cd "$dir/f" && "$fltrace" record -q --allocs -- "$work/allocs" malloc4m "$pairs" >/dev/null)
    (cd "$dir/h" && heaptrack -o "$dir/h/ht" "$work/allocs" malloc4m "$pairs" >/dev/null 2>&1)
    ht=$(ls "$dir"/h/ht*)
    printf "%dM calls (%d malloc/free pairs), %d rounds\n" $((calls / 1000000)) "$pairs" "$rounds"
    printf "%-6s %-15s %-26s %-26s %-12s %-10s\n" round load "report --allocs s (cpu) MB" "heaptrack_print s (cpu) MB" "ratio wall" "ratio cpu"
    for ((r = 1; r <= rounds; r++)); do
        load=$(cut -d' ' -f1-3 /proc/loadavg)
        read -r fw fc fm < <(cd "$dir/f" && timed "$fltrace" report --allocs)
        read -r hw hc hm < <(cd "$dir/h" && timed heaptrack_print "$ht")
        printf "%-6s %-15s %-26s %-26s %-12s %-10s\n" "$r" "$load" "$fw ($fc) $fm" "$hw ($hc) $hm" \
            "$(ratio "$fw" "$hw")x" "$(ratio "$fc" "$hc")x"
    done
    for form in "svg" "csv"; do
        read -r vw vc vm < <(cd "$dir/f" && timed "$fltrace" visualize --allocs --format "$form")
        printf "visualize --allocs --format %s: %s s (%s s cpu), %s MB\n" "$form" "$vw" "$vc" "$vm"
    done
    rm -rf "$dir"
    echo
done
printf "load average after: %s\n" "$(cut -d' ' -f1-3 /proc/loadavg)"
