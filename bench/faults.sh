#!/usr/bin/env bash
# Page-fault recording side by side, in one run (issue #36):
# 1. touch-512 (../shared/PEERS.md): untraced, fltrace record (the live stack through the BPF
#    ring), fltrace --stack-size 16384 (the per-CPU perf copy of the previous design), perf
#    record -g (frame pointers, on a frame-pointer build) and perf --call-graph dwarf,
#    alternating, ROUNDS times each. Per tool: slowdown (ratio of medians) of the wall time
#    and of the CPU time (user + sys of the command and all it ran: the recorder too), faults
#    kept, bytes on disk per fault, share of stacks that reach main or a thread start, and the
#    recorder's peak memory.
# 2. bfs (workloads/graph.c, scale GRAPH_SCALE, OpenMP on every CPU): untraced, fltrace record
#    and perf record -g (frame-pointer build), alternating.
# 3. Kernel memory while recording `sleep 3`: what the recorder holds, read from /proc (its
#    perf rings' mappings, and the `memlock` the kernel charges for its BPF maps, ring and
#    programs in /proc/PID/fdinfo: exact, whatever the load), and MemAvailable before and
#    during (noisy on a shared machine), fltrace's default and --stack-size 16384 (and
#    FLTRACE_PREVIOUS=path/to/old/fltrace's default when set) against perf record -g, with the
#    sizing rule's figures for 2, 64 and 256 CPUs.
# usage: bench/faults.sh [MiB=512] [rounds-of-touch=4] [ROUNDS=3]   (GRAPH_SCALE=20;
# ONLY=memory for part 3 alone)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mib=${1:-512}; passes=${2:-4}; rounds=${3:-3}
scale=${GRAPH_SCALE:-20}
work=$(mktemp -d /tmp/fltrace-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$root/scripts/setup.sh" >/dev/null
command -v perf >/dev/null || { apt-get install -y -qq linux-perf >/dev/null; }
(cd "$root" && cargo build --release --locked -q -p fltrace -p fltrace-preload \
    && cargo build --release --locked -q -p fltrace-capture --example ring_plan)
fltrace="$root/target/release/fltrace"
gcc -O2 -g -fomit-frame-pointer -o "$work/touch" "$root/workloads/touch.c"
gcc -O2 -g -fno-omit-frame-pointer -o "$work/touch_fp" "$root/workloads/touch.c"
gcc -O2 -g -fopenmp -fomit-frame-pointer -o "$work/graph" "$root/workloads/graph.c"
gcc -O2 -g -fopenmp -fno-omit-frame-pointer -o "$work/graph_fp" "$root/workloads/graph.c"
expected=$((mib * 256 * passes))

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
cpu_of() { awk '{print $1 + $2}' "$1"; }

reach_main='import sys,json
d=json.load(sys.stdin); ok=tot=0
for g in d["groups"]:
    st=g.get("stack") or []
    tot+=g["count"]
    if st and st[-1]["function"] in ("_start","main","start_thread","clone3","clone"): ok+=g["count"]
print(f"{ok/tot:.4f}" if tot else "0")'
perf_reach_main='import sys
ok=tot=0; last=None; insample=False
for line in sys.stdin:
    s=line.strip()
    if not s:
        if insample:
            tot+=1; ok+= last in ("_start","main","start_thread","clone3","clone","__libc_start_main_impl","__libc_start_call_main")
        insample=False; last=None; continue
    if line[0] not in " \t": insample=True; continue
    parts=s.split(None,1)
    if len(parts)>1: last=parts[1].split("+")[0].split(" (")[0]
print(f"{ok/tot:.4f}" if tot else "0")'

# One run of `tool` on `program` (touch or graph) with `args`, in `dir`: its wall time on
# stdout, its CPU time in dir/cpu.
run() { # tool program dir args...
    local tool=$1 program=$2 dir=$3; shift 3
    local cpu=(/usr/bin/time -f "%U %S" -o "$dir/cpu")
    local t0 t1
    t0=$(now)
    case $tool in
        untraced) "${cpu[@]}" "$work/$program" "$@" >/dev/null ;;
        fltrace) "${cpu[@]}" "$fltrace" record -o "$dir" -- "$work/$program" "$@" >/dev/null 2>"$dir/fltrace.err" ;;
        fltrace-16k) "${cpu[@]}" "$fltrace" record -o "$dir" --stack-size 16384 -- "$work/$program" "$@" >/dev/null 2>"$dir/fltrace.err" ;;
        perf-fp) "${cpu[@]}" perf record -q -o "$dir/perf.data" -e page-faults -c 1 -g -- "$work/${program}_fp" "$@" >/dev/null 2>&1 ;;
        perf-dwarf) "${cpu[@]}" perf record -q -o "$dir/perf.data" -e page-faults -c 1 --call-graph dwarf -- "$work/$program" "$@" >/dev/null 2>&1 ;;
    esac
    t1=$(now)
    echo "$t1 - $t0" | bc
}

# Runs `tools` on `program args` alternating, `rounds` times; prints a row per tool.
compare() { # label program tools... -- args...
    local label=$1 program=$2; shift 2
    local tools=()
    while [[ $1 != -- ]]; do tools+=("$1"); shift; done
    shift
    declare -A times=() cpus=()
    for ((r = 0; r < rounds; r++)); do
        for tool in "${tools[@]}"; do
            dir="$work/$label-$tool"; rm -rf "$dir"; mkdir -p "$dir"
            times[$tool]+="$(run "$tool" "$program" "$dir" "$@") "
            cpus[$tool]+="$(cpu_of "$dir/cpu") "
        done
    done
    local base cpu_base
    base=$(echo ${times[untraced]} | tr ' ' '\n' | median)
    cpu_base=$(echo ${cpus[untraced]} | tr ' ' '\n' | median)
    printf "%-12s %9s %9s %12s %12s %10s %10s\n" "$label" wall cpu faults_kept bytes/fault reach_main peak_rss
    printf "%-12s %8ss %8ss %12s %12s %10s %10s\n" untraced "$base" "$cpu_base" - - - -
    for tool in "${tools[@]:1}"; do
        local med cmed kept bytes share rss
        med=$(echo ${times[$tool]} | tr ' ' '\n' | median)
        cmed=$(echo ${cpus[$tool]} | tr ' ' '\n' | median)
        dir="$work/$label-$tool"; cd "$dir"
        case $tool in
            fltrace*)
                kept=$(grep -o '^fltrace: [0-9]* faults' fltrace.err | grep -o '[0-9]*' || echo 0)
                lost=$(grep -o ', [0-9]* lost' fltrace.err | grep -o '[0-9]*' || echo "?")
                kept="$kept/$lost"
                bytes=$(cat fltrace-data-faults-*.parquet fltrace-data-stacks-*.parquet fltrace-data-mmaps-*.parquet | wc -c)
                share=$("$fltrace" report --by stack --top 0 --format json 2>/dev/null | python3 -c "$reach_main")
                rss="$(grep -o 'recorder peak [0-9]* MB' fltrace.err | grep -o '[0-9]*' || echo "?") MB" ;;
            perf-*)
                kept=$(perf report -i perf.data --stats 2>/dev/null | grep -m1 'SAMPLE events:' | grep -o '[0-9][0-9,]*' | head -1 | tr -d ,)
                lost=$(perf report -i perf.data --stats 2>/dev/null | awk '/LOST events:/ {print $3; exit}')
                kept="$kept/${lost:-0}"
                bytes=$(stat -c %s perf.data)
                share=$(perf script -i perf.data -F comm,tid,ip,sym 2>/dev/null | python3 -c "$perf_reach_main")
                rss=- ;;
        esac
        local n=${kept%%/*}
        printf "%-12s %8.2fx %8.2fx %12s %12s %10s %10s\n" "$tool" "$(echo "$med / $base" | bc -l)" \
            "$(echo "$cmed / $cpu_base" | bc -l)" "$kept" "$(echo "scale=1; $bytes / ($n + 0.0001)" | bc)" "$share" "$rss"
        cd "$work"
    done
}

if [[ ${ONLY:-} != memory ]]; then
echo "== touch $mib MiB x $passes ($expected first-touch faults): faults kept / lost"
compare touch touch untraced fltrace fltrace-16k perf-fp perf-dwarf -- "$mib" "$passes"
echo
echo "== bfs: graph scale $scale, 1 trial, OpenMP on $(nproc) CPUs"
compare bfs graph untraced fltrace perf-fp -- "$scale" 1
echo
fi

# Kernel memory while recording `sleep 3`: MemAvailable a second before and 1.5 s in.
avail_kb() { awk '/^MemAvailable:/ {print $2}' /proc/meminfo; }
# The kernel memory process `pid` holds for rings and BPF objects, KiB: its perf rings'
# mappings (`[perf_event]`) and the memlock of its BPF maps and programs.
held_kib() { # pid
    python3 - "$1" <<'PY'
import os, sys
pid = sys.argv[1]
perf = 0
for line in open(f"/proc/{pid}/maps"):
    if line.rstrip().endswith("[perf_event]"):
        a, b = line.split()[0].split("-")
        perf += int(b, 16) - int(a, 16)
bpf = 0
for fd in os.listdir(f"/proc/{pid}/fd"):
    try:
        link = os.readlink(f"/proc/{pid}/fd/{fd}")
        if link.endswith(("bpf-map", "bpf-prog")):
            for l in open(f"/proc/{pid}/fdinfo/{fd}"):
                if l.startswith("memlock:"):
                    bpf += int(l.split()[1])
    except OSError:
        pass
print(f"{perf / 1024:.0f} {bpf / 1024:.0f}")
PY
}
memory() { # label command...
    local label=$1; shift
    local before during held
    sleep 1; before=$(avail_kb)
    "$@" -- sleep 3 >/dev/null 2>&1 &
    local pid=$!
    sleep 1.5; during=$(avail_kb); held=$(held_kib "$pid")
    wait "$pid" || true
    printf "%-28s %14s %14s %14s %12.1f\n" "$label" ${held% *} ${held#* } "$((${held% *} + ${held#* }))" \
        "$(echo "($before - $during) / 1024" | bc -l)"
}
echo "== kernel memory while recording sleep 3 ($(nproc) CPUs here)"
printf "%-28s %14s %14s %14s %12s\n" recorder perf_rings_KiB bpf_memlock_KiB total_KiB avail_drop_MiB
cd "$work"
for ((r = 0; r < 2; r++)); do
    memory "fltrace (BPF ring)" "$fltrace" record -q -o "$work"
    memory "fltrace --stack-size 16384" "$fltrace" record -q -o "$work" --stack-size 16384
    [[ -n ${FLTRACE_PREVIOUS:-} ]] && memory "previous fltrace" "$FLTRACE_PREVIOUS" record -q -o "$work"
    memory "perf record -g" perf record -q -o "$work/perf.data" -e page-faults -c 1 -g
done
echo
echo "== the sizing rule (--buffer-mb 64, the default): kernel memory of the rings"
"$root/target/release/examples/ring_plan" 2 64 256
echo
echo "(bench/faults.sh $mib $passes $rounds, GRAPH_SCALE=$scale; load $(cut -d' ' -f1-3 /proc/loadavg))"
