#!/usr/bin/env bash
# Processes SIGKILL cannot end (issue 22): the launch tests make one for
# real, a lookup on a FUSE mount whose server (the test) never answers.
# They need /dev/fuse and root (they mount with mount(2), no fusermount).
# This step makes sure the device is there; the tests themselves run with
# the others (launch/tests/stuck.rs in the workspace run, etcd_faults in
# the etcd step). Under CI=true a missing /dev/fuse fails here.
set -euo pipefail
started=$(date +%s)
if [ ! -c /dev/fuse ]; then
    if ! grep -qw fuse /proc/filesystems && command -v modprobe >/dev/null 2>&1; then
        modprobe fuse || true
    fi
    if grep -qw fuse /proc/filesystems; then
        # The kernel has FUSE but no device node was made (a minimal /dev).
        mknod -m 0600 /dev/fuse c 10 229
    fi
fi
if [ ! -c /dev/fuse ] || [ "$(id -u)" != 0 ]; then
    echo "stuck: /dev/fuse missing or not root: the unkillable-process tests cannot run"
    if [ "${CI:-}" = true ] || [ "${CI:-}" = 1 ]; then exit 1; fi
fi
ls -l /dev/fuse
echo "stuck: /dev/fuse ready in $(( $(date +%s) - started ))s"
