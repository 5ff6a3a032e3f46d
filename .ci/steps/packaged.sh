#!/usr/bin/env bash
# The library crates as crates.io would get them: every publishable crate
# packages (`cargo publish --dry-run --workspace`: metadata, files, the
# dependency versions), every one builds from its unpacked `.crate` file,
# and the tests of nodeipc-shm and nodeipc-channel build and pass from
# theirs (their dev-dependency nodeipc-testkit included), our crates patched
# in from their own packages. Shares the target folder, so dependencies are
# built once. (The builds are ours rather than the dry run's verification:
# cargo never rebuilds a registry crate whose version it has built before,
# so a second run of the verification would test the first run's sources.)
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
# Packages of an earlier run would stand in for today's sources.
rm -rf target/package
run cargo publish --dry-run --workspace --allow-dirty --locked --no-verify
grep -E '^ *Packaged' "${log}" || true

say "the umbrella crate: each feature pulls its layer and those under it, nothing else"
declare -A layers=(
    [text]="text" [fs]="fs" [shm]="fs shm text" [sem]="fs sem shm text"
    [fdpass]="fdpass fs shm text"
    [barrier]="barrier fdpass fs shm text" [proto]="proto"
    [handshake]="fdpass fs handshake proto shm text"
    [channel]="channel fdpass fs handshake proto sem shm text" [monitor]="fdpass fs monitor proto shm text"
    [monitor-host]="fdpass fs monitor monitor-host proto shm text"
    [queue]="fdpass fs queue shm text" [pool]="fdpass fs pool shm text"
    [launch]="fdpass fs launch monitor monitor-host proto shm text"
)
for feature in "${!layers[@]}"; do
    tree=$(cargo tree --locked -p nodeipc --no-default-features -F "${feature}" -e normal --prefix none)
    got=$(grep -oE '^nodeipc-[a-z]+(-host)?' <<<"${tree}" | sed 's/^nodeipc-//' | sort -u | tr '\n' ' ' | sed 's/ $//')
    want=$(tr ' ' '\n' <<<"${layers[${feature}]}" | sort | tr '\n' ' ' | sed 's/ $//')
    if [ "${got}" != "${want}" ]; then
        echo "nodeipc -F ${feature} pulls [${got}], expected [${want}]"
        exit 1
    fi
    echo "  -F ${feature}: $(sort -u <<<"${tree}" | wc -l) crates (ours: ${got})"
done

say "the monitor without serde: no serde, serde_json or serde_yaml_ng"
tree=$(cargo tree --locked -p nodeipc --no-default-features -F monitor -e normal --prefix none)
if serde=$(grep -E '^serde(_json|_yaml_ng)? ' <<<"${tree}"); then
    echo "nodeipc -F monitor pulls:"
    echo "${serde}"
    exit 1
fi
echo "  -F monitor: no serde"

say "every crate built from its package; the packaged tests of nodeipc-shm and nodeipc-channel"
# Where this cargo leaves the packages of a multi-crate dry run.
packages=target/package/tmp-registry
[ -d "${packages}" ] || packages=target/package
ours=($(cd "${packages}" && ls *.crate | sed -E 's/-[0-9]+\.[0-9]+\.[0-9]+\.crate$//' | sort -u))
version=$(cargo metadata --no-deps --format-version 1 | python3 -c \
    'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "nodeipc-shm"))')
work=target/packaged-tests
rm -rf "${work}"
mkdir -p "${work}"
{
    echo '[workspace]'
    echo 'resolver = "3"'
    printf 'members = [%s]\n' "$(printf '"%s-'"${version}"'", ' "${ours[@]}" | sed 's/, $//')"
    echo '[patch.crates-io]'
    for crate in "${ours[@]}"; do
        # --touch: today's mtimes, so cargo never takes an earlier run's
        # build of these paths for up to date.
        tar --touch -xzf "${packages}/${crate}-${version}.crate" -C "${work}"
        echo "${crate} = { path = \"${crate}-${version}\" }"
    done
} >"${work}/Cargo.toml"
cd "${work}"
run env CARGO_TARGET_DIR="${root}/target" cargo build --workspace
echo "built from their packages: ${ours[*]}"
run env CARGO_TARGET_DIR="${root}/target" cargo test -p nodeipc-shm -p nodeipc-channel
grep -E '^test result' "${log}" | awk '{p+=$4; f+=$6} END {print "packaged tests: " p " passed, " f " failed"}'
cd "${root}"
rm -rf "${work}"
say "done"
