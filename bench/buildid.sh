#!/usr/bin/env bash
# The record-time build-ID cache's cost (issue #23): g++ -O0 -S on a generated template-heavy
# file (cc1plus, as bench/stacks.sh) and python3 on a short JSON/regex/decimal script, each
# recorded by fltrace with --no-cache, with an empty cache on the same file system (files
# hard-linked), with an empty cache on a tmpfs (files copied), with the cache warm; and by
# `perf record -e page-faults -g` with build-ID collection into an empty ~/.debug
# ($HOME/.debug, HOME set to an empty directory) against `-B -N` (none). Time: median wall seconds of ROUNDS runs; bytes:
# what the cache holds afterwards (`du -sb`, which counts a hard link's bytes) and what was
# copied.
# usage: bench/buildid.sh [ROUNDS=3]   (FLTRACE=path/to/fltrace to use another build;
# CONFIGS="untraced perf-buildid" for some of the configurations)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rounds=${1:-3}
work=$(mktemp -d /tmp/fltrace-buildid.XXXXXX)
shm=$(mktemp -d /dev/shm/fltrace-buildid.XXXXXX)
trap 'rm -rf "$work" "$shm"' EXIT
fltrace=${FLTRACE:-$root/target/release/fltrace}
[[ -n ${FLTRACE:-} ]] || (cd "$root" && cargo build --release --locked -q -p fltrace -p fltrace-preload)

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
  return std::get<0>(t) + std::get<2>(t) + (long)std::get<1>(t).size();
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

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# Runs "$@" once, prints its wall seconds.
wall() {
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null 2>"$work/last.err"
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc
}

for program in cc1plus python3; do
    case $program in
    cc1plus) cmd=(g++ -O0 -S -o "$work/big.s" "$work/big.cpp") ;;
    python3) cmd=(/usr/bin/python3 "$work/script.py") ;;
    esac
    for config in ${CONFIGS:-untraced no-cache cold-link cold-copy warm perf-none perf-buildid}; do
        times=()
        bytes=""
        for r in $(seq "$rounds"); do
            rm -rf "$work/rec" "$work/perf.data"
            mkdir -p "$work/rec"
            case $config in
            untraced) t=$(wall "${cmd[@]}") ;;
            no-cache) t=$(wall "$fltrace" record -o "$work/rec" --no-cache -- "${cmd[@]}") ;;
            cold-link)
                rm -rf "$work/cache"
                t=$(FLTRACE_CACHE=$work/cache wall "$fltrace" record -o "$work/rec" -- "${cmd[@]}")
                bytes="$(du -sb "$work/cache" | cut -f1) in cache; $(grep -o 'build-ID cache.*' "$work/last.err")"
                ;;
            cold-copy)
                rm -rf "$shm/cache"
                t=$(FLTRACE_CACHE=$shm/cache wall "$fltrace" record -o "$work/rec" -- "${cmd[@]}")
                bytes="$(du -sb "$shm/cache" | cut -f1) in cache; $(grep -o 'build-ID cache.*' "$work/last.err")"
                ;;
            warm)
                [[ -d $work/warm ]] || FLTRACE_CACHE=$work/warm "$fltrace" record -q -o "$work/rec" -- "${cmd[@]}" >/dev/null 2>&1
                t=$(FLTRACE_CACHE=$work/warm wall "$fltrace" record -o "$work/rec" -- "${cmd[@]}")
                bytes="$(grep -o 'build-ID cache.*' "$work/last.err")"
                ;;
            perf-none) t=$(wall perf record -B -N -e page-faults -g -o "$work/perf.data" -- "${cmd[@]}") ;;
            perf-buildid)
                # perf keeps its cache in $HOME/.debug whatever PERF_BUILDID_DIR says.
                rm -rf "$work/home" && mkdir "$work/home"
                t=$(HOME=$work/home wall perf record -e page-faults -g -o "$work/perf.data" -- "${cmd[@]}")
                bytes="$(du -sb "$work/home/.debug" | cut -f1) in ~/.debug, $(find "$work/home/.debug" -name elf | wc -l) files, $(HOME=$work/home perf buildid-list -i "$work/perf.data" 2>/dev/null | wc -l) build IDs listed"
                ;;
            esac
            times+=("$t")
        done
        printf '%-8s %-13s %6.2f s  %s\n' "$program" "$config" \
            "$(printf '%s\n' "${times[@]}" | median)" "$bytes"
    done
done
