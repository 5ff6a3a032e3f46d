"""One object, several threads: regions and semaphores are shared freely; a
group refuses a second thread's call by name; a coordinator takes one
sending and one gathering thread and refuses any other pair by name."""

import threading
import time

import pytest

import nodeipc
from nodeipc.channel import Coordinator, Worker


def join_both(name):
    """Ranks 0 and 1 of a group, both in this process (joined at once)."""
    joined = {}

    def join(rank):
        joined[rank] = nodeipc.Group(name, rank, 2, timeout=20)

    threads = [threading.Thread(target=join, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return joined[0], joined[1]


def test_regions_and_semaphores_are_shared_between_threads(unique_name):
    region = nodeipc.Region.create(unique_name("shared"), 4096)
    named = nodeipc.NamedSemaphore.create(unique_name("sem"), 0)
    futex = nodeipc.ShmSemaphore(region, 0, initial=0)
    errors = []

    def work(i):
        try:
            for round in range(200):
                region.write(64 + i * 8, round.to_bytes(8, "little"))
                assert region.read(64 + i * 8, 8) == round.to_bytes(8, "little")
                futex.post()
                named.post()
                futex.wait(timeout=10)
                named.wait(timeout=10)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert futex.value == 0 and named.value == 0
    region.unlink()
    named.unlink()


def test_a_group_used_from_four_threads_refuses_the_others_by_name(unique_name):
    name = unique_name("threads")
    rank0, rank1 = join_both(name)
    done = []
    first = threading.Thread(target=lambda: done.append(rank0.barrier()))
    first.start()
    time.sleep(0.1)  # the first thread waits in the barrier for rank 1
    refused = []

    def second(call):
        try:
            call()
        except nodeipc.ConcurrentUseError as e:
            refused.append(str(e))

    others = [
        threading.Thread(target=second, args=(call,))
        for call in (rank0.barrier, lambda: rank0.all_gather(b"x"), rank0.leave)
    ]
    for t in others:
        t.start()
    for t in others:
        t.join()
    assert len(refused) == 3, refused
    for message in refused:
        assert name in message and "rank 0" in message, message
        assert "one thread at a time" in message, message
    assert isinstance(nodeipc.ConcurrentUseError("x"), RuntimeError)
    # Nothing was counted or poisoned: rank 1 releases the first thread.
    rank1.barrier()
    first.join()
    assert done == [None]
    again = threading.Thread(target=rank1.barrier)
    again.start()
    rank0.barrier()
    again.join()
    rank0.leave()
    rank1.leave()
