#!/usr/bin/env bash
# Stacks of a process that exits at once (issue #21): would holding each process at its exit
# until the recorder has read its faults complete their stacks? The hold is emulated by a
# preloaded destructor that sleeps 0.5 s inside exit() (the recorder drains its rings at least
# every 0.1 s, so every fault is unwound while the process still lives, as a ptrace exit stop
# or an exit hook of the preload library would allow). For workloads/quickexit (200 faults 10
# KiB below main) and Debian's python3 -c pass: the share of faults with truncated stacks and
# the wall time (median of ROUNDS; the emulated hold's includes its 0.5 s sleep) under the
# defaults, the emulated exit hold, and `--stack-size 16384`.
# usage: bench/quick_exit.sh [ROUNDS=3]   (FLTRACE=path/to/fltrace to use another build)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rounds=${1:-3}
work=$(mktemp -d /tmp/fltrace-quickexit.XXXXXX)
trap 'rm -rf "$work"' EXIT
fltrace=${FLTRACE:-$root/target/release/fltrace}
[[ -n ${FLTRACE:-} ]] || (cd "$root" && cargo build --release --locked -q -p fltrace)
gcc -O2 -g -fomit-frame-pointer -o "$work/quickexit" "$root/workloads/quickexit.c"
printf '#include <unistd.h>\n__attribute__((destructor)) static void hold(void) { usleep(500000); }\n' >"$work/hold.c"
gcc -shared -fPIC -O2 -o "$work/libexithold.so" "$work/hold.c"

run() { # name preload flags... -- command...
    local name=$1 preload=$2; shift 2
    local flags=() times=() truncated=()
    while [[ $1 != -- ]]; do flags+=("$1"); shift; done; shift
    for ((r = 0; r < rounds; r++)); do
        rm -rf "$work/rec" && mkdir "$work/rec"
        local start end line
        start=$(date +%s%N)
        line=$("$fltrace" record -o "$work/rec" "${flags[@]}" -- env ${preload:+LD_PRELOAD=$preload} "$@" 2>&1 | grep 'faults from')
        end=$(date +%s%N)
        times+=("$(((end - start) / 1000000))")
        truncated+=("$(sed -E 's/.*lost, ([0-9]+) faults \(([0-9.]+)%\) with truncated.*/\2/; t; s/.*/0/' <<<"$line")")
    done
    printf '%-40s truncated %% %-24s time ms (median) %s\n' "$name" "${truncated[*]}" \
        "$(printf '%s\n' "${times[@]}" | sort -n | sed -n "$(((rounds + 1) / 2))p")"
}

untraced() { # name command...
    local name=$1 times=(); shift
    for ((r = 0; r < rounds; r++)); do
        local start end
        start=$(date +%s%N)
        "$@" >/dev/null
        end=$(date +%s%N)
        times+=("$(((end - start) / 1000000))")
    done
    printf '%-40s %-37s time ms (median) %s\n' "$name" "" \
        "$(printf '%s\n' "${times[@]}" | sort -n | sed -n "$(((rounds + 1) / 2))p")"
}

for program in quickexit python3; do
    case $program in
    quickexit) cmd=("$work/quickexit" 200) ;;
    python3) cmd=(/usr/bin/python3 -c pass) ;;
    esac
    untraced "$program untraced" "${cmd[@]}"
    run "$program defaults" "" -- "${cmd[@]}"
    run "$program exit held (emulated)" "$work/libexithold.so" -- "${cmd[@]}"
    run "$program --stack-size 16384" "" --stack-size 16384 -- "${cmd[@]}"
done
