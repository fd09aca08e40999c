#!/usr/bin/env bash
# Installs what fltrace needs on a fresh Debian machine of this kind and builds it (release).
# Idempotent: packages already present are not fetched again.
set -euo pipefail
cd "$(dirname "$0")/.."

# gcc and g++ build the bundled workloads; libc6-dbg lets reports name glibc's own frames
# (start_thread, __libc_start_call_main) instead of [unknown]; clang compiles the BPF object of
# crates/fltrace-bpf (count, faults, ffaults, memleak, triage).
packages=(gcc g++ libc6-dev libc6-dbg clang)
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
cargo build --release --locked -p fltrace -p fltrace-preload
