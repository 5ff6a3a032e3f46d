#!/usr/bin/env bash
# The wheel for clusters: x86_64 manylinux2014 (glibc 2.17), CPython >= 3.11
# abi3, release profile, with the native `nodeipc` program inside. Builds it
# once, checks every ELF file in it needs no glibc symbol newer than 2.17 and
# links no NVML (loaded at run time), has auditwheel confirm the tag, then
# installs it in a fresh virtual environment whose PATH has no Rust toolchain
# and runs the console script from there: --version, launch --help, a
# two-rank launch, and tests/test_launcher.py. Under CI=true a missing tool
# fails the step; elsewhere it is skipped with the reason.
#
# Tools, all from PyPI into a venv of their own: maturin, ziglang (zig, the
# linker maturin --zig uses to target glibc 2.17) and auditwheel. maturin
# builds the program too: a pyo3 wheel holds only the extension module, so
# the program is built first as a `bin` wheel of the CLI crate (audited by
# maturin for manylinux2014 like any other) and taken out of it. Both builds
# go through the same zig wrappers, so they share their compiled
# dependencies (with cargo-zigbuild for the program, the two linkers'
# settings differ and each build recompiles what the other left).
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$(date +%s)
step() { printf '\n-- wheel: %s (%ss)\n' "$1" "$(( $(date +%s) - started ))"; }

target="${CARGO_TARGET_DIR:-$PWD/target}"
export CARGO_TARGET_DIR="${target}"
triple=x86_64-unknown-linux-gnu
glibc=2.17
tools="${target}/wheel-tools"
wheels="${target}/wheels-manylinux2014"
venv="${target}/wheel-venv"

if [ "$(uname -m)" != x86_64 ]; then
    # Only x86_64 wheels are built (python/README.md says so).
    if [ "${CI:-}" = true ]; then echo "CI=true and this machine is $(uname -m), not x86_64" >&2; exit 1; fi
    echo "skipped: the wheel is built for x86_64 only (this is $(uname -m))"
    exit 0
fi

step "tools: maturin, ziglang, auditwheel (PyPI)"
rm -rf "${tools}"
if ! { python3 -m venv "${tools}" &&
       "${tools}/bin/python" -m pip install --quiet --disable-pip-version-check \
           'maturin>=1.5,<2' ziglang auditwheel; }; then
    if [ "${CI:-}" = true ]; then echo "CI=true and the wheel's build tools did not install" >&2; exit 1; fi
    echo "skipped: the wheel's build tools did not install (PyPI unreachable?)"
    exit 0
fi
for tool in maturin auditwheel; do
    [ -x "${tools}/bin/${tool}" ] || { echo "${tool} missing from ${tools}/bin" >&2; exit 1; }
done
"${tools}/bin/python" -m ziglang version
export PATH="${tools}/bin:${PATH}"

zig_build=(--release --locked --zig --compatibility manylinux2014 --target "${triple}")
rm -rf "${wheels}"

step "the program for glibc ${glibc} (maturin build -b bin, cli/Cargo.toml)"
maturin build "${zig_build[@]}" -b bin -m cli/Cargo.toml -o "${wheels}/program"
python3 -m zipfile -e "${wheels}"/program/nodeipc_cli-*.whl "${wheels}/program"
program=$(ls "${wheels}"/program/nodeipc_cli-*.data/scripts/nodeipc)
chmod 0755 "${program}" # zipfile does not restore modes

step "the wheel (maturin build --release --zig --compatibility manylinux2014)"
MATURIN="${tools}/bin/maturin" bash python/build-wheel.sh "${program}" "${zig_build[@]}" -o "${wheels}"
wheel=$(ls "${wheels}"/nodeipc-*.whl)
case "${wheel}" in
    *-cp311-abi3-*manylinux_2_17_x86_64*) ;;
    *) echo "unexpected wheel name: ${wheel}" >&2; exit 1 ;;
esac

step "glibc symbol versions and libraries of every ELF file in the wheel"
unpacked="${wheels}/unpacked"
python3 -m zipfile -e "${wheel}" "${unpacked}"
elves=("${unpacked}/nodeipc/_bin/nodeipc" "${unpacked}"/nodeipc/_native*.so)
for elf in "${elves[@]}"; do
    [ -f "${elf}" ] || { echo "not in the wheel: ${elf#"${unpacked}"/}" >&2; exit 1; }
    newest=$(objdump -T "${elf}" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1)
    if [ "$(printf '%s\n%s\n' "${newest}" "${glibc}" | sort -V | tail -n 1)" != "${glibc}" ]; then
        echo "${elf#"${unpacked}"/} needs GLIBC_${newest} (> ${glibc}):" >&2
        objdump -T "${elf}" | grep -E "GLIBC_${newest//./\\.}[^0-9.]" >&2 || true
        exit 1
    fi
    needed=$(objdump -p "${elf}" | awk '$1 == "NEEDED" { print $2 }' | tr '\n' ' ')
    case "${needed}" in *nvidia*) echo "${elf} links NVML: ${needed}" >&2; exit 1 ;; esac
    echo "${elf#"${unpacked}"/}: $(du -h "${elf}" | cut -f1), newest GLIBC_${newest}, needs ${needed}"
done
rm -rf "${unpacked}"
ls -l "${wheel}"

step "auditwheel show"
shown=$(auditwheel show "${wheel}")
echo "${shown}"
grep -q '"manylinux_2_17_x86_64"' <<<"${shown}" || { echo "auditwheel: not manylinux_2_17_x86_64" >&2; exit 1; }

step "a fresh virtual environment, no Rust toolchain on PATH"
rm -rf "${venv}"
python3 -m venv "${venv}"
# PATH without any folder holding cargo, rustc or rustup (~/.cargo/bin).
bare_path="${venv}/bin"
IFS=: read -r -a folders <<<"${PATH}"
for folder in "${folders[@]}"; do
    case "${folder}" in "${tools}/bin" | "") continue ;; esac
    [ -e "${folder}/cargo" ] || [ -e "${folder}/rustc" ] || [ -e "${folder}/rustup" ] && continue
    bare_path="${bare_path}:${folder}"
done
in_venv() { env -u CARGO_HOME -u RUSTUP_HOME -u RUSTUP_TOOLCHAIN -u CARGO PATH="${bare_path}" "$@"; }
if in_venv bash -c 'command -v cargo || command -v rustc'; then
    echo "cargo or rustc still found on the venv's PATH" >&2
    exit 1
fi
in_venv python -m pip install --quiet --disable-pip-version-check "${wheel}" pytest
[ "$(in_venv bash -c 'command -v nodeipc')" = "${venv}/bin/nodeipc" ]

step "the console script from the venv"
in_venv nodeipc --version
[ "$(in_venv nodeipc --version)" = "$("${program}" --version)" ]
in_venv nodeipc launch --help >/dev/null
# One write(2) a rank: the two lines cannot interleave.
out=$(cd "${target}" && in_venv nodeipc launch --nproc 2 -- \
    python -c 'import os, sys; e = os.environ; os.write(1, ("rank %s of %s %s\n" % (e["RANK"], e["WORLD_SIZE"], sys.prefix)).encode())')
echo "${out}"
for rank in 0 1; do
    grep -qx "rank ${rank} of 2 ${venv}" <<<"${out}" || { echo "rank ${rank} did not report" >&2; exit 1; }
done
# From outside the source tree, so the installed package is what is tested.
(cd "${target}" && in_venv python -m pytest -p no:cacheprovider -q "${OLDPWD}/python/tests/test_launcher.py")

step "done"
