#!/usr/bin/env bash
# The Python package: build its wheel once (reusing the workspace's target
# folder, so the crates `cargo test --workspace` built are not built again),
# install it into a fresh virtual environment under the target folder, and
# run its pytest suite against the Rust programs the tests drive (`nodeipc`,
# the integration tests' `rank`) and a C++ rank built on libnodeipc.a.
# Under CI=true nothing is skipped: a missing module or program fails the
# run.
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$(date +%s)
step() { printf '\n-- python: %s (%ss)\n' "$1" "$(( $(date +%s) - started ))"; }

target="${CARGO_TARGET_DIR:-$PWD/target}"
export CARGO_TARGET_DIR="${target}"
venv="${target}/python-venv"

step "virtual environment with maturin, pytest, numpy, protobuf, mypy"
rm -rf "${venv}"
if ! python3 -m venv "${venv}"; then
    # Debian's python3 keeps venv (and its pip) in a package of its own.
    rm -rf "${venv}"
    apt-get update -qq && apt-get install -y -qq python3-venv
    python3 -m venv "${venv}"
fi
"${venv}/bin/python" -m pip install --quiet --disable-pip-version-check \
    'maturin>=1.5,<2' pytest numpy 'protobuf>=4.21' mypy
"${venv}/bin/python" -c "import maturin, pytest, numpy, google.protobuf, mypy"

step "the programs the tests drive, and libnodeipc.a for their C++ rank"
cargo build --locked -p nodeipc-cli --bin nodeipc -p nodeipc-integration-tests --bin rank
cargo build --locked -p nodeipc-channel --example broadcast_reader
cargo build --locked -p nodeipc-capi

step "wheel (maturin build, debug profile, shared target folder, the debug nodeipc in it)"
wheels="${target}/wheels"
rm -rf "${wheels}"
MATURIN="${venv}/bin/maturin" bash python/build-wheel.sh "${target}/debug/nodeipc" --locked -o "${wheels}"
"${venv}/bin/python" -m pip install --quiet --disable-pip-version-check "${wheels}"/nodeipc-*.whl

step "pytest"
export NODEIPC_BIN_DIR="${target}/debug"
# From outside the source tree, so the installed package is what is tested.
cd "${target}"
"${venv}/bin/python" -m pytest -p no:cacheprovider -q "${OLDPWD}/python/tests"

step "done"
