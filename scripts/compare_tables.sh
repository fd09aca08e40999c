#!/bin/bash
# Compares two fltrace binaries (before and after a change) on the same deterministic
# workloads: the rows of every table each writes (times, recording ids, pids and tids left
# out; ASLR off), and each reading command form of each binary over copies of the same
# recordings, stdout, stderr and written files byte for byte.
#
#   scripts/compare_tables.sh BEFORE_FLTRACE AFTER_FLTRACE
#
# Needs gcc and target/venv/bin/python with duckdb. Exits 1 on any difference. The preload
# library sits beside each binary, so rows naming it (its path, build ID, and a fault or two
# in the loader's data, whose layout follows the path's length) differ between two builds in
# different directories: those are listed, not failed.
set -u
before=$(realpath "$1"); after=$(realpath "$2")
root=$(cd "$(dirname "$0")/.." && pwd)
python="$root/target/venv/bin/python"
work=$(mktemp -d /tmp/fltrace-compare.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
gcc -O2 -g -o faults "$root/workloads/faults.c"
gcc -O2 -g -o allocs "$root/workloads/allocs.c"
fail=0
for b in before after; do
  bin=${!b}
  mkdir -p "rec/$b-faults" "rec/$b-allocs"
  (cd "rec/$b-faults" && setarch -R "$bin" record -q -- "$work/faults" nested 100 >/dev/null 2>&1)
  (cd "rec/$b-allocs" && setarch -R "$bin" record -q --allocs -- "$work/allocs" sites >/dev/null 2>&1)
done
"$python" - <<'PY' || fail=1
import duckdb, glob, re
left_out = {'time_ns', 'recording', 'pid', 'tid'}
def same_run(value):
    # The spool's files are named after the recorder, the process and the recording's place.
    if not isinstance(value, str):
        return value
    value = re.sub(r'rec/(before|after)-', 'rec/', value)
    value = re.sub(r'\.fltrace-allocs-\d+-\d+/log-(\d+)\.', '.fltrace-allocs-N/log-P.', value)
    return re.sub(r'\.fltrace-allocs-\d+-\d+/', '.fltrace-allocs-N/', value)
def rows(path):
    con = duckdb.connect()
    cols = [r[0] for r in con.execute(f"describe select * from read_parquet('{path}')").fetchall()]
    keep = [c for c in cols if c not in left_out]
    found = con.execute(f"select {','.join(keep)} from read_parquet('{path}')").fetchall()
    return keep, [tuple(same_run(v) for v in row) for row in found]
failed = False
for kind in ['faults', 'allocs']:
    for table in ['faults', 'stacks', 'mmaps', 'allocs', 'allocstacks', 'allocsums']:
        a = glob.glob(f'rec/before-{kind}/fltrace-data-{table}-*.parquet')
        b = glob.glob(f'rec/after-{kind}/fltrace-data-{table}-*.parquet')
        if not a and not b:
            continue
        (ka, ra), (kb, rb) = rows(a[0]), rows(b[0])
        differ = [(x, y) for x, y in zip(ra, rb) if x != y]
        preload = all('libfltrace_preload' in repr(x) + repr(y) or table == 'faults' and len(differ) <= 2 for x, y in differ)
        same = ka == kb and len(ra) == len(rb) and (not differ or preload)
        print(f"{'same  ' if same else 'DIFFER'} {kind:6} {table:11} {len(ra)} rows"
              + (f" ({len(differ)} that differ by the preload library's path)" if differ and same else ""))
        failed |= not same
raise SystemExit(1 if failed else 0)
PY
for rec in before-faults after-faults before-allocs after-allocs; do
  while IFS= read -r form; do
    for b in before after; do
      bin=${!b}
      rm -rf "run-$b"; mkdir "run-$b"; cp -a "rec/$rec" "run-$b/rec"
      (cd "run-$b" && eval "\"$bin\" $form" > out.txt 2> err.txt; echo "rc=$?" >> out.txt)
      sed -i "s#run-$b#RUN#g; s#$bin#BIN#g" "run-$b/err.txt"
    done
    if diff -r run-before run-after > /dev/null; then echo "same   $rec: $form"
    else echo "DIFFER $rec: $form"; diff -r run-before run-after | head -5; fail=1; fi
  done <<'FORMS'
report -d rec --format json --top 0
report -d rec --by line
report -d rec
report -d rec --by stack --format csv --top 0
report -d rec --allocs --format csv --top 0
report -d rec --leaks
report -d rec --format folded
script -d rec
visualize -d rec -o .
heatmap -d rec -o h.svg
export -o exp rec
diff rec rec --format csv --top 0
archive -d rec -o arch
FORMS
done
exit $fail
