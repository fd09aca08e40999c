#!/usr/bin/env bash
# Far memory for managed runtimes (issue #37): the JVM (OpenJDK 17, G1, workloads/HeapRoundTrip.java)
# and a Go program (workloads/goheap.go, linked dynamically: a static one is refused, shown at
# the end), each in interleaved rounds (A B C D A B C D ...):
#   untraced   the program alone
#   record     fltrace record (no far memory)
#   ample      fltrace record -L=<2x the untraced peak>: the heap in the region, nothing evicted
#   half       fltrace record -L=<half the untraced peak>
# It prints per config the median wall time, the median CPU time (user+system of fltrace and
# the program, from wait4), the ratio of each to untraced's, the runtime's faults (rt_faults),
# evictions, local peak (memory_used) and memory_unemulated's largest value, and the wall time
# added per handled fault against untraced.
# Then the WORDS'23 figure for both programs through `fltrace runs`: local memory at 100%, 50%
# and 25% of the dry runs' peak, `runs --stat` (slowdown against dry and faults per local
# memory; -M 2048 MB: G1 commits more than it touches, past the default of twice the peak).
# Then, side by side in the same run, bench/farmem-floor.sh's floor (min_uffd) and
# fltrace's per-fault cost on its C program, one setup (spin).
# usage: bench/farmem-runtimes.sh [ROUNDS=3] [JVM_MB=256] [GO_MB=300] [SERIES_REPS=2]
# FLTRACE_BIN_DIR picks the binaries (default target/release; the dev profile is optimised too).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rounds=${1:-3}; jvm_mb=${2:-256}; go_mb=${3:-300}; reps=${4:-2}
bin=$(realpath "${FLTRACE_BIN_DIR:-$root/target/release}")
fltrace="$bin/fltrace"
work=$(mktemp -d /tmp/fltrace-runtimes.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs; $(java -version 2>&1 | head -1); $(go version)"

javac -d "$work" "$root/workloads/HeapRoundTrip.java"
export GOCACHE="$work/gocache" GOPATH="$work/gopath"
CGO_ENABLED=1 go build -ldflags=-linkmode=external -o "$work/goheap" "$root/workloads/goheap.go"
CGO_ENABLED=0 go build -o "$work/goheap-static" "$root/workloads/goheap.go"

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
stat_of() { grep -o "[ ,]$2:[0-9]*" "$1" | sort -t: -k2 -g | tail -1 | cut -d: -f2; }
last_of() { grep -o "[ ,]$2:[0-9]*" "$1" | tail -1 | cut -d: -f2; }

# Runs one config of one program; prints "wall cpu rt_faults evict_pages memory_used unemulated".
run() {
    local config=$1 peak=$2; shift 2
    local dir="$work/run" t
    rm -rf "$dir"; mkdir -p "$dir"; cd "$dir"
    case $config in
        untraced) t=$(/usr/bin/time -f "%e %U %S" "$@" 2>&1 >/dev/null | tail -1) ;;
        record) t=$(/usr/bin/time -f "%e %U %S" "$fltrace" record -q -- "$@" 2>&1 >/dev/null | tail -1) ;;
        ample | half)
            local l=$((peak * 2))
            [[ $config == half ]] && l=$((peak / 2))
            t=$(/usr/bin/time -f "%e %U %S" "$fltrace" record -q -L=$l -M=$((peak * 4 + 256)) -- "$@" 2>&1 >/dev/null | tail -1) ;;
    esac
    local wall user sys stats faults=0 evicted=0 used=0 outside=0
    read -r wall user sys <<<"$t"
    stats=$(ls "$dir"/fltrace-data-stats-*.out 2>/dev/null | head -1 || true)
    if [[ -n $stats && $config != record ]]; then
        faults=$(last_of "$stats" rt_faults); evicted=$(last_of "$stats" evict_pages_done)
        used=$(last_of "$stats" memory_used); outside=$(stat_of "$stats" memory_unemulated)
    elif [[ -n $stats ]]; then
        faults=$(last_of "$stats" faults); used=$(last_of "$stats" memory_used)
    fi
    echo "$wall $(echo "$user + $sys" | bc) ${faults:-0} ${evicted:-0} ${used:-0} ${outside:-0}"
}

bench() {
    local name=$1; shift
    local peak_kb peak configs=(untraced record ample half)
    peak_kb=$(/usr/bin/time -f %M "$@" 2>&1 >/dev/null | tail -1)
    peak=$(((peak_kb + 1023) / 1024))
    echo "$name: untraced peak ${peak} MB; ample -L=$((peak * 2)), half -L=$((peak / 2)); $rounds rounds"
    declare -A walls=() cpus=() rest=()
    for ((r = 0; r < rounds; r++)); do
        for config in "${configs[@]}"; do
            read -r w c f e u o < <(run "$config" "$peak" "$@")
            walls[$config]+="$w "; cpus[$config]+="$c "; rest[$config]="$f $e $u $o"
        done
    done
    local uw uc
    uw=$(printf '%s\n' ${walls[untraced]} | median); uc=$(printf '%s\n' ${cpus[untraced]} | median)
    echo "  (load $(cut -d' ' -f1-3 /proc/loadavg))"
    for config in "${configs[@]}"; do
        local w c f e u o added="-"
        w=$(printf '%s\n' ${walls[$config]} | median); c=$(printf '%s\n' ${cpus[$config]} | median)
        read -r f e u o <<<"${rest[$config]}"
        [[ $config == ample || $config == half ]] && ((f > 0)) &&
            added="$(echo "scale=1; ($w - $uw) * 1000000 / $f" | bc) us"
        echo "  $config: wall ${w}s ($(echo "scale=2; $w / $uw" | bc)x), cpu ${c}s ($(echo "scale=2; $c / $uc" | bc)x), faults $f, evicted pages $e, local peak $((u >> 20)) MB, unemulated max $((o >> 20)) MB, added per fault $added; walls: ${walls[$config]}"
    done
}

jvm=(java -Xmx1g -XX:+UseG1GC -cp "$work" HeapRoundTrip "$jvm_mb")
bench "jvm HeapRoundTrip $jvm_mb (G1)" "${jvm[@]}"
bench "go goheap $go_mb (dynamic)" "$work/goheap" "$go_mb"

echo "The WORDS'23 figure through fltrace runs ($reps repetitions):"
cat >"$work/configs.toml" <<EOF
[[config]]
name = "dry"
mode = "dry"
[[config]]
name = "local-100"
local = "100%"
max_mb = 2048
[[config]]
name = "local-050"
local = "50%"
max_mb = 2048
[[config]]
name = "local-025"
local = "25%"
max_mb = 2048
EOF
(cd "$work" && "$fltrace" runs -o series -n "$reps" --seed 1 --config configs.toml -- \
    "java -Xmx1g -XX:+UseG1GC -cp $work HeapRoundTrip $jvm_mb" "$work/goheap $go_mb" >/dev/null)
"$fltrace" analyze "$work/series" -o "$work/runs.sqlite" >/dev/null
"$fltrace" runs --stat "$work/runs.sqlite"
echo "  (load $(cut -d' ' -f1-3 /proc/loadavg))"

echo "A static Go program under -L:"
(cd "$work" && "$fltrace" record -q -L=50 -M=512 -- "$work/goheap-static" 100 || echo "  exit status $?")

echo "The floor on this machine, in the same run:"
FLTRACE_BIN_DIR="$bin" "$root/bench/farmem-floor.sh" 18 "$rounds" spin "untraced min_uffd record-half"
echo "(bench/farmem-runtimes.sh $rounds $jvm_mb $go_mb $reps)"
