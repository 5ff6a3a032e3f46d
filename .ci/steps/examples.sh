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
    # The scheduler session, with 20 000 transactions (its argument).
    "nodeipc-integration-tests scheduler_session 20000"
)

say "cargo build --examples --workspace"
cargo build --examples --workspace --locked

target=$(cargo metadata --locked --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
# Our objects, less the tests' (`nodeipc-test-*`, which no example makes:
# a test still running elsewhere on a shared machine is not an example's
# leak; .ci/run's last steps check the whole run for those).
ours() {
    { ls /dev/shm 2>/dev/null | grep nodeipc | sed 's|^|/dev/shm/|'
      ls /tmp 2>/dev/null | grep '^nodeipc-' | sed 's|^|/tmp/|'; } |
        grep -v 'nodeipc-test-' | sort || true
}

# Runs one example (a command line) under the limit; fails on a non-zero
# exit or on anything new in /dev/shm or /tmp/nodeipc-*. Its output is kept
# in ${output}.
output=$(mktemp)
trap 'rm -f "${output}"' EXIT
run_example() {
    local name=$1
    shift
    local before status=0 leaked
    before=$(ours)
    timeout --kill-after=5 "${limit}" "$@" 2>&1 | tee "${output}" || status=${PIPESTATUS[0]}
    if [ "${status}" -ne 0 ]; then
        if [ "${status}" -eq 124 ] || [ "${status}" -eq 137 ]; then
            echo "${name}: still running after ${limit} s"
        fi
        echo "${name} failed (exit status ${status})"
        exit 1
    fi
    leaked=$(comm -13 <(printf '%s\n' "${before}") <(ours) | sed '/^$/d')
    if [ -n "${leaked}" ]; then
        echo "${name} left behind:"
        printf '  %s\n' ${leaked}
        exit 1
    fi
}

for entry in "${examples[@]}"; do
    read -r package example args <<<"${entry}"
    binary="${target}/debug/examples/${example}"
    if [ ! -x "${binary}" ]; then
        echo "no binary for ${package}'s example ${example} at ${binary}"
        exit 1
    fi
    say "${package}: ${example}"
    # shellcheck disable=SC2086 # an example's arguments, split on purpose
    run_example "${example}" "${binary}" ${args:-}
done

# The descriptor example's fallback: a non-dumpable child refuses
# pidfd_getfd to a parent without CAP_SYS_PTRACE. As root, the run drops to
# nobody (from a copy of the binary nobody can reach), so it is refused.
say "nodeipc-fdpass: pass_descriptors --child-not-dumpable (the SCM_RIGHTS fallback)"
if [ "$(id -u)" -eq 0 ]; then
    copy=$(mktemp -d)
    chmod 0755 "${copy}"
    install -m 0755 "${target}/debug/examples/pass_descriptors" "${copy}/"
    run_example "pass_descriptors --child-not-dumpable" \
        setpriv --reuid=65534 --regid=65534 --clear-groups \
        "${copy}/pass_descriptors" --child-not-dumpable
    rm -rf "${copy}"
else
    run_example "pass_descriptors --child-not-dumpable" \
        "${target}/debug/examples/pass_descriptors" --child-not-dumpable
fi
if ! grep -q 'falling back to SCM_RIGHTS' "${output}"; then
    echo "pass_descriptors --child-not-dumpable did not take the SCM_RIGHTS fallback"
    exit 1
fi
say "done: ${#examples[@]} examples and the fallback ran, nothing left behind"
