#!/usr/bin/env bash
# memleak on heavy malloc/free (issue #22): a program that makes N malloc/free pairs (64 bytes,
# each block freed at once) and keeps KEEP blocks, timed untraced, under `fltrace memleak -p`
# (uprobes, DWARF stacks unwound in user space) and under a bpftrace memleak (uprobes on
# malloc/free, blocks kept by address with their user stack, as bcc's memleak; bcc itself needs
# kprobes, absent here). Each tracer attaches to the waiting program, which then runs; the
# program's run is timed, then the tracer is interrupted and the time its report took is
# timed too. Prints the medians and the blocks each reported outstanding (KEEP expected).
# KEEP_WORK=1 keeps the scratch directory (its outputs).
# usage: bench/memleak.sh [PAIRS=1000000] [KEEP=1000] [ROUNDS=3]
# TOOLS="untraced fltrace" leaves bpftrace out.
# FLTRACE=path/to/fltrace uses that binary instead of building the release one.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
pairs=${1:-1000000}; keep=${2:-1000}; rounds=${3:-3}
work=$(mktemp -d /tmp/fltrace-bench.XXXXXX)
trap '[[ -n ${KEEP_WORK:-} ]] || rm -rf "$work"' EXIT
if [[ -z ${FLTRACE:-} ]]; then (cd "$root" && cargo build --release --locked -q); fi
fltrace="${FLTRACE:-$root/target/release/fltrace}"
cat >"$work/churn.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static void *volatile sink;
int main(int argc, char **argv) {
    long pairs = atol(argv[1]), keep = atol(argv[2]);
    char go[8];
    if (read(0, go, sizeof go) <= 0) return 1;
    void **kept = calloc(keep, sizeof *kept);
    for (long i = 0; i < pairs; i++) { sink = malloc(64); free(sink); }
    for (long i = 0; i < keep; i++) kept[i] = malloc(64); /* the kept blocks: line 11 */
    printf("done\n"); fflush(stdout);
    if (read(0, go, sizeof go) < 0) return 1;
    return kept[0] == 0;
}
C
gcc -O2 -g -o "$work/churn" "$work/churn.c"
libc=$(ldd "$work/churn" | awk '/libc.so/ {print $3}')
cat >"$work/leak.bt" <<BT
uprobe:$libc:malloc /pid == \$1/ { @size[tid] = arg0; @stack[tid] = ustack; }
uretprobe:$libc:malloc /pid == \$1 && @size[tid]/ {
    @addr[retval] = @size[tid]; @where[retval] = @stack[tid];
    delete(@size[tid]); delete(@stack[tid]);
}
uprobe:$libc:free /pid == \$1 && @addr[arg0]/ { delete(@addr[arg0]); delete(@where[arg0]); }
END { clear(@size); clear(@stack); clear(@where); }
BT
now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

declare -A run report kept
for ((r = 0; r < rounds; r++)); do
    for tool in ${TOOLS:-untraced fltrace bpftrace}; do
        rm -f "$work/in"; mkfifo "$work/in"
        "$work/churn" "$pairs" "$keep" <"$work/in" >"$work/out" &
        prog=$!
        exec 3>"$work/in"
        tracer=
        case $tool in
            fltrace) "$fltrace" memleak -p "$prog" -o 0 --top 5 --format json >"$work/fltrace.out" 2>"$work/fltrace.err" 3>&- &
                tracer=$!; ready=attached; log="$work/fltrace.err" ;;
            bpftrace) bpftrace "$work/leak.bt" "$prog" >"$work/bpftrace.out" 2>"$work/bpftrace.err" 3>&- &
                tracer=$!; ready=Attaching; log="$work/bpftrace.out" ;;
        esac
        if [[ -n $tracer ]]; then
            for _ in $(seq 600); do grep -q "$ready" "$log" 2>/dev/null && break; sleep 0.05; done
        fi
        t0=$(now); echo go >&3
        while ! grep -q done "$work/out"; do sleep 0.01; done
        t1=$(now)
        run[$tool]+="$(echo "$t1 - $t0" | bc) "
        if [[ -n $tracer ]]; then
            kill -INT "$tracer"; wait "$tracer" || true
            t2=$(now)
            report[$tool]+="$(echo "$t2 - $t1" | bc) "
        fi
        exec 3>&-; wait "$prog" || true
    done
    [[ -s $work/fltrace.out ]] && kept[fltrace]=$(python3 -c 'import json,sys
r=[json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]
print(sum(s["allocations"] for s in r["stacks"] if s["stack"] and "churn.c:11" in s["stack"][0]), r.get("lost", r.get("dropped")))' "$work/fltrace.out")
    [[ -s $work/bpftrace.out ]] && kept[bpftrace]=$(grep -c '^@addr\[' "$work/bpftrace.out" || true)
done
printf '%-9s %10s %9s %12s %s\n' tool run_s slowdown report_s "outstanding (fltrace: at line 11, lost; bpftrace: all)"
base=$(echo ${run[untraced]} | tr ' ' '\n' | median)
for tool in ${TOOLS:-untraced fltrace bpftrace}; do
    m=$(echo ${run[$tool]} | tr ' ' '\n' | median)
    rep=-; [[ $tool != untraced ]] && rep=$(echo ${report[$tool]} | tr ' ' '\n' | median)
    printf '%-9s %10.3f %8.2fx %12s %s\n' "$tool" "$m" "$(echo "$m / $base" | bc -l)" "$rep" "${kept[$tool]:--}"
done
echo "expected outstanding at line 11: $keep (bpftrace: every malloc block left, stdio's buffer too: $((keep + 1)))"
