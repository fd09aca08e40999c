#!/usr/bin/env bash
# The cost of finding a program's own allocators (#24): `fltrace report` on a recording made
# with `record --allocs`, which reads the allocation tables, replays the blocks' lifetimes and
# tests each call site, against the same recording with its allocation tables left out (a
# copy without `fltrace-data-allocs-*` and the checksums list naming them), which reports the
# same faults without the detection (nor checking the allocation tables' checksums).
# Median of ROUNDS runs each, wall time and peak RSS (/usr/bin/time -v).
# The workload is python3 building and serializing 300K dicts (pymalloc's arenas, the
# interpreter's own allocators) and sqlite3 filling an indexed table of 200K rows.
# usage: [FLTRACE=path/to/fltrace] bench/alloc_detection.sh [ROUNDS=5]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rounds=${1:-5}
fltrace=${FLTRACE:-$root/target/release/fltrace}
[ -n "${FLTRACE:-}" ] || (cd "$root" && cargo build --release -q -p fltrace -p fltrace-preload)
work=$(mktemp -d /tmp/fltrace-bench-detect.XXXXXX)
trap 'rm -rf "$work"' EXIT

cat >"$work/q.sql" <<'EOF'
create table t(a integer primary key, b text);
with recursive c(x) as (select 1 union all select x+1 from c where x<200000)
  insert into t select x, hex(randomblob(40)) from c;
create index ib on t(b);
select count(*) from t;
EOF

measure() {
    /usr/bin/time -v "$@" >/dev/null 2>"$work/time.txt"
    awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2,t,":"); s=0; for(i=1;i<=n;i++) s=s*60+t[i]}
        /Maximum resident set size/ {kb=$2} END {print s, kb}' "$work/time.txt"
}
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

run() {
    local name=$1; shift
    mkdir -p "$work/$name/with" "$work/$name/without"
    (cd "$work" && "$fltrace" record -q --allocs -o "$name/with" -- "$@" >/dev/null)
    for f in "$work/$name/with"/*; do
        case "$(basename "$f")" in
            fltrace-data-allocs-*|fltrace-data-allocstacks-*) ;;
            *) cp -a "$f" "$work/$name/without/" ;;
        esac
    done
    # The checksums list (itself checksummed) names the allocation tables: the copy goes
    # without it, read as a recording whose files are not checked.
    rm -f "$work/$name/without"/fltrace-data-checksums-*.out
    local faults
    faults=$("$fltrace" report -d "$work/$name/with" --format json --top 1 2>/dev/null |
        python3 -c 'import sys,json; print(json.load(sys.stdin)["faults"])')
    : >"$work/with.t"; : >"$work/without.t"; : >"$work/with.m"; : >"$work/without.m"
    for _ in $(seq "$rounds"); do
        for kind in with without; do
            read -r t m < <(measure "$fltrace" report -d "$work/$name/$kind")
            echo "$t" >>"$work/$kind.t"; echo "$m" >>"$work/$kind.m"
        done
    done
    printf '%s: %s faults; report with detection %.2f s, %s MB; without %.2f s, %s MB\n' \
        "$name" "$faults" \
        "$(median <"$work/with.t")" "$(( $(median <"$work/with.m") / 1024 ))" \
        "$(median <"$work/without.t")" "$(( $(median <"$work/without.m") / 1024 ))"
}

run python3 /usr/bin/python3 -c 'import json; d=[{"a": i, "b": str(i) * 3} for i in range(300000)]; s=json.dumps(d); print(len(s))'
run sqlite3 sqlite3 :memory: ".read $work/q.sql"
