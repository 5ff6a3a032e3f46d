"""Waits in one blocking call until SIGINT: ``waiter_py.py WHAT NAME``.
Prints ``waiting`` first, then ``KeyboardInterrupt after S`` (exit 0) or
what else happened (exit 1).

WHAT: named-sem (NamedSemaphore NAME, created here), shm-sem (a
ShmSemaphore in an anonymous region), open (Region.open of NAME, which
nobody creates)."""

import sys
import time

import nodeipc


def main():
    what, name = sys.argv[1:]
    keep = []
    if what == "named-sem":
        sem = nodeipc.NamedSemaphore.create(name, 0)
        keep.append(sem)
        call = lambda: sem.wait(timeout=None)  # noqa: E731
    elif what == "shm-sem":
        region = nodeipc.Region.anonymous(64)
        sem = nodeipc.ShmSemaphore(region, initial=0)
        call = lambda: sem.wait(timeout=None)  # noqa: E731
    elif what == "open":
        call = lambda: nodeipc.Region.open(name, timeout=None)  # noqa: E731
    else:
        raise SystemExit(f"unknown {what}")
    print("waiting", flush=True)
    start = time.monotonic()
    try:
        call()
    except KeyboardInterrupt:
        print(f"KeyboardInterrupt after {time.monotonic() - start:.3f}", flush=True)
        return 0
    print("returned?!", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
