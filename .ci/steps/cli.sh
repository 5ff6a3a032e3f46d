#!/usr/bin/env bash
# The shells `nodeipc completions` writes for, so that
# cli/tests/it/formats.rs::completion_scripts_complete_in_their_shells checks
# the zsh and fish scripts too (bash is always there). Without them that
# test skips, which under CI=true is a failure.
set -euo pipefail
started=$(date +%s)
missing=()
for shell in zsh fish; do
    command -v "${shell}" >/dev/null 2>&1 || missing+=("${shell}")
done
if [ "${#missing[@]}" -gt 0 ]; then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    ${sudo} apt-get update -q
    ${sudo} apt-get install -y -q "${missing[@]}"
fi
zsh --version
fish --version
echo "cli shells: $(( $(date +%s) - started ))s"
