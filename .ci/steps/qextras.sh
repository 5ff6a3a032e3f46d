#!/usr/bin/env bash
# The queue's and the pool's extras. Their fuzz drivers run as proptest
# properties in `cargo test --workspace` (integration-tests/tests/it/queue_fuzz.rs
# and pool_fuzz.rs), their multi-process stress test too
# (pool/tests/it/stress.rs: 3 s, or 3 min under NODEIPC_CI_LONG=1), and their
# criterion benches compile with the others. What is left is the long run:
# under NODEIPC_CI_LONG=1 this installs what the long fuzzing step of
# .ci/run needs and a fresh machine lacks (a nightly toolchain, cargo-fuzz),
# so that step runs every target in fuzz/ (queue_region and pool_region
# among them) rather than skipping. A failed install fails the run.
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$(date +%s)
if [ "${NODEIPC_CI_LONG:-0}" != 1 ]; then
    echo "queue/pool extras: nothing to install (cargo-fuzz runs only under NODEIPC_CI_LONG=1)"
    exit 0
fi
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    rustup toolchain install nightly --profile minimal
fi
echo "nightly: $(rustup run nightly rustc --version) ($(( $(date +%s) - started ))s)"
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
echo "cargo-fuzz: $(cargo +nightly fuzz --version) ($(( $(date +%s) - started ))s)"
(cd fuzz && cargo +nightly fuzz list | grep -qx queue_region && cargo +nightly fuzz list | grep -qx pool_region)
echo "queue/pool extras: fuzzing tools ready in $(( $(date +%s) - started ))s"
