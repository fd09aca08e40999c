#!/usr/bin/env bash
# The full-screen view's own cost against batch mode's: `fltrace -v top` on the same programs
# as bench/top.sh (touch-512 and graph at SCALE), alternating `top --batch` (stdout to
# /dev/null) and the full screen in a tmux window of 160x40 (as a person sees it, redrawn
# every interval), ROUNDS times each. Prints per program and mode the medians of wall time,
# fltrace's CPU time (its threads and the command's, /usr/bin/time) and the view thread's own
# CPU time (`top -v` logs "the view used X s of CPU in Y s"), and the ratios screen/batch.
# usage: [FLTRACE=path/to/fltrace] bench/top_screen.sh [ROUNDS=3] [SCALE=18]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rounds=${1:-3}; scale=${2:-18}
work=$(mktemp -d /tmp/fltrace-bench-top-screen.XXXXXX)
session="fltrace-bench-top-$$"
trap 'tmux kill-session -t "$session" 2>/dev/null || true; rm -rf "$work"' EXIT
fltrace="${FLTRACE:-$root/target/release/fltrace}"
[ -x "$fltrace" ] || (cd "$root" && cargo build --release -q)
command -v tmux >/dev/null || { echo "tmux is needed" >&2; exit 1; }
gcc -O2 -g -fomit-frame-pointer -o "$work/touch" "$root/workloads/touch.c"
gcc -O2 -g -fomit-frame-pointer -o "$work/graph" "$root/workloads/graph.c"

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# run NAME MODE PROGRAM ARGS...: appends "wall cpu view_cpu" to $work/NAME-MODE.
run() {
    local name=$1 mode=$2; shift 2
    local dir="$work/$name-$mode-run"; rm -rf "$dir"; mkdir -p "$dir"; cd "$dir"
    local top=(/usr/bin/time -f "%e %U %S" -o "$dir/time" "$fltrace" -v top -d 1 -o "$dir/rec")
    case $mode in
        batch) "${top[@]}" --batch -- "$@" 2>"$dir/err" >/dev/null ;;
        screen)
            printf '%q ' "${top[@]}" -- "$@" >"$dir/cmd"
            tmux new-session -d -s "$session" -x 160 -y 40 -c "$dir" \
                "env TERM=xterm-256color $(cat "$dir/cmd") 2>$dir/err; tmux wait-for -S $session-done"
            tmux wait-for "$session-done"
            ;;
    esac
    local view
    view=$(grep -o 'the view used [0-9.]* s of CPU' "$dir/err" | awk '{print $4}')
    awk -v view="$view" '{printf "%s %.3f %s\n", $1, $2 + $3, view}' "$dir/time" >>"$work/$name-$mode"
    cd "$work"; rm -rf "$dir"
}

echo "bench/top_screen.sh: $rounds rounds alternating, load: $(uptime | sed 's/.*load average: //')"
for ((r = 0; r < rounds; r++)); do
    for mode in batch screen; do
        run touch-512 "$mode" "$work/touch" 512 4
        run graph "$mode" "$work/graph" "$scale" 1
    done
done

printf "%-10s %8s %8s %7s %9s %9s %7s %10s %10s %7s\n" program batch_s screen_s ratio batch_cpu scr_cpu ratio batch_view scr_view ratio
for name in touch-512 graph; do
    bw=$(cut -d' ' -f1 "$work/$name-batch" | median); sw=$(cut -d' ' -f1 "$work/$name-screen" | median)
    bc_=$(cut -d' ' -f2 "$work/$name-batch" | median); sc=$(cut -d' ' -f2 "$work/$name-screen" | median)
    bv=$(cut -d' ' -f3 "$work/$name-batch" | median); sv=$(cut -d' ' -f3 "$work/$name-screen" | median)
    printf "%-10s %8.2f %8.2f %6.3fx %9.2f %9.2f %6.3fx %10.4f %10.4f %6.2fx\n" "$name" "$bw" "$sw" \
        "$(echo "$sw / $bw" | bc -l)" "$bc_" "$sc" "$(echo "$sc / $bc_" | bc -l)" "$bv" "$sv" \
        "$(echo "$sv / $bv" | bc -l)"
done
echo "load after: $(uptime | sed 's/.*load average: //')"
