#!/usr/bin/env bash
# The queue and pool layers' extra CI: their loom models (the ring's
# park/wake race and wrap-around, on loom's atomics and a mock futex; the
# MPMC ring's claims of the dead skipped or released, racing live ones; the
# pool's remote free racing the owner's clean-up and an adoption, two frees
# of one block, a freer killed between its bit and its mark). Their unit, multi-process, hostile and proptest tests
# run with `cargo test --workspace`.
# Needs nothing beyond the Rust toolchain (loom comes from crates.io).
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$(date +%s)
# --cfg loom changes every crate's build: a folder of its own inside target/
# keeps it from invalidating the workspace build (and the reverse).
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom"
export RUSTFLAGS="--cfg loom"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
cargo test --locked --release -p nodeipc-queue -p nodeipc-pool --lib -- loom_model
echo "queue, pool: loom models passed in $(( $(date +%s) - started ))s (LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS})"
