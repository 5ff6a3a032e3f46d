"""One object, several threads: regions and semaphores are shared freely; a
group refuses a second thread's call by name; a coordinator takes one
sending and one gathering thread and refuses any other pair by name."""

import socket
import threading
import time

import pytest

import nodeipc
from nodeipc import _native
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


def test_a_coordinator_takes_one_sending_and_one_gathering_thread(unique_name, private_dir):
    socket = str(private_dir / "exec.sock")
    rounds = 50
    with Coordinator(unique_name("pair"), 1, timeout=20) as coordinator:
        coordinator.serve(socket)
        worker = Worker.connect(socket, 0)
        coordinator.wait_for_workers(timeout=20)
        sent = threading.Semaphore(0)
        errors = []

        def answer():
            for _ in range(rounds):
                worker.respond(worker.recv(timeout=20) + b"!")

        def send():
            try:
                for i in range(rounds):
                    assert coordinator.send(str(i).encode()) == i
                    sent.release()
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=answer), threading.Thread(target=send)]
        for t in threads:
            t.start()
        for i in range(rounds):
            assert sent.acquire(timeout=20)
            assert coordinator.recv_all(timeout=20) == [f"{i}!".encode()]
        for t in threads:
            t.join()
        assert errors == []
        worker.close()


def test_a_second_sender_gatherer_or_worker_thread_is_refused_by_name(unique_name, private_dir):
    socket = str(private_dir / "exec.sock")
    name = unique_name("busy")
    coordinator = Coordinator(name, 1, depth=1, timeout=20)
    coordinator.serve(socket)
    worker = Worker.connect(socket, 0)
    coordinator.wait_for_workers(timeout=20)
    assert coordinator.send(b"zero") == 0
    # The worker has not taken request 0: the next send waits for its frame,
    # and a gather waits for its answer.
    results = {}
    sender = threading.Thread(target=lambda: results.update(send=coordinator.send(b"one", timeout=20)))
    gatherer = threading.Thread(target=lambda: results.update(gather=coordinator.recv_all(timeout=20)))
    sender.start()
    gatherer.start()
    time.sleep(0.2)
    for call, busy in [
        (lambda: coordinator.send(b"two"), "another thread is sending"),
        (lambda: coordinator.recv_all(), "another thread is gathering"),
        (lambda: coordinator.recv_first(), "another thread is gathering"),
        (lambda: coordinator.drain(), "another thread is gathering"),
        (lambda: coordinator.close(), "close a coordinator once every other thread"),
    ]:
        with pytest.raises(nodeipc.ConcurrentUseError) as refused:
            call()
        assert name in str(refused.value) and busy in str(refused.value), str(refused.value)
    assert "one sending and one gathering thread" in str(
        pytest.raises(nodeipc.ConcurrentUseError, coordinator.send, b"x").value
    )
    # Nothing was sent or taken for the refused calls.
    assert worker.recv(timeout=20) == b"zero"
    worker.respond(b"answer zero")
    sender.join()
    gatherer.join()
    assert results == {"send": 1, "gather": [b"answer zero"]}
    assert worker.recv(timeout=20) == b"one"
    worker.respond(b"answer one")
    assert coordinator.recv_all(timeout=20) == [b"answer one"]
    # A worker takes one thread at a time too: one waits for a request
    # while another tries to answer.
    receiving = threading.Thread(target=lambda: results.update(recv=worker.recv(timeout=20)))
    receiving.start()
    time.sleep(0.2)
    with pytest.raises(nodeipc.ConcurrentUseError) as refused:
        worker.respond(b"x")
    assert "a worker is used by one thread at a time" in str(refused.value), str(refused.value)
    coordinator.send(b"two")
    receiving.join()
    assert results["recv"] == b"two"
    worker.respond(b"answer two")
    assert coordinator.recv_all(timeout=20) == [b"answer two"]
    worker.close()
    coordinator.close()


def test_a_monitor_connection_refuses_a_second_thread_by_name(private_dir):
    # A socket that takes connections and never answers: the first thread's
    # request waits for its reply while the second calls.
    path = private_dir / "silent.sock"
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.bind(str(path))
    silent.listen(4)
    try:
        connection = _native.MonitorConnection(str(path), 2.0)
        failed = []

        def wait_for_init():
            try:
                connection.init(0, 0, False)
            except nodeipc.NodeipcError as e:
                failed.append(e)

        waiting = threading.Thread(target=wait_for_init)
        waiting.start()
        time.sleep(0.2)
        with pytest.raises(nodeipc.ConcurrentUseError) as refused:
            connection.heartbeat_socket()
        assert "one thread at a time" in str(refused.value), str(refused.value)
        waiting.join()
        assert len(failed) == 1 and isinstance(failed[0], nodeipc.TimeoutError), failed
        connection.close()
    finally:
        silent.close()
