"""Groups across processes: Python ranks, a mixed Rust/Python group,
Ctrl-C during a barrier and a join, deaths, bad arguments."""

import os
import signal
import subprocess
import time

import pytest

import nodeipc
from conftest import ours_in_dev_shm, python_child, rust_program


def finish(proc, timeout=60):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def test_python_ranks_in_three_processes_pass_every_collective(unique_name):
    name = unique_name("py3")
    procs = [python_child("rank_py.py", "soak", name, str(r), "3", "200") for r in range(3)]
    for r, proc in enumerate(procs):
        code, out, err = finish(proc)
        assert code == 0, f"rank {r}: {out}\n{err}"
        lines = out.strip().splitlines()
        assert lines[-1] == "ok", out
        # 3 exchanges x 2 peers + 6 broadcasts.
        assert "verified 12 descriptors" in out, out


def test_a_python_rank_and_rust_ranks_share_a_group(unique_name):
    rank = rust_program("rank")
    name = unique_name("mixed")
    # The Rust rank program opens a counter region for its barrier rounds;
    # with 0 of them it only needs to find it.
    counter = nodeipc.Region.create(unique_name("counter"), 8)
    rust = [
        subprocess.Popen(
            [rank, "soak", name, str(r), "3", "auto", counter.name, "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 2)
    ]
    try:
        group = nodeipc.Group(name, 1, 3, timeout=60)
        from rank_py import collective_rounds

        assert collective_rounds(group) == 12
        group.leave()
    finally:
        results = [finish(p) for p in rust]
    for code, out, err in results:
        assert code == 0 and out.strip().splitlines()[-1] == "ok", f"{out}\n{err}"
    counter.unlink()


def test_ctrl_c_ends_a_barrier_and_its_peers_learn_at_once(unique_name):
    name = unique_name("sigint")
    child = python_child("rank_py.py", "barrier-wait", name, "0", "2")
    group = nodeipc.Group(name, 1, 2, timeout=30)
    assert child.stdout.readline().strip() == "waiting"
    time.sleep(0.3)  # parked in the barrier by now
    sent = time.monotonic()
    child.send_signal(signal.SIGINT)
    code, out, err = finish(child)
    assert code == 0, f"{out}\n{err}"
    assert out.strip().startswith("interrupted after"), out
    assert time.monotonic() - sent < 5
    # The interrupted rank poisoned the group: we do not wait 30 s.
    start = time.monotonic()
    with pytest.raises(nodeipc.PeerDiedError) as caught:
        group.barrier()
    assert time.monotonic() - start < 5
    assert "interrupted" in str(caught.value)


def test_ctrl_c_ends_a_join_and_leaves_nothing(unique_name):
    name = unique_name("sigint-join")
    child = python_child("rank_py.py", "join-wait", name, "0", "2")
    assert child.stdout.readline().strip() == "joining"
    time.sleep(0.5)
    child.send_signal(signal.SIGINT)
    code, out, err = finish(child)
    assert code == 0 and out.strip() == "KeyboardInterrupt", f"{out}\n{err}"
    assert ours_in_dev_shm(name) == []


def test_a_rank_that_dies_fails_the_barrier_of_the_others(unique_name):
    name = unique_name("death")
    child = python_child("rank_py.py", "barrier-wait", name, "0", "2")
    group = nodeipc.Group(name, 1, 2, timeout=30)
    assert child.stdout.readline().strip() == "waiting"
    child.kill()
    finish(child)
    # The dead rank may have arrived at its barrier before it died (then
    # ours passes): the next one cannot.
    start = time.monotonic()
    with pytest.raises(nodeipc.PeerDiedError) as caught:
        group.barrier()
        group.barrier()
    assert time.monotonic() - start < 5
    assert "rank 0" in str(caught.value)


def test_a_missing_rank_times_the_join_out(unique_name):
    name = unique_name("alone")
    start = time.monotonic()
    with pytest.raises(nodeipc.TimeoutError) as caught:
        nodeipc.Group(name, 0, 2, timeout=0.3)
    assert time.monotonic() - start < 5
    assert "1 of 2" in str(caught.value) or "join" in str(caught.value)


def test_a_group_of_one_and_its_context_manager(unique_name):
    name = unique_name("one")
    with nodeipc.Group(name, 0, 1, timeout=5, slot_size=256) as group:
        assert (group.rank, group.size, group.slot_size) == (0, 1, 256)
        assert group.pids() == [os.getpid()]
        group.barrier(timeout=1)
        assert group.all_gather(b"x" * 256) == [b"x" * 256]
        with pytest.raises(nodeipc.InvalidArgumentError):
            group.all_gather(b"x" * 257)
        with pytest.raises(TypeError):
            group.barrier(time=1)
    assert group.left
    with pytest.raises(nodeipc.NodeipcError):
        group.barrier()


@pytest.mark.parametrize(
    "args",
    [
        dict(rank=-1, size=2),
        dict(rank=2, size=2),
        dict(rank=0, size=0),
        dict(rank=0, size=1, timeout=-1),
        dict(rank=0, size=1, slot_size=0),
        dict(rank=0, size=1, transport="carrier pigeon"),
    ],
)
def test_bad_group_arguments_are_refused_before_anything_is_made(unique_name, args):
    name = unique_name("bad")
    with pytest.raises(nodeipc.InvalidArgumentError):
        nodeipc.Group(name, **args)
    assert ours_in_dev_shm(name) == []


def test_a_group_name_without_its_slash_is_refused(unique_name):
    name = unique_name("no-slash")
    with pytest.raises(nodeipc.InvalidArgumentError, match="must start with '/'"):
        nodeipc.Group(name.lstrip("/"), 0, 1, timeout=5)
    assert ours_in_dev_shm(name) == []


def test_a_closed_descriptor_is_refused_by_exchange_fds(unique_name):
    with nodeipc.Group(unique_name("fds"), 0, 1, timeout=5) as group:
        r, w = os.pipe()
        os.close(r)
        os.close(w)
        with pytest.raises(nodeipc.InvalidArgumentError):
            group.exchange_fds(r)
        with pytest.raises(TypeError):
            group.exchange_fds("3")


@pytest.mark.parametrize("what", ["named-sem", "shm-sem", "open"])
def test_ctrl_c_ends_every_kind_of_wait(unique_name, what):
    name = unique_name("wait")
    child = python_child("waiter_py.py", what, name)
    assert child.stdout.readline().strip() == "waiting"
    time.sleep(0.3)  # parked by now
    child.send_signal(signal.SIGINT)
    code, out, err = finish(child, timeout=10)
    assert code == 0 and out.startswith("KeyboardInterrupt after"), f"{out}\n{err}"
    assert ours_in_dev_shm(name) == []


def test_a_waiting_call_lets_other_python_threads_run(unique_name):
    import threading

    name = unique_name("gil")
    child = python_child("rank_py.py", "barrier-wait", name, "0", "2")
    group = nodeipc.Group(name, 1, 2, timeout=30)
    assert child.stdout.readline().strip() == "waiting"
    region = nodeipc.Region.anonymous(64)
    sem = nodeipc.ShmSemaphore(region, initial=0)
    done = []
    waiter = threading.Thread(target=lambda: done.append(sem.wait(timeout=10)))
    waiter.start()
    # The waiter holds no lock: this thread counts freely meanwhile.
    count, until = 0, time.monotonic() + 0.3
    while time.monotonic() < until:
        count += 1
    sem.post()
    waiter.join(timeout=10)
    assert done == [None] and count > 10_000, count
    group.barrier()  # lets the child's barrier pass
    code, out, err = finish(child)
    assert code == 0 and out.strip().splitlines()[-1] == "ok", f"{out}\n{err}"
