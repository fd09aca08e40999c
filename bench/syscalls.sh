#!/usr/bin/env bash
# What recording costs a program that makes many system calls: `dd bs=1` copies COUNT bytes
# from /dev/zero to /dev/null (2 x COUNT syscalls), bare and under each fltrace binary given,
# alternating, ROUNDS times each; prints the median wall time of each. The mremap
# tracepoints put every syscall of every task through the kernel's slow syscall path while a
# recording runs: compare a build with them against one without.
# usage: bench/syscalls.sh FLTRACE... [COUNT=2000000] [ROUNDS=5] (COUNT, ROUNDS from the env)
set -euo pipefail
count=${COUNT:-2000000}; rounds=${ROUNDS:-5}
work=$(mktemp -d /tmp/fltrace-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
run_ms() { local s e; s=$(date +%s%N); "$@" >/dev/null 2>&1; e=$(date +%s%N); echo $(((e - s) / 1000000)); }
declare -A times
for _ in $(seq "$rounds"); do
    times[bare]+="$(run_ms dd if=/dev/zero of=/dev/null bs=1 count="$count") "
    for f in "$@"; do
        rm -rf "${work:?}"/*
        times[$f]+="$(cd "$work" && run_ms "$f" record -q -- dd if=/dev/zero of=/dev/null bs=1 count="$count") "
    done
done
for k in bare "$@"; do
    echo "$k: $(echo "${times[$k]}" | tr ' ' '\n' | grep . | median) ms"
done
