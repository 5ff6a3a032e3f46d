"""Every nodeipc object in a child made by os.fork(): any use raises
ForkedError naming it, closing it or letting it go is quiet and leaves the
parent's objects as they were; a child that ends with sys.exit while its
parent's coordinator serves prints nothing and stops nothing."""

import os
import threading
import time
import traceback

import pytest

import nodeipc
from conftest import ours_in_dev_shm, python_child
from nodeipc import _native
from nodeipc.channel import Coordinator, Worker


def in_a_forked_child(body) -> None:
    """Runs `body` in a child made by os.fork() (it returns the exit code)
    and checks the child exited 0; prints the child's traceback if any."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = body()
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    deadline = time.monotonic() + 30
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child did not finish in 30 s (a deadlock?)")
        time.sleep(0.01)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


def forked(call, what: str) -> bool:
    """Whether `call()` raises ForkedError naming `what`."""
    try:
        call()
    except nodeipc.ForkedError as e:
        return what in str(e) and "forked" in str(e)
    return False


def test_every_object_in_a_forked_child_raises_forked_error_and_closes_quietly(
    unique_name, private_dir, monitor
):
    region_name, sem_name = unique_name("region"), unique_name("sem")
    region = nodeipc.Region.create(region_name, 4096)
    anonymous = nodeipc.Region.anonymous(4096)
    named = nodeipc.NamedSemaphore.create(sem_name, 0)
    in_region = nodeipc.ShmSemaphore(anonymous, 64, initial=0)
    group = nodeipc.Group(unique_name("group"), 0, 1, timeout=10)
    socket = str(private_dir / "exec.sock")
    coordinator = Coordinator(unique_name("chan"), 1, timeout=20)
    coordinator.serve(socket)
    worker = Worker.connect(socket, 0)
    coordinator.wait_for_workers(timeout=20)
    connection = _native.MonitorConnection(monitor(), 10.0)
    connection.init(0, 0, True)
    # Another parent thread waits on the semaphore across the fork.
    waited = []
    waiter = threading.Thread(target=lambda: waited.append(in_region.wait(timeout=20)))
    waiter.start()
    time.sleep(0.05)

    def child() -> int:
        checks = [
            forked(lambda: region.read(0, 1), region_name),
            forked(lambda: region.write(0, b"x"), region_name),
            forked(lambda: memoryview(region), region_name),
            forked(lambda: anonymous.fileno(), "anonymous"),
            forked(lambda: named.post(), sem_name),
            forked(lambda: in_region.post(), "anonymous"),
            forked(lambda: group.barrier(), "group"),
            forked(lambda: coordinator.send(b"x"), "coordinator"),
            forked(lambda: worker.recv(timeout=0), "worker"),
            forked(lambda: connection.heartbeat(), "monitor"),
            region.name == region_name and "Region" in repr(region),
        ]
        # Closing or dropping: nothing of the parent's goes.
        worker.close()
        coordinator.close()
        group.leave()
        connection.close()
        with region:
            pass
        if not all(checks):
            print(f"checks in the child: {checks}", flush=True)
            return 1
        return 0

    in_a_forked_child(child)

    # Everything is still the parent's.
    assert nodeipc.Region.open(region_name).name == region_name
    nodeipc.NamedSemaphore.open(sem_name).post()
    named.wait(timeout=5)
    in_region.post()
    waiter.join(timeout=20)
    assert waited == [None]
    group.barrier()
    connection.heartbeat()
    coordinator.send(b"step")
    assert worker.recv(timeout=5) == b"step"
    worker.respond(b"done")
    assert coordinator.recv_all(timeout=5) == [b"done"]
    worker.close()
    coordinator.close()
    group.leave()
    connection.close()
    del region, named
    assert ours_in_dev_shm(region_name) == [] and ours_in_dev_shm(sem_name) == []


def test_a_child_that_exits_while_its_parent_serves_prints_nothing(private_dir):
    # The script forks while its coordinator serves; the child ends with
    # sys.exit(0), so the interpreter's finalization drops the copy.
    proc = python_child("fork_exit_py.py", str(private_dir / "exec.sock"))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, f"{out}\n{err}"
    assert "served after the child exited" in out, out
    assert err == "", err


def test_a_fork_while_other_threads_hold_the_objects_locks(unique_name, private_dir):
    # At the fork one parent thread gathers (holding the coordinator and
    # its gathering turn, waiting for an answer) and another waits in a
    # barrier (holding the group's turn). The child's uses are refused and
    # its closes return at once: no lock a dead thread holds is waited for.
    name = unique_name("group")
    joined = {}
    ranks = [threading.Thread(target=lambda r=r: joined.update({r: nodeipc.Group(name, r, 2, timeout=20)})) for r in (0, 1)]
    for t in ranks:
        t.start()
    for t in ranks:
        t.join()
    socket = str(private_dir / "exec.sock")
    coordinator = Coordinator(unique_name("chan"), 1, timeout=20)
    coordinator.serve(socket)
    worker = Worker.connect(socket, 0)
    coordinator.wait_for_workers(timeout=20)
    coordinator.send(b"held")
    results = {}
    gathering = threading.Thread(target=lambda: results.update(gather=coordinator.recv_all(timeout=20)))
    waiting = threading.Thread(target=lambda: results.update(barrier=joined[0].barrier(timeout=20)))
    gathering.start()
    waiting.start()
    time.sleep(0.2)

    def child() -> int:
        checks = [
            forked(lambda: coordinator.recv_all(timeout=0), "coordinator"),
            forked(lambda: joined[0].barrier(), "group"),
        ]
        coordinator.close()
        coordinator.stop_serving()
        joined[0].leave()
        worker.close()
        if not all(checks):
            print(f"checks in the child: {checks}", flush=True)
            return 1
        return 0

    in_a_forked_child(child)

    # The parent's threads finish as if nothing happened.
    assert worker.recv(timeout=20) == b"held"
    worker.respond(b"answer")
    joined[1].barrier(timeout=20)
    gathering.join()
    waiting.join()
    assert results == {"gather": [b"answer"], "barrier": None}
    worker.close()
    coordinator.close()
    joined[0].leave()
    joined[1].leave()
