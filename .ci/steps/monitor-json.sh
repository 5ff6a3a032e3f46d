#!/usr/bin/env bash
# nodeipc-monitor without its `json` feature (the workspace's own test run
# builds it with the feature on, as the CLI asks): no serde in its tree,
# and its tests pass. Only the monitor crate is rebuilt; its dependencies
# come from the shared target folder.
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$(date +%s)
tree=$(cargo tree --locked -p nodeipc-monitor -e normal --prefix none)
if grep -E '^serde(_json|_yaml_ng)? ' <<<"${tree}"; then
    echo "nodeipc-monitor without the json feature pulls serde"
    exit 1
fi
log=$(mktemp)
trap 'rm -f "${log}"' EXIT
if ! cargo test --locked --no-fail-fast -p nodeipc-monitor >"${log}" 2>&1; then
    grep -E 'FAILED|panicked|^error' "${log}" | sed -n 1,40p || tail -n 40 "${log}"
    echo "nodeipc-monitor tests without the json feature failed"
    exit 1
fi
grep -E '^test result' "${log}" | awk '{p+=$4; f+=$6} END {print "nodeipc-monitor without json: " p " passed, " f " failed"}'
echo "done in $(( $(date +%s) - started ))s"
