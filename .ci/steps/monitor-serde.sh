#!/usr/bin/env bash
# nodeipc-monitor as a library, without its `serde` feature: no serde in its
# tree. Its configuration files, the serde schema and JSON live in
# nodeipc-monitor-host beside it. (Its tests run in the workspace's own
# test run: they spawn monitors through nodeipc-monitor-host, which turns
# `serde` on for them.)
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$(date +%s)
tree=$(cargo tree --locked -p nodeipc-monitor -e normal --prefix none)
if grep -E '^serde(_json|_yaml_ng)? ' <<<"${tree}"; then
    echo "nodeipc-monitor without its serde feature pulls serde"
    exit 1
fi
tree=$(cargo tree --locked -p nodeipc-monitor -e normal -F serde --prefix none)
if grep -E '^serde_(json|yaml_ng) ' <<<"${tree}"; then
    echo "nodeipc-monitor with its serde feature pulls a serde format"
    exit 1
fi
echo "nodeipc-monitor: no serde in its tree; with feature serde, no format"
echo "done in $(( $(date +%s) - started ))s"
