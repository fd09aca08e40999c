#!/usr/bin/env bash
# Servers under every mode of record (issue #30): redis-benchmark's and pgbench's throughput
# untraced, under `fltrace record`, `record --allocs`, `record -L` with ample local memory and
# with half the peak, and under `perf record --call-graph dwarf`, side by side.
#  - redis-server (Debian's, jemalloc): REQUESTS requests of SET, GET, LPUSH and LRANGE_100
#    (after the LPUSH that fills its list) from 50 clients, 1000-byte values on 100,000 keys;
#    requests per second of each, the faults recorded and the local peak (memory_used: VmHWM
#    without -L, the managed region's peak with it).
#  - PostgreSQL 15 (a postmaster forking a backend per connection), run as the postgres user
#    from a fresh data directory: pgbench -c 4 for SECONDS at scale 2; transactions per second.
#    Under -L the postmaster and each backend it forks are emulated, each a budget of its own.
#    -L as another user needs vm.unprivileged_userfaultfd=1, set here and put back on exit.
# "half" is half the local peak (memory_used) of the ample run, in MB, at least 1.
# usage: bench/servers.sh [REQUESTS=50000] [SECONDS=10]
# FLTRACE=path picks the binary (default: target/release/fltrace, built by setup.sh; the dev
# profile is optimised too, so target/debug/fltrace measures the same code).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
requests=${1:-50000}; seconds=${2:-10}
fltrace=${FLTRACE:-$root/target/release/fltrace}
[[ -x $fltrace ]] || "$root/scripts/setup.sh" >/dev/null
# Absolute: each run works in a directory of its own.
fltrace=$(realpath "$fltrace")
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
work=$(mktemp -d /tmp/fltrace-servers.XXXXXX)
chmod 777 "$work"
uffd_old=$(cat /proc/sys/vm/unprivileged_userfaultfd)
trap 'echo "$uffd_old" >/proc/sys/vm/unprivileged_userfaultfd; rm -rf "$work"' EXIT
pg=/usr/lib/postgresql/15/bin
stat_of() { grep -o "[ ,]$2:[0-9]*" "$1" | tail -1 | cut -d: -f2; }
mb() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }
half_of() { awk -v m="$1" 'BEGIN {h = int(m / 2); print (h < 1 ? 1 : h)}'; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# $1 mode name; prints "mode set get lpush lrange faults local-peak-MB".
redis_run() {
    local mode=$1 dir="$work/redis-$1" port; port=$(free_port)
    mkdir -p "$dir"; cd "$dir"
    local cmd=(redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir")
    case $mode in
        untraced) "${cmd[@]}" >server.log 2>&1 & ;;
        record) "$fltrace" record -q -o "$dir" -- "${cmd[@]}" >server.log 2>&1 & ;;
        allocs) "$fltrace" record -q --allocs -o "$dir" -- "${cmd[@]}" >server.log 2>&1 & ;;
        ample) "$fltrace" record -q -L=1024 -M=2048 -o "$dir" -- "${cmd[@]}" >server.log 2>&1 & ;;
        half) "$fltrace" record -q -L="$redis_half" -M=2048 -o "$dir" -- "${cmd[@]}" >server.log 2>&1 & ;;
        perf) perf record -q --call-graph dwarf -o "$dir/perf.data" -- "${cmd[@]}" >server.log 2>&1 & ;;
    esac
    local pid=$!
    until redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; do
        kill -0 "$pid" 2>/dev/null || { echo "$mode: the server did not start: $(tail -1 server.log)" >&2; return 1; }
        sleep 0.1
    done
    redis-benchmark -p "$port" -n "$requests" -t set,get,lpush,lrange_100 -d 1000 -r 100000 \
        --csv >bench.csv 2>/dev/null
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
    wait "$pid" || true
    local rps; rps=$(awk -F'","' 'NR>1 {printf "%.0f ", $2}' bench.csv)
    local stats faults=- peak=-
    stats=$(ls "$dir"/fltrace-data-stats-*.out 2>/dev/null | head -1 || true)
    if [[ -n $stats ]]; then
        faults=$(stat_of "$stats" faults)
        peak=$(mb "$(stat_of "$stats" memory_used)")
    fi
    echo "$mode $rps $faults $peak"
}

# $1 mode name; prints "mode tps failed".
pg_run() {
    local mode=$1 dir="$work/pg-$1" port; port=$(free_port)
    mkdir -p "$dir"; chmod 777 "$dir"; cd "$dir"
    runuser -u postgres -- "$pg/initdb" -D "$dir/data" -A trust >initdb.log 2>&1
    local cmd=("$pg/postgres" -D "$dir/data" -p "$port" -k "$dir" -c listen_addresses=)
    case $mode in
        untraced) runuser -u postgres -- "${cmd[@]}" >server.log 2>&1 & ;;
        record) "$fltrace" record -q --user postgres -o "$dir" -- "${cmd[@]}" >server.log 2>&1 & ;;
        allocs) "$fltrace" record -q --allocs --user postgres -o "$dir" -- "${cmd[@]}" >server.log 2>&1 & ;;
        ample) "$fltrace" record -q -L=1024 -M=2048 --user postgres -o "$dir" -- "${cmd[@]}" >server.log 2>&1 & ;;
        half) "$fltrace" record -q -L="$pg_half" -M=2048 --user postgres -o "$dir" -- "${cmd[@]}" >server.log 2>&1 & ;;
        perf) perf record -q --call-graph dwarf -o "$dir/perf.data" -- runuser -u postgres -- "${cmd[@]}" >server.log 2>&1 & ;;
    esac
    local pid=$!
    until runuser -u postgres -- "$pg/pg_isready" -h "$dir" -p "$port" >/dev/null 2>&1; do
        kill -0 "$pid" 2>/dev/null || { echo "$mode: the server did not start: $(tail -1 server.log)" >&2; return 1; }
        sleep 0.1
    done
    runuser -u postgres -- "$pg/pgbench" -h "$dir" -p "$port" -i -s 2 postgres >init.log 2>&1
    runuser -u postgres -- "$pg/pgbench" -h "$dir" -p "$port" -c 4 -T "$seconds" postgres >bench.log 2>&1
    runuser -u postgres -- "$pg/pg_ctl" -D "$dir/data" stop -m fast >/dev/null 2>&1
    wait "$pid" || true
    local tps failed
    tps=$(grep -o 'tps = [0-9.]*' bench.log | cut -d' ' -f3); failed=$(grep -o 'failed transactions: [0-9]*' bench.log | cut -d' ' -f3)
    local stats peak=-
    stats=$(ls "$dir"/fltrace-data-stats-*.out 2>/dev/null | sort -t- -k4 -n | head -1 || true)
    [[ -z $stats ]] || peak=$(mb "$(stat_of "$stats" memory_used)")
    echo "$mode ${tps%.*} ${failed:-?} $peak"
}

echo "redis-benchmark -n $requests (requests/s): mode SET GET LPUSH LPUSH(fill) LRANGE_100 faults local-peak-MB"
redis_half=1
for mode in untraced record allocs ample; do redis_run $mode; done | tee "$work/redis.txt"
redis_half=$(half_of "$(awk '$1=="ample" {print $NF}' "$work/redis.txt")")
echo "(half: -L=$redis_half)"
for mode in half perf; do redis_run $mode; done

echo 1 >/proc/sys/vm/unprivileged_userfaultfd
echo "pgbench -c 4 -T $seconds -s 2 (transactions/s): mode tps failed postmaster-local-peak-MB"
pg_half=1
for mode in untraced record allocs ample; do pg_run $mode; done | tee "$work/pg.txt"
pg_half=$(half_of "$(awk '$1=="ample" {print $NF}' "$work/pg.txt")")
echo "(half: -L=$pg_half)"
for mode in half perf; do pg_run $mode; done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
