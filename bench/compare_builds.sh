#!/usr/bin/env bash
# Two fltrace binaries over the same recordings, byte for byte: a restructuring must change
# nothing a user sees. Recordings are made once with BEFORE (a shell running a threaded
# workload and a forking one, one with --allocs, one far-memory run with -L, a wss trace, a
# runs series and a sweep); then every command form runs with each binary in its own copy of
# them, from the same relative paths, and its exit status, stdout, stderr and the files it
# wrote (their bytes) are compared. `wss` samples live, so its two runs are compared with
# digits masked.
# usage: BEFORE=/work/main/target/debug/fltrace AFTER=target/debug/fltrace bench/compare_builds.sh
# (WORK=DIR keeps the recordings and outputs there; KEEP=1 keeps the temporary one.)
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
: "${BEFORE:?BEFORE=path to the first fltrace binary}"
: "${AFTER:?AFTER=path to the second fltrace binary}"
BEFORE=$(realpath "$BEFORE"); AFTER=$(realpath "$AFTER")
if [ -n "${WORK:-}" ]; then
    work=$WORK; mkdir -p "$work"
else
    work=$(mktemp -d /tmp/fltrace-compare.XXXXXX)
    [ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT
fi
rec=$work/rec

# The recordings, made once (a WORK dir already holding them is reused).
if [ ! -e "$rec/.done" ]; then
    rm -rf "$rec"; mkdir -p "$rec/bin"
    for w in threads2 forkchild allocs farmem; do
        gcc -O2 -g -fomit-frame-pointer -pthread -o "$rec/bin/$w" "$root/workloads/$w.c" || exit 1
    done
    (
        cd "$rec" || exit 1
        "$BEFORE" record -q -o plain -- sh -c './bin/threads2 50 200 && ./bin/forkchild 4 2'
        "$BEFORE" record -q --allocs -o allocs -- ./bin/allocs threads 4
        "$BEFORE" record -q -L 8 -M 64 -o far -- ./bin/farmem threads 16 2
        "$BEFORE" wss --interval 50ms -o wss -- ./bin/farmem threads 64 4 >/dev/null
        "$BEFORE" runs -n 2 --seed 7 -o series -- './bin/threads2 20 40' './bin/forkchild 2 1' 2>/dev/null
        "$BEFORE" analyze series -o runs.sqlite 2>/dev/null
        "$BEFORE" sweep --from 100 --to 50 --step 25 -o sweep -- ./bin/farmem threads 8 1 >/dev/null 2>&1
    ) || exit 1
    touch "$rec/.done"
fi

# Values the forms need, read with BEFORE.
cd "$rec" || exit 1
pid_of() { "$BEFORE" list "$1" --format json | sed -n 's/.*"pid": \([0-9]*\).*/\1/p' | sed -n "${2}p"; }
plain_pid=$(pid_of plain 1); plain_pid2=$(pid_of plain 2); far_pid=$(pid_of far 1)
tid=$("$BEFORE" report -d plain --by tid --format csv 2>/dev/null | sed -n '2s/^[^,]*,\([0-9]*\),.*/\1/p')
[ -n "$tid" ] || tid=$plain_pid
run_id=$(sqlite3 runs.sqlite 'select min(id) from runs' 2>/dev/null || echo 1)
cd - >/dev/null || exit 1

forms=()
for d in plain allocs far; do
    forms+=("report -d $d")
    for by in stack function line dso comm pid tid alloc-site; do forms+=("report -d $d --by $by"); done
    for f in table csv json folded; do forms+=("report -d $d --format $f"); done
    forms+=("report -d $d --format pprof -o $d.pb.gz" "report -d $d --format csv --by function -o out.csv")
    forms+=("report -d $d -g" "report -d $d -g callee --top 5" "report -d $d -g --format json")
    forms+=("report -d $d --allocs" "report -d $d --allocs --by function --format csv" "report -d $d --leaks"
        "report -d $d --leaks --older-ms 1 --format json" "report -d $d --allocs --format json")
    forms+=("report -d $d --time 0..0.05" "report -d $d --call-site leaf" "report -d $d --hide main"
        "report -d $d --focus fill" "report -d $d --wide --top 0" "report -d $d --legacy-csv legacy"
        "report -d $d --include-tracer" "report -d $d --comm threads2,farmem" "report -d $d --salvage")
    forms+=("visualize -d $d" "visualize -d $d --label line -o svgs" "visualize -d $d --label both --by-allocation")
    for from in faults wss damon access; do forms+=("heatmap -d $d --from $from"); done
    forms+=("heatmap -d $d --terminal" "heatmap -d $d --allocs 3 -o map.svg" "heatmap -d $d --time 0..0.1 --block-bits 16 -o map.png"
        "heatmap -d $d --addr 0x0..0x7fffffffffff --width 64 --height 32 --terminal")
    forms+=("script -d $d" "script -d $d --addr" "list $d" "list $d --format json")
done
forms+=("report -d plain -p $plain_pid" "report -d plain -p $plain_pid2 --by dso" "report -d plain --tid $tid"
    "report -d plain --tid $tid --by tid" "script -d plain --tid $tid" "heatmap -d plain -p $plain_pid2 --terminal"
    "heatmap -d plain --tid $tid --terminal" "report -d far -p $far_pid --by line --format csv"
    "report -d nothing" "report -d plain -p 1" "visualize -d nothing")
forms+=("heatmap -d wss --from wss" "heatmap -d wss --from wss --terminal" "heatmap -d wss --from wss --time 0..0.2 -o w.svg"
    "heatmap -d wss --from damon")
forms+=("diff plain far" "diff plain allocs --by function --format csv" "diff far plain --by dso --format json --top 3"
    "diff plain far --by stack" "diff plain far --by tid" "diff plain far --pid-a $plain_pid")
forms+=("runs runs.sqlite --list" "runs runs.sqlite --stat" "runs runs.sqlite --list --format csv"
    "runs runs.sqlite --stat --format json" "runs runs.sqlite --list --format json" "runs runs.sqlite --stat --format csv"
    "runs runs.sqlite --run $run_id -o page.html" "runs runs.sqlite --run 99999 -o page2.html")
forms+=("sweep --from 100 --to 50 --step 25 -o sweep -- ./bin/farmem threads 8 1" "sweep --from 10 --to 50 -o sweep -- true")
forms+=("export . -o exported --host h" "export plain -o exp2 --host a/b")
forms+=("analyze series -o cat2.sqlite")
forms+=("archive -d plain" "archive -d allocs -o arch.tar.zst" "archive -d far -o archdir" "archive -d far -p $far_pid -o a.tar"
    "archive -d allocs -o one.tar.zst >/dev/null && \"\$1\" report -d one.tar.zst --by dso"
    "archive -d plain -o plain/notes.txt/x")

# One form with one binary in a fresh copy of the recordings: status, stdout, stderr, files.
run_form() { # $1: binary, $2: side (a or b), $3: form
    local dir=$work/run/$2 out=$work/out/$2
    rm -rf "$dir" "$out"; mkdir -p "$out" "$work/run"; cp -a "$rec" "$dir"
    (cd "$dir" && eval "\"$1\" $3" >"$out/stdout" 2>"$out/stderr"; echo $? >"$out/status")
    # SQLite files by their contents (their pages differ from one writing to the next), the
    # copy's directory named as stdout and stderr name it; tar files by their members' names
    # and bytes (their headers hold the time the archive's own files were written).
    (cd "$dir" && find . -type f ! -path './bin/*' -newer "$rec/.done" | sort | while read -r f; do
        case $f in
        *.sqlite) echo "$(sqlite3 "$f" .dump | sed "s#$dir#DIR#g" | sha256sum | cut -d' ' -f1)  $f (dump)" ;;
        *.tar | *.tar.zst) echo "$({ tar -tf "$f" && tar -xOf "$f"; } | sha256sum | cut -d' ' -f1)  $f (members)" ;;
        *) sha256sum "$f" ;;
        esac
    done) >"$out/files"
    sed -i "s#$dir#DIR#g" "$out/stdout" "$out/stderr"
}

same=0; differ=0; differing=()
for form in "${forms[@]}"; do
    run_form "$BEFORE" a "$form"
    run_form "$AFTER" b "$form"
    if cmp -s "$work/out/a/stdout" "$work/out/b/stdout" && cmp -s "$work/out/a/stderr" "$work/out/b/stderr" \
        && cmp -s "$work/out/a/status" "$work/out/b/status" && cmp -s "$work/out/a/files" "$work/out/b/files"; then
        same=$((same + 1))
    else
        differ=$((differ + 1)); differing+=("$form")
        if [ -n "${VERBOSE:-}" ]; then
            for f in status stdout stderr files; do diff "$work/out/a/$f" "$work/out/b/$f" | head -5; done
        fi
    fi
done

# wss samples live: the same lines with the numbers (and the padding before them) masked.
wss_form() { # $1: binary, $2: side
    local dir=$work/run/$2
    rm -rf "$dir"; mkdir -p "$work/run"; cp -a "$rec" "$dir"
    (cd "$dir" && "$1" wss --interval 50ms --format "$3" -o w -- ./bin/farmem threads 32 2 2>&1; echo "status $?"; ls w) | sed 's/[0-9]\+/N/g; s/  */ /g' | uniq
}
for format in table csv json; do
    if [ "$(wss_form "$BEFORE" a $format)" = "$(wss_form "$AFTER" b $format)" ]; then
        same=$((same + 1))
    else
        differ=$((differ + 1)); differing+=("wss --format $format (digits masked)")
    fi
done

echo "$same same, $differ differ"
for form in "${differing[@]}"; do echo "differs: $form"; done
[ "$differ" -eq 0 ]
