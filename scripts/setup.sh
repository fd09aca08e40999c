#!/usr/bin/env bash
# Installs what fltrace needs on a fresh Debian machine of this kind and builds it (release).
# Idempotent: packages already present are not fetched again. `--no-release` skips the release
# build: the test suite runs the debug binaries only.
set -euo pipefail
cd "$(dirname "$0")/.."

# gcc and g++ build the bundled workloads; libc6-dbg lets reports name glibc's own frames
# (start_thread, __libc_start_call_main) instead of [unknown]. The debug-info tests split
# binaries with binutils (objcopy, strip, readelf) and serve them with a local debuginfod;
# golang-go gives the tests `go tool pprof`, the real consumer of `report --format pprof`;
# clang compiles the BPF object of crates/fltrace-system (count, faults, ffaults, memleak, triage);
# chromium renders the page of `runs --run` headless in the tests; redis-server (Debian's links
# jemalloc) and redis-benchmark are the real server the allocation tracer is tested on;
# postgresql-15 (a postmaster forking its backends, with pgbench) the one far memory's forks are;
# nodejs (`--perf-basic-prof`, `--perf-prof`) the JIT whose perf maps and jitdumps name frames;
# util-linux's unshare runs programs in namespaces of their own; heaptrack counts the temporary
# allocations fltrace's report is compared with. sqlite3 (Debian's, with its stripped
# libsqlite3) runs the README's example of stripped code, which the test suite executes.
packages=(gcc g++ libc6-dev libc6-dbg binutils debuginfod golang-go clang chromium redis-server
    postgresql-15 nodejs util-linux heaptrack sqlite3)
missing=()
for p in "${packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}"
fi

# The binary and, beside it, the far-memory runtime it preloads for -L/-M.
if [[ "${1:-}" != --no-release ]]; then
    cargo build --release --locked -p fltrace -p fltrace-preload
fi

# DuckDB and Spark (PySpark, local mode) cross-check the Parquet tables in the tests
# (crates/fltrace/tests/suite/tables.rs, engines.rs), in a virtual environment of its own:
# target/venv. PySpark 4 runs on Java 17 or later.
if ! java -version >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq openjdk-17-jre-headless
fi
venv=target/venv
if ! "$venv/bin/python" -c 'import duckdb, pytz, pyspark' >/dev/null 2>&1; then
    rm -rf "$venv"
    # Debian's python3 makes virtual environments only with python3-venv.
    if ! python3 -m venv "$venv" >/dev/null 2>&1; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq python3-venv
        rm -rf "$venv"
        python3 -m venv "$venv"
    fi
    # pytz: DuckDB's Python client needs it to hand out the TIMESTAMPTZ columns.
    # `python -m pip`: the venv's own pip script names the python it was made with.
    "$venv/bin/python" -m pip install -q 'duckdb==2.0.0' 'pytz==2026.6' 'pyspark==4.3.0'
fi
