"""One Python rank of a group, for the tests: ``rank_py.py MODE NAME RANK
WORLD [ARGS]``. Prints its last line on stdout: ``ok``, or the exception's
class and message; exit 0 on success, 2 on a nodeipc error.

Modes:
  soak BARRIERS   BARRIERS barriers checked through per-rank slots of a
                  region ``NAME-slots`` (no rank passes early), then the
                  collective rounds of the Rust ``rank soak`` program
                  (all-gathers, broadcasts, descriptor exchanges and
                  descriptor broadcasts, checked by content and identity),
                  so Python and Rust ranks can share a group.
  barrier-wait    joins, prints ``waiting``, then waits in a barrier (for a
                  SIGINT); prints ``interrupted after S`` on KeyboardInterrupt.
  join-wait       prints ``joining`` and joins a group nobody else joins.
"""

import os
import struct
import sys
import time

import nodeipc


def identity(fd):
    st = os.fstat(fd)
    return struct.pack("<QQ", st.st_dev, st.st_ino)


def collective_rounds(group):
    rank, world = group.rank, group.size
    for rnd in range(20):
        got = group.all_gather(f"rank {rank} round {rnd}".encode())
        assert got == [f"rank {r} round {rnd}".encode() for r in range(world)], got
        root = rnd % world
        said = group.broadcast(f"from {root} at {rnd}".encode(), root=root)
        assert said == f"from {root} at {rnd}".encode(), said
    verified = 0
    for rnd in range(3):
        region = nodeipc.Region.anonymous(4096)
        region.write(0, bytes([rank, rnd, 0xEE]))
        fds = group.exchange_fds(region.fileno())
        for r, fd in enumerate(fds):
            if r == rank:
                assert fd is None
                continue
            theirs = nodeipc.Region.from_fd(fd)
            os.close(fd)
            assert theirs.read(0, 3) == bytes([r, rnd, 0xEE]), (r, rnd)
            verified += 1
    for rnd in range(2 * world):
        root = rnd % world
        text = f"fd from {root} at {rnd}".encode()
        mine = None
        if rank == root:
            mine = nodeipc.Region.anonymous(4096)
            mine.write(0, text)
        fd = group.broadcast_fd(mine.fileno() if mine else None, root=root)
        got = identity(fd)
        assert group.broadcast(got, root=root) == got, "a copy, not the root's file"
        if mine is not None:
            assert fd != mine.fileno()
        region = nodeipc.Region.from_fd(fd)
        os.close(fd)
        assert region.read(0, len(text)) == text
        verified += 1
    return verified


def soak(group, barriers, name):
    rank, world = group.rank, group.size
    if barriers:
        slots_name = name + "-slots"
        if rank == 0:
            slots = nodeipc.Region.create(slots_name, 8 * world)
        group.barrier()
        if rank != 0:
            slots = nodeipc.Region.open(slots_name, min_size=8 * world)
        group.barrier()
        if rank == 0:
            slots.unlink()
        view = memoryview(slots).cast("Q")
        for i in range(barriers):
            view[rank] = i + 1
            group.barrier()
            seen = [view[r] for r in range(world)]
            assert min(seen) >= i + 1, f"rank {rank} passed barrier {i} early: {seen}"
            assert max(seen) <= i + 2, f"rank {rank} saw a rank two barriers ahead: {seen}"
        view.release()
    verified = collective_rounds(group)
    print(f"verified {verified} descriptors, transport {group.transport}")


def main():
    mode, name, rank, world, *rest = sys.argv[1:]
    rank, world = int(rank), int(world)
    try:
        if mode == "join-wait":
            print("joining", flush=True)
            nodeipc.Group(name, rank, world, timeout=None)
            print("joined?!", flush=True)
            return 1
        group = nodeipc.Group(name, rank, world, timeout=60)
        if mode == "soak":
            soak(group, int(rest[0]), name)
        elif mode == "barrier-wait":
            print("waiting", flush=True)
            start = time.monotonic()
            try:
                group.barrier(timeout=None)
            except KeyboardInterrupt:
                print(f"interrupted after {time.monotonic() - start:.3f}", flush=True)
                return 0
        else:
            raise SystemExit(f"unknown mode {mode}")
        group.leave()
    except KeyboardInterrupt:
        print("KeyboardInterrupt", flush=True)
        return 0
    except nodeipc.NodeipcError as e:
        print(f"{type(e).__name__}: {e}", flush=True)
        return 2
    print("ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
