#!/usr/bin/env bash
# Complete stacks on programs people run (issues #21, #30): cc1plus (Debian's g++ on a
# generated, template-heavy C++ file), python3 (Debian's, a short JSON/regex/decimal script that
# exits at once) and sqlite3 (an in-memory table of 200,000 rows, an index, a sort). For each:
# wall time and CPU time (user+sys of the recording: fltrace and the program) against the
# untraced run (medians of ROUNDS alternating runs), and the share of fault stacks whose
# outermost frame is a thread entry (`_start`, `_dl_start_user`, `start_thread`,
# `clone`/`clone3`; in a stripped executable, the frame that calls `__libc_start_main`), under
# fltrace's defaults (issue #36: the live stack, up to 256 KiB, through the BPF ring), a
# previous build's defaults (`FLTRACE_PREVIOUS=path/to/old/fltrace`, skipped if unset),
# `--stack-size 16384` (the per-CPU perf copy of 16 KiB, the defaults before the BPF ring),
# `--exact-stacks` (the live stack copied, nothing completed beyond it), and `perf record
# --call-graph dwarf` (its samples and lost records). redis-server (under `redis-benchmark -n
# 20000 -t set,get,lpush,lrange_100`) and postgres 15 (a postmaster and its children, run as
# user postgres, under `pgbench -t 300` after `pgbench -i -s 2`) are added where installed:
# their wall time is the client's, their CPU time the server's and the recorder's, and the
# complete share is over all the server's processes. node (Debian's, `--perf-basic-prof
# --interpreted-frames-native-stack` on workloads/hot.js) and the JVM (OpenJDK 17, `-Xcomp
# -XX:+PreserveFramePointer` on workloads/Chain.java, its levels kept out of line) are the JIT
# runtimes (issue 36); `perf-fp` is `perf record -g` (frame pointers). For each program, the
# last line says how many of the caller->callee steps of fltrace's stacks (defaults) perf's
# stacks also take, by frame pointers or by DWARF (JIT frames by the name their map gives
# them, the frames below `__libc_start_call_main` left out): a step no other walk takes is
# either one perf cannot see or a wrong one. `java-nofp` is the JVM without PreserveFramePointer
# (its stacks must stop at compiled Java code, truncated); for node and the JVM, the share of
# faults with a JS (`JS:`) or Java (`Chain.`) frame named from the perf map, by each tool.
# usage: bench/stacks.sh [ROUNDS=3]   (FLTRACE=path/to/fltrace to use another build;
# PROGRAMS="python3 sqlite3" for some of the seven; TOOLS="untraced defaults copy-16k" for some
# of the tools)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rounds=${1:-3}
work=$(mktemp -d /tmp/fltrace-stacks.XXXXXX)
# The pids of the runtimes whose perf maps are removed (none for most programs).
: >"$work/pids"
trap 'sort -u "$work/pids" 2>/dev/null | while read -r pid; do rm -f "/tmp/perf-$pid.map"; done; rm -rf "$work"' EXIT
fltrace=$(realpath -m "${FLTRACE:-$root/target/release/fltrace}")
[[ -n ${FLTRACE:-} ]] || (cd "$root" && cargo build --release --locked -q -p fltrace -p fltrace-preload)
command -v perf >/dev/null || { apt-get install -y -qq linux-perf >/dev/null; }

python3 - "$work/big.cpp" <<'PY'
import sys
n = 60
with open(sys.argv[1], "w") as out:
    w = lambda s: out.write(s + "\n")
    w("#include <map>\n#include <vector>\n#include <string>\n#include <tuple>\n#include <functional>\n#include <algorithm>")
    w("template<int N> struct Depth { static constexpr long v = Depth<N-1>::v * 3 % 1000003 + N; };")
    w("template<> struct Depth<0> { static constexpr long v = 1; };")
    for i in range(n):
        w(f"""template<typename T> struct Box{i} {{ std::vector<T> items; std::map<std::string, T> named;
  T sum() const {{ T s{{}}; for (auto& x : items) s += x; for (auto& [k, v] : named) s += v; return s; }} }};
inline long f{i}(int k) {{
  Box{i}<long> b; for (int j = 0; j < k; ++j) b.items.push_back(j * {i});
  auto t = std::make_tuple(b.sum(), std::to_string(k), Depth<{200 + i % 200}>::v);
  std::vector<std::function<long(long)>> fs{{[](long x) {{ return x + {i}; }}, [k](long x) {{ return x * k; }}}};
  long r = std::get<0>(t) + std::get<2>(t); for (auto& f : fs) r = f(r);
  std::sort(b.items.begin(), b.items.end(), [](long a, long c) {{ return a > c; }});
  return r + (long)std::get<1>(t).size();
}}""")
    w("int main() { long r = 0;")
    for i in range(n):
        w(f"  r += f{i}({i % 7});")
    w("  return (int)(r & 1); }")
PY
cat >"$work/script.py" <<'PY'
import json, decimal, re, collections
d = {str(i): [i, str(i) * 3, {"k": i}] for i in range(20000)}
s = json.dumps(d); back = json.loads(s)
c = collections.Counter(re.findall(r"\d\d", s))
print(len(back), sum(decimal.Decimal(i) / 7 for i in range(2000)) > 0, len(c))
PY
cat >"$work/rows.sql" <<'SQL'
create table t(a integer primary key, b text, c real);
with recursive n(x) as (select 1 union all select x+1 from n where x < 200000)
  insert into t select x, hex(randomblob(16)), x*1.5 from n;
create index tb on t(b);
select count(*), sum(c) from t where b like 'A%';
select b from t order by b desc limit 3;
SQL

# Reads `perf script`/`fltrace script` output; counts, per process whose frames name the
# program's binary ($1) or whose comm is its name, the stacks that end at a thread entry.
cat >"$work/complete.py" <<'PY'
import sys
binary = sys.argv[1]
ENTRIES = {"_start", "_dl_start_user", "start_thread", "clone", "clone3", "__clone3", "__GI___clone3", "__clone", "__GI___clone"}
STARTERS = {"__libc_start_main_impl", "__libc_start_main", "__libc_start_main_alias_2"}
tot = {}; ok = {}; of_binary = set(); names = []; pid = None
def name(line):
    f = line.strip().split(None, 1)
    return f[1].rsplit(" (", 1)[0].rsplit("+0x", 1)[0] if len(f) > 1 else "?"
def flush():
    if pid is None: return
    tot[pid] = tot.get(pid, 0) + 1
    if names and (names[-1] in ENTRIES or (len(names) > 1 and names[-2] in STARTERS)):
        ok[pid] = ok.get(pid, 0) + 1
for line in sys.stdin:
    if not line.strip(): continue
    if line[0] not in " \t":
        flush(); names = []
        pid = next(w for w in line.split() if w[0].isdigit()).split("/")[0]
        # Debian's redis-server is a link to redis-check-rdb: its frames do not name it.
        if line.split()[0] == binary[:15]: of_binary.add(pid)
        continue
    if binary in line: of_binary.add(pid)
    names.append(name(line))
flush()
t = sum(tot[p] for p in of_binary); o = sum(ok.get(p, 0) for p in of_binary)
print(f"{100 * o / t:.2f}% of {t}" if t else "no stacks")
PY

# The caller->callee steps of `fltrace script` ($1) that none of the `perf script` files after it
# takes: prints the share of fltrace's steps perf takes too.
cat >"$work/edges.py" <<'PY'
import re, sys
def canonical(name):
    name = re.sub(r"( \[clone [^\]]*\])+$", "", name.strip())
    if name.endswith(" const"): name = name[:-6]
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            if name[i] == ")": depth += 1
            elif name[i] == "(":
                depth -= 1
                if depth == 0:
                    if i and not name[:i].endswith("operator"): name = name[:i]
                    break
    depth = 0; start = 0
    for i, c in enumerate(name):
        if c in "<(": depth += 1
        elif c in ">)": depth -= 1
        elif c == " " and depth == 0: start = i + 1
    name = name[start:]
    for prefix in ("__GI___libc_", "__GI___", "__GI_", "__libc_"):
        if name.startswith(prefix): name = name[len(prefix):]; break
    return name.lstrip("_")
def stacks(path):
    out = []; cur = None
    for line in open(path, errors="replace"):
        if not line.strip():
            if cur is not None: out.append(cur)
            cur = None; continue
        if line[0] not in " \t":
            if cur is not None: out.append(cur)
            cur = []; continue
        f = line.strip().split(None, 1)
        if len(f) < 2 or cur is None: continue
        m = re.match(r"(.*) \(([^()]*)\)$", f[1])
        sym, dso = (m.group(1), m.group(2)) if m else (f[1], "")
        sym = re.sub(r"\+0x[0-9a-f]+$", "", sym)
        if cur and cur[-1][0] == f[0] and cur[-1][2] == "inlined": cur.pop()
        cur.append((f[0], sym, dso))
    if cur is not None: out.append(cur)
    return out
def edges(paths):
    seen = {}
    for path in paths:
        for frames in stacks(path):
            keys = [None if s.startswith("[") or not s else canonical(s) for _, s, _ in frames]
            for callee, caller in zip(keys, keys[1:]):
                if callee and caller: seen[(caller, callee)] = seen.get((caller, callee), 0) + 1
    return seen
mine = edges(sys.argv[1:2]); theirs = edges(sys.argv[2:])
outer = ("start", "libc_start_main_impl")
total = sum(n for e, n in mine.items() if e[0] not in outer)
seen = sum(n for e, n in mine.items() if e[0] not in outer and e in theirs)
worst = sorted(((n, e) for e, n in mine.items() if e[0] not in outer and e not in theirs), reverse=True)[:3]
print(f"{100 * seen / total:.2f}% of {total} steps also perf's" if total else "no steps",
      "; unseen: " + ", ".join(f"{c} -> {e} ({n})" for n, (c, e) in worst) if worst else "")
PY

# The share of the stacks of `perf script`/`fltrace script` ($2) with a frame named from a perf
# map whose name holds $1 (`JS:` for node's JS functions, `Chain.` for the Java chain's methods).
cat >"$work/jit.py" <<'PY'
import sys
pattern = sys.argv[1]; tot = hit = 0; cur = False; started = False
for line in open(sys.argv[2], errors="replace"):
    if not line.strip(): continue
    if line[0] not in " \t":
        tot += started and 1; hit += started and cur; cur = False; started = True; continue
    if "perf-" in line and pattern in line: cur = True
tot += started and 1; hit += started and cur
print(f"{100 * hit / tot:.2f}% of {tot}" if tot else "no stacks")
PY

pgbin=/usr/lib/postgresql/15/bin
programs=${PROGRAMS:-cc1plus python3 sqlite3 redis-server postgres node java java-nofp}
if [[ " $programs " == *" java"* ]] && command -v javac >/dev/null; then
    mkdir -p "$work/classes" && javac -d "$work/classes" "$root/workloads/Chain.java"
fi
if [[ " $programs " == *" postgres "* && -x $pgbin/postgres ]]; then
    chmod 755 "$work"
    mkdir "$work/pgdata" && chown postgres "$work/pgdata"
    runuser -u postgres -- "$pgbin/initdb" -D "$work/pgdata" -A trust >/dev/null
fi

now() { date +%s.%N; }
# A server under a tool ($2 in $3): started, driven by its benchmark client (the only part
# timed, printed on fd 3), stopped.
serve() {
    local server=() ready load stop
    case $1 in
        redis-server)
            server=(redis-server --port 6399 --save "" --appendonly no --dir "$3")
            ready() { redis-cli -p 6399 ping >/dev/null 2>&1; }
            load() { redis-benchmark -p 6399 -q -n 20000 -t set,get,lpush,lrange_100 >/dev/null; }
            stop() { redis-cli -p 6399 shutdown nosave >/dev/null 2>&1 || true; } ;;
        postgres)
            server=(runuser -u postgres -- "$pgbin/postgres" -D "$work/pgdata" -k "$work/pgdata" -p 5499 -c listen_addresses=)
            ready() { "$pgbin/pg_isready" -q -h "$work/pgdata" -p 5499; }
            load() {
                runuser -u postgres -- "$pgbin/pgbench" -q -h "$work/pgdata" -p 5499 -i -s 2 postgres >/dev/null 2>&1
                runuser -u postgres -- "$pgbin/pgbench" -h "$work/pgdata" -p 5499 -c 4 -t 300 postgres >/dev/null 2>&1
            }
            stop() { runuser -u postgres -- "$pgbin/pg_ctl" -D "$work/pgdata" stop -m fast >/dev/null 2>&1 || true; } ;;
    esac
    chmod 777 "$3"
    local cpu=(/usr/bin/time -f "%U %S" -o "$3/cpu")
    case $2 in
        untraced) "${cpu[@]}" "${server[@]}" >/dev/null 2>&1 & ;;
        defaults) "${cpu[@]}" "$fltrace" record -o "$3" -- "${server[@]}" >/dev/null 2>"$3/err" & ;;
        previous) "${cpu[@]}" "$FLTRACE_PREVIOUS" record -o "$3" -- "${server[@]}" >/dev/null 2>"$3/err" & ;;
        copy-16k) "${cpu[@]}" "$fltrace" record -o "$3" --stack-size 16384 -- "${server[@]}" >/dev/null 2>"$3/err" & ;;
        exact) "${cpu[@]}" "$fltrace" record -o "$3" --exact-stacks -- "${server[@]}" >/dev/null 2>"$3/err" & ;;
        perf-dwarf) "${cpu[@]}" perf record -q -o "$3/perf.data" -e page-faults -c 1 --call-graph dwarf -- "${server[@]}" >/dev/null 2>"$3/err" & ;;
        perf-fp) "${cpu[@]}" perf record -q -o "$3/perf.data" -e page-faults -c 1 -g -- "${server[@]}" >/dev/null 2>"$3/err" & ;;
    esac
    local pid=$! i
    for ((i = 0; i < 300; i++)); do ready && break; sleep 0.1; done
    local t0 t1
    t0=$(now); load; t1=$(now)
    echo "$t1 - $t0" | bc >&3
    stop
    wait "$pid" || true
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
run() { # program tool dir
    local cmd
    case $1 in redis-server | postgres) serve "$@"; return ;; esac
    case $1 in
        cc1plus) cmd=(g++ -O0 -S "$work/big.cpp" -o "$3/big.s") ;;
        python3) cmd=(/usr/bin/python3 "$work/script.py") ;;
        sqlite3) cmd=(sqlite3 :memory: -init "$work/rows.sql" .quit) ;;
        # Run through a shell that notes its pid (node's and the JVM's, after exec), whose perf
        # map is removed once scored.
        node) cmd=(sh -c 'echo $$ >>"$0"; exec "$@"' "$work/pids"
                   node --perf-basic-prof --interpreted-frames-native-stack "$root/workloads/hot.js") ;;
        java) cmd=(sh -c 'echo $$ >>"$0"; exec "$@"' "$work/pids" java -Xcomp -Xms1g -Xmx1g -Xmn768m -XX:+UseSerialGC -XX:+PreserveFramePointer
                   -XX:+UnlockDiagnosticVMOptions -XX:+DumpPerfMapAtExit -XX:CompileCommand=quiet
                   "-XX:CompileCommand=dontinline,Chain::level*" -cp "$work/classes" Chain 256) ;;
        # The same without PreserveFramePointer: stacks through compiled Java code must stop there.
        java-nofp) cmd=(sh -c 'echo $$ >>"$0"; exec "$@"' "$work/pids" java -Xcomp -Xms1g -Xmx1g -Xmn768m -XX:+UseSerialGC
                   -XX:+UnlockDiagnosticVMOptions -XX:+DumpPerfMapAtExit -XX:CompileCommand=quiet
                   "-XX:CompileCommand=dontinline,Chain::level*" -cp "$work/classes" Chain 256) ;;
    esac
    local cpu=(/usr/bin/time -f "%U %S" -o "$3/cpu")
    case $2 in
        untraced) "${cpu[@]}" "${cmd[@]}" ;;
        defaults) "${cpu[@]}" "$fltrace" record -o "$3" -- "${cmd[@]}" 2>"$3/err" ;;
        previous) "${cpu[@]}" "$FLTRACE_PREVIOUS" record -o "$3" -- "${cmd[@]}" 2>"$3/err" ;;
        copy-16k) "${cpu[@]}" "$fltrace" record -o "$3" --stack-size 16384 -- "${cmd[@]}" 2>"$3/err" ;;
        exact) "${cpu[@]}" "$fltrace" record -o "$3" --exact-stacks -- "${cmd[@]}" 2>"$3/err" ;;
        perf-dwarf) "${cpu[@]}" perf record -q -o "$3/perf.data" -e page-faults -c 1 --call-graph dwarf -- "${cmd[@]}" 2>"$3/err" ;;
        perf-fp) "${cpu[@]}" perf record -q -o "$3/perf.data" -e page-faults -c 1 -g -- "${cmd[@]}" 2>"$3/err" ;;
    esac >/dev/null
}
tools=(untraced defaults)
[[ -n ${FLTRACE_PREVIOUS:-} ]] && tools+=(previous)
tools+=(copy-16k exact perf-dwarf perf-fp)
# TOOLS="untraced defaults previous" runs some of them (untraced first: the others' base).
[[ -n ${TOOLS:-} ]] && read -ra tools <<<"$TOOLS"
printf "%-8s %-11s %9s %9s %22s %s\n" program tool time cpu complete lost
for program in $programs; do
    case $program in
        redis-server) command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null || { echo "($program not installed)"; continue; } ;;
        postgres) [[ -x $pgbin/postgres && -x $pgbin/pgbench ]] || { echo "($program not installed)"; continue; } ;;
        node) command -v node >/dev/null || { echo "($program not installed)"; continue; } ;;
        java | java-nofp) [[ -d $work/classes ]] || { echo "($program not installed)"; continue; } ;;
    esac
    declare -A times=() cpus=()
    for ((r = 0; r < rounds; r++)); do
        for tool in "${tools[@]}"; do
            dir="$work/$program-$tool"; rm -rf "$dir"; mkdir -p "$dir"
            case $program in
                redis-server | postgres) times[$tool]+="$(run "$program" "$tool" "$dir" 3>&1) " ;;
                *) t0=$(now); run "$program" "$tool" "$dir"; t1=$(now)
                   times[$tool]+="$(echo "$t1 - $t0" | bc) " ;;
            esac
            cpus[$tool]+="$(awk '{print $1 + $2}' "$dir/cpu" 2>/dev/null | tail -1) "
        done
    done
    base=$(echo ${times[untraced]} | tr ' ' '\n' | median)
    cpu_base=$(echo ${cpus[untraced]} | tr ' ' '\n' | median)
    for tool in "${tools[@]}"; do
        dir="$work/$program-$tool"
        med=$(echo ${times[$tool]} | tr ' ' '\n' | median)
        ratio="$(echo "scale=3; $med / $base" | bc)x"
        cpu_med=$(echo ${cpus[$tool]} | tr ' ' '\n' | median)
        cpu_ratio="$(echo "scale=3; $cpu_med / $cpu_base" | bc)x"
        case $tool in
            untraced) share=-; lost=- ;;
            perf-dwarf | perf-fp)
                perf script -i "$dir/perf.data" -F comm,pid,tid,ip,sym,symoff,dso >"$dir/script.txt" 2>/dev/null
                share=$(python3 "$work/complete.py" "${program%-nofp}" <"$dir/script.txt")
                lost=$(perf report -i "$dir/perf.data" --stats 2>/dev/null | awk '/LOST events:/ {print $3; exit}') ;;
            *)
                (cd "$dir" && "$fltrace" script 2>/dev/null) >"$dir/script.txt"
                share=$(python3 "$work/complete.py" "${program%-nofp}" <"$dir/script.txt")
                lost=$(grep -o '[0-9]* lost' "$dir/err" | head -1) ;;
        esac
        printf "%-8s %-11s %9s %9s %22s %s\n" "$program" "$tool" "$ratio" "$cpu_ratio" "$share" "${lost:-0}"
    done
    perf_scripts=()
    for tool in perf-fp perf-dwarf; do
        [[ -s $work/$program-$tool/script.txt ]] && perf_scripts+=("$work/$program-$tool/script.txt")
    done
    if [[ -s $work/$program-defaults/script.txt && ${#perf_scripts[@]} -gt 0 ]]; then
        echo "($program steps: $(python3 "$work/edges.py" "$work/$program-defaults/script.txt" "${perf_scripts[@]}"))"
    fi
    case $program in node) pattern=JS: ;; java*) pattern=Chain. ;; *) pattern= ;; esac
    if [[ -n $pattern ]]; then
        for tool in defaults perf-fp perf-dwarf; do
            [[ -s $work/$program-$tool/script.txt ]] &&
                echo "($program $tool: $(python3 "$work/jit.py" "$pattern" "$work/$program-$tool/script.txt") faults with a $pattern frame)"
        done
    fi
    # The perf maps the runtimes wrote (of these runs only: other processes' are not ours).
    sort -u "$work/pids" 2>/dev/null | while read -r pid; do rm -f "/tmp/perf-$pid.map"; done
    : >"$work/pids"
    echo "($program untraced median ${base}s wall, ${cpu_base}s CPU)"
done
echo "(bench/stacks.sh $rounds; load $(cut -d' ' -f1-3 /proc/loadavg))"
