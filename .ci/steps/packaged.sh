#!/usr/bin/env bash
# The library crates as crates.io would get them: every publishable crate
# packages and builds alone (`cargo publish --dry-run --workspace`), and the
# tests of nodeipc-shm and nodeipc-channel build and pass from the unpacked
# `.crate` files (their dev-dependency nodeipc-testkit included), the other
# crates of ours patched in from their own packages. Shares the target
# folder, so dependencies are built once.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
started=$(date +%s)
say() { printf -- '-- %s (%ss)\n' "$1" "$(( $(date +%s) - started ))"; }
log=$(mktemp)
trap 'rm -f "${log}"' EXIT
# Runs a command with its output in the log; on failure shows the log's end.
run() {
    if ! "$@" >"${log}" 2>&1; then
        tail -n 60 "${log}"
        echo "failed: $*"
        exit 1
    fi
}

say "cargo publish --dry-run --workspace"
run cargo publish --dry-run --workspace --allow-dirty --locked
grep -E '^ *Packaged' "${log}" || true

say "the umbrella crate: each feature pulls its layer and those under it, nothing else"
declare -A layers=(
    [fs]="fs" [shm]="fs shm" [sem]="fs sem shm" [fdpass]="fdpass"
    [barrier]="barrier fdpass fs shm" [proto]="proto"
    [channel]="channel fdpass fs proto sem shm" [monitor]="fdpass fs monitor proto shm"
    [queue]="fdpass fs queue shm" [pool]="fdpass fs pool shm"
    [launch]="fdpass fs launch monitor proto shm"
)
for feature in "${!layers[@]}"; do
    tree=$(cargo tree --locked -p nodeipc --no-default-features -F "${feature}" -e normal --prefix none)
    got=$(grep -o '^nodeipc-[a-z]*' <<<"${tree}" | sed 's/^nodeipc-//' | sort -u | tr '\n' ' ' | sed 's/ $//')
    want=$(tr ' ' '\n' <<<"${layers[${feature}]}" | sort | tr '\n' ' ' | sed 's/ $//')
    if [ "${got}" != "${want}" ]; then
        echo "nodeipc -F ${feature} pulls [${got}], expected [${want}]"
        exit 1
    fi
    echo "  -F ${feature}: $(sort -u <<<"${tree}" | wc -l) crates (ours: ${got})"
done

say "the packaged tests of nodeipc-shm and nodeipc-channel"
ours=(nodeipc-fs nodeipc-testkit nodeipc-shm nodeipc-sem nodeipc-fdpass nodeipc-proto nodeipc-channel)
run cargo package --allow-dirty --no-verify --locked $(printf -- '-p %s ' "${ours[@]}")
version=$(cargo metadata --no-deps --format-version 1 | python3 -c \
    'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "nodeipc-shm"))')
work=target/packaged-tests
rm -rf "${work}"
mkdir -p "${work}"
{
    echo '[workspace]'
    echo 'resolver = "3"'
    echo "members = [\"nodeipc-shm-${version}\", \"nodeipc-channel-${version}\"]"
    echo '[patch.crates-io]'
    for crate in "${ours[@]}"; do
        tar -xzf "target/package/${crate}-${version}.crate" -C "${work}"
        echo "${crate} = { path = \"${crate}-${version}\" }"
    done
} >"${work}/Cargo.toml"
cd "${work}"
run env CARGO_TARGET_DIR="${root}/target" cargo test --workspace
grep -E '^test result' "${log}" | awk '{p+=$4; f+=$6} END {print "packaged tests: " p " passed, " f " failed"}'
cd "${root}"
rm -rf "${work}"
say "done"
