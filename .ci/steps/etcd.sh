#!/usr/bin/env bash
# The multi-node launch (issue 22): installs etcd (Debian's etcd-server)
# when it is missing, then runs the etcd tests, each starting a real etcd
# on loopback with free ports and a temporary data directory. They are
# built with the workspace's features (the CLI turns `etcd` on), so the
# build is the one `cargo test --workspace` makes. Under CI=true a missing
# etcd fails the tests instead of skipping them.
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$(date +%s)
if ! command -v etcd >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq etcd-server >/dev/null
    # The package may start a service of its own: the tests use their own.
    if command -v systemctl >/dev/null 2>&1; then systemctl stop etcd 2>/dev/null || true; fi
fi
# The TLS tests make their certificates with openssl.
if ! command -v openssl >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq openssl >/dev/null
fi
etcd --version | sed -n 1p
echo "etcd: installed in $(( $(date +%s) - started ))s"
tests_started=$(date +%s)
cargo test --workspace --locked --test etcd_rounds --test etcd_faults --test etcd_elastic --test etcd_tls
echo "etcd: multi-node tests passed in $(( $(date +%s) - tests_started ))s (total $(( $(date +%s) - started ))s)"
