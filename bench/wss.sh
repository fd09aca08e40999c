#!/usr/bin/env bash
# Working-set size sampling on a 4 GB process (issue #5): the program's streaming rate
# untraced, under `fltrace wss -p` and under a plain script doing the same clear_refs + smaps
# reading (the wss.pl method), side by side; and the CPU each sampler spends per interval.
# usage: bench/wss.sh [MiB=4096] [seconds=10]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mib=${1:-4096}; secs=${2:-10}
work=$(mktemp -d /tmp/fltrace-wss.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$root/scripts/setup.sh" >/dev/null
fltrace="$root/target/release/fltrace"
gcc -O2 -o "$work/hold" "$root/bench/hold.c"
cat > "$work/wss.py" <<'PY'
import sys, time
pid, interval, duration = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
end = time.time() + duration
while time.time() < end:
    open(f"/proc/{pid}/clear_refs", "w").write("1")
    time.sleep(interval)
    total = 0
    for line in open(f"/proc/{pid}/smaps"):
        if line.startswith("Referenced:"):
            total += int(line.split()[1]) * 1024
    print(f"{time.time():.3f},{total}")
PY

run() { # $1: sampler (none, fltrace, script); prints "rate cpu_seconds samples"
    "$work/hold" "$mib" "$secs" > "$work/rate" &
    local pid=$!
    sleep 3 # past the initial memset
    local cpu="0" samples=0
    case $1 in
        fltrace) cpu=$( { /usr/bin/time -f "%U %S" "$fltrace" wss -p "$pid" --interval 1s --duration $((secs - 4))s --format csv -o "$work" > "$work/out"; } 2>&1 | tail -1 | awk '{print $1 + $2}') ;;
        script) cpu=$( { /usr/bin/time -f "%U %S" python3 "$work/wss.py" "$pid" 1 $((secs - 4)) > "$work/out"; } 2>&1 | tail -1 | awk '{print $1 + $2}') ;;
    esac
    [ "$1" = none ] || samples=$(grep -c , "$work/out")
    wait "$pid"
    echo "$(cat "$work/rate") $cpu $samples"
}
read -r base _ _ < <(run none)
read -r rf cf nf < <(run fltrace)
read -r rs cs ns < <(run script)
echo "hold $mib MiB, streaming passes per second: untraced $base"
echo "fltrace wss -p (1 s interval): program at $(echo "scale=3; $rf / $base" | bc)x of untraced speed; sampler CPU $(echo "scale=3; $cf / ($nf - 1)" | bc) s per interval over $nf intervals"
echo "wss.pl-style script:           program at $(echo "scale=3; $rs / $base" | bc)x of untraced speed; sampler CPU $(echo "scale=3; $cs / $ns" | bc) s per interval over $ns intervals"
echo "(bench/wss.sh $mib $secs)"
