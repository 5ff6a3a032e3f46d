#!/usr/bin/env bash
# CI step for the C ABI (capi/): the compilers, pkg-config and cmake its
# tests need, the library built once in the shared target folder, the
# checked-in header held to a fresh cbindgen generation, and the C/C++
# tests. Runs before the workspace's `cargo test`; the tests here use its
# package selection (--workspace), so their builds are shared with it.
# Under CI=true a missing compiler fails the tests; it is never a skip.
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$(date +%s)
step() { printf '\n== capi: %s (%ss)\n' "$1" "$(( $(date +%s) - started ))"; }

step "compilers, pkg-config, cmake, and protobuf (the C++ execute worker, the README's channel example)"
missing=()
command -v cc >/dev/null 2>&1 || missing+=(gcc)
command -v g++ >/dev/null 2>&1 || missing+=(g++)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkgconf)
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
[ -e /usr/include/google/protobuf/message.h ] || missing+=(libprotobuf-dev)
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing ${missing[*]}"
    sudo_=""
    [ "$(id -u)" = 0 ] || sudo_="sudo"
    ${sudo_} apt-get update -qq
    DEBIAN_FRONTEND=noninteractive ${sudo_} apt-get install -y -qq "${missing[@]}"
fi
cc --version | sed -n 1p
g++ --version | sed -n 1p
pkg-config --version
cmake --version | sed -n 1p
protoc --version

# `cargo test` never builds a static library (no test can depend on one):
# the C/C++ tests link the one this builds (and build it themselves when it
# is missing or older than its sources).
step "libnodeipc.a and libnodeipc.so (target/debug)"
cargo build --locked -p nodeipc-capi
ls -l target/debug/libnodeipc.a target/debug/libnodeipc.so

# The launcher the C and C++ ranks run under (tests/launched.rs), and the
# integration tests' Rust rank: the very build .ci/steps/python.sh makes
# (same packages, same features), so that step finds both built.
step "nodeipc and rank (target/debug), for ranks under nodeipc launch"
cargo build --locked -p nodeipc-cli --bin nodeipc -p nodeipc-integration-tests --bin rank

step "capi/include/nodeipc.h is what cbindgen makes of the sources"
# capi's tests are the modules of its one binary, tests/it: built with the
# workspace's selection, then run as cargo would (from capi/), the header
# module first. (`--workspace --test it` would run every crate's `it`.)
capi_it=$(cargo test --workspace --locked --no-run --message-format=json-render-diagnostics |
    python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "it" \
            and m.get("executable") and m["manifest_path"].endswith("/capi/Cargo.toml"):
        print(m["executable"])')
test -x "$capi_it"
(cd capi && "$capi_it" header::)

step "C and C++ programs against the header and the static library"
(cd capi && "$capi_it" --skip header::)

step "done"
