#!/usr/bin/env bash
# `fltrace top` against `fltrace record` on the same programs, alternating, ROUNDS times each:
# touch-512 (workloads/touch.c: 512 MiB, 4 rounds of first touches, 524,288 faults at one
# site) and graph (workloads/graph.c at SCALE, 1 trial: many sites, deep stacks). Prints per
# program the medians of wall time and of fltrace's CPU time (user + system, its threads
# and the command's together) and their ratio top/record, then the view's own CPU per second
# of its run and the fault rate it kept up with (from `top -v`: "the view used X s of CPU in
# Y s"), with its CPU per fault: at 1M faults/s the view needs that many ms of CPU a second.
# top runs with --batch (stdout to /dev/null) and -d 1, as a log would.
# usage: [FLTRACE=path/to/fltrace] bench/top.sh [ROUNDS=5] [SCALE=18]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rounds=${1:-5}; scale=${2:-18}
work=$(mktemp -d /tmp/fltrace-bench-top.XXXXXX)
trap 'rm -rf "$work"' EXIT
fltrace="${FLTRACE:-$root/target/release/fltrace}"
[ -x "$fltrace" ] || (cd "$root" && cargo build --release -q)
gcc -O2 -g -fomit-frame-pointer -o "$work/touch" "$root/workloads/touch.c"
gcc -O2 -g -fomit-frame-pointer -o "$work/graph" "$root/workloads/graph.c"

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# run NAME TOOL PROGRAM ARGS...: appends "wall cpu" to $work/NAME-TOOL, and for top the view's
# "cpu seconds faults" to $work/NAME-view.
run() {
    local name=$1 tool=$2; shift 2
    local dir="$work/$name-$tool-run"; rm -rf "$dir"; mkdir -p "$dir"; cd "$dir"
    case $tool in
        record) /usr/bin/time -f "%e %U %S" -o "$dir/time" "$fltrace" record -q -o "$dir" -- "$@" 2>"$dir/err" >/dev/null ;;
        top) /usr/bin/time -f "%e %U %S" -o "$dir/time" "$fltrace" -v top --batch -d 1 -o "$dir" -- "$@" 2>"$dir/err" >/dev/null ;;
    esac
    awk '{printf "%s %.3f\n", $1, $2 + $3}' "$dir/time" >>"$work/$name-$tool"
    if [ "$tool" = top ]; then
        local view faults
        view=$(grep -o 'the view used [0-9.]* s of CPU in [0-9.]* s' "$dir/err" | awk '{print $4, $9}')
        faults=$(grep -o '^fltrace: [0-9]* faults' "$dir/err" | awk '{print $2}')
        echo "$view $faults" >>"$work/$name-view"
    fi
    cd "$work"; rm -rf "$dir"
}

echo "bench/top.sh: $rounds rounds alternating, load: $(uptime | sed 's/.*load average: //')"
for ((r = 0; r < rounds; r++)); do
    for tool in record top; do
        run touch-512 "$tool" "$work/touch" 512 4
        run graph "$tool" "$work/graph" "$scale" 1
    done
done

printf "%-10s %9s %9s %7s %10s %9s %7s %11s %9s %13s\n" program record_s top_s ratio record_cpu top_cpu ratio view_cpu/s faults/s view_ns/fault
for name in touch-512 graph; do
    rw=$(cut -d' ' -f1 "$work/$name-record" | median); tw=$(cut -d' ' -f1 "$work/$name-top" | median)
    rc=$(cut -d' ' -f2 "$work/$name-record" | median); tc=$(cut -d' ' -f2 "$work/$name-top" | median)
    view=$(awk '{print $1 / $2}' "$work/$name-view" | median)
    rate=$(awk '{print $3 / $2}' "$work/$name-view" | median)
    per_fault=$(awk '{print $1 * 1e9 / $3}' "$work/$name-view" | median)
    printf "%-10s %9.2f %9.2f %6.3fx %10.2f %9.2f %6.3fx %11.4f %9.0f %13.0f\n" "$name" "$rw" "$tw" \
        "$(echo "$tw / $rw" | bc -l)" "$rc" "$tc" "$(echo "$tc / $rc" | bc -l)" "$view" "$rate" "$per_fault"
done
echo "load after: $(uptime | sed 's/.*load average: //')"
