#!/usr/bin/env bash
# The whole test suite: formatting, lints, and every test of every crate. Needs root (perf
# events on tracepoints), as on the development and CI machines.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --no-release
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# The end-to-end tests preload the far-memory runtime from beside the debug fltrace binary;
# `cargo test` alone does not build cdylib targets.
cargo build --workspace --locked
cargo test --workspace --locked
