#!/usr/bin/env bash
# Builds the nodeipc wheel with the native `nodeipc` program in it, which
# the wheel's console script `nodeipc` execs.
#
#   python/build-wheel.sh PROGRAM [maturin build options]
#
# PROGRAM is a built `nodeipc` (cargo build -p nodeipc-cli). It is copied to
# python/python/nodeipc/_bin/nodeipc for the build and removed afterwards
# whatever happens, so no later build packs a stale one. The options go to
# `maturin build -m python/Cargo.toml` ($MATURIN, else maturin on PATH). The
# release wheel for clusters (glibc 2.17) is .ci/steps/wheel.sh's.
set -euo pipefail
if [ $# -lt 1 ] || [ ! -f "$1" ] || [ ! -x "$1" ]; then
    echo "usage: python/build-wheel.sh PROGRAM [maturin build options] (PROGRAM: a built, executable nodeipc; got '${1:-}')" >&2
    exit 2
fi
program="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
shift
here="$(cd "$(dirname "$0")" && pwd)"
staged="${here}/python/nodeipc/_bin"
if [ -e "${staged}" ]; then
    echo "build-wheel.sh: ${staged} exists: another build is running, or one was killed (remove it)" >&2
    exit 1
fi
trap 'rm -rf "${staged}"' EXIT
mkdir "${staged}"
cp "${program}" "${staged}/nodeipc"
chmod 0755 "${staged}/nodeipc"
"${MATURIN:-maturin}" build -m "${here}/Cargo.toml" "$@"
