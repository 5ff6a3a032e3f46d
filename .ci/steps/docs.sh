#!/usr/bin/env bash
# The documents hold to the tree: every crate folder of the workspace has
# its row in docs/DESIGN.md and in the README's crate table, and every test
# SECURITY.md names exists (Rust: the test binaries' `--list`, the loom
# models' too; Python: `pytest --collect-only`), so a renamed or removed
# test cannot leave a claim shown by nothing. Runs after the workspace's
# tests, the Python package and the loom models, whose builds it lists:
# NODEIPC_DOCS_PYTHON names the python with pytest and nodeipc installed
# (required under CI=true). The rules are in .ci/steps/docs.py.
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 .ci/steps/docs.py
