#!/usr/bin/env bash
# Every example of the workspace builds (once: the target folder `cargo test
# --workspace` already filled), and each two-process example of the library
# crates runs once under a time limit. A run fails on a non-zero exit, on a
# time-out, and on anything it left in /dev/shm or as /tmp/nodeipc-*.
# Needs nothing beyond the Rust toolchain and coreutils' `timeout`; never
# skips.
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$(date +%s)
say() { printf -- '-- %s (%ss)\n' "$1" "$(( $(date +%s) - started ))"; }

# Each example finishes in under a second on a quiet machine; the limit is
# for a loaded CI runner. The example's own children die with it
# (PR_SET_PDEATHSIG), so killing it at the limit leaves no process behind.
limit=${NODEIPC_EXAMPLE_TIMEOUT:-60}
examples=(
    "nodeipc-sem region_and_semaphore"
    "nodeipc-fdpass pass_descriptors"
    "nodeipc-barrier rank_group"
    "nodeipc-channel coordinator_and_workers"
    "nodeipc-monitor kill_a_hung_rank"
)

say "cargo build --examples --workspace"
cargo build --examples --workspace --locked

target=$(cargo metadata --locked --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
ours() {
    { ls /dev/shm 2>/dev/null | grep nodeipc | sed 's|^|/dev/shm/|'
      ls /tmp 2>/dev/null | grep '^nodeipc-' | sed 's|^|/tmp/|'; } | sort || true
}

for entry in "${examples[@]}"; do
    read -r package example <<<"${entry}"
    binary="${target}/debug/examples/${example}"
    if [ ! -x "${binary}" ]; then
        echo "no binary for ${package}'s example ${example} at ${binary}"
        exit 1
    fi
    say "${package}: ${example}"
    before=$(ours)
    status=0
    timeout --kill-after=5 "${limit}" "${binary}" || status=$?
    if [ "${status}" -ne 0 ]; then
        if [ "${status}" -eq 124 ] || [ "${status}" -eq 137 ]; then
            echo "${example}: still running after ${limit} s"
        fi
        echo "${example} failed (exit status ${status})"
        exit 1
    fi
    leaked=$(comm -13 <(printf '%s\n' "${before}") <(ours) | sed '/^$/d')
    if [ -n "${leaked}" ]; then
        echo "${example} left behind:"
        printf '  %s\n' ${leaked}
        exit 1
    fi
done
say "done: ${#examples[@]} examples ran, nothing left behind"
