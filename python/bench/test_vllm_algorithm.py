"""The benchmark's baseline (``vllm_algorithm``) works as the release it
follows: a broadcast reaches every reader process in order, an object larger
than a chunk goes over the socket, waits past their timeout raise
``TimeoutError``, ``shutdown`` ends an idle reader's wait, and the handle
crosses to another process by pickle. Every test runs its processes under a
watchdog and checks that the segment and the ZMQ socket files are gone.

    /tmp/bench-venv/bin/python -m pytest -q python/bench
"""

from __future__ import annotations

import faulthandler
import hashlib
import multiprocessing
import os
import pickle
import time
from typing import Iterator, List

import pytest

import vllm_algorithm as va

KIB = 1024
MIB = 1024 * 1024
WATCHDOG_S = 120  # generous: the machine is a loaded 2-core one
JOIN_S = 60


class Blob:
    """An object that pickles its bytes as a protocol-5 buffer, so that
    one of 1 MiB or more travels out of band (as a numpy array would)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __reduce_ex__(self, protocol):
        if protocol >= 5:
            return (Blob._rebuild, (pickle.PickleBuffer(self.data),))
        return (Blob, (self.data,))

    @staticmethod
    def _rebuild(buffer) -> "Blob":
        return Blob(bytes(buffer))


def digest(obj) -> str:
    """What a reader reports for what it received."""
    if isinstance(obj, Blob):
        return "Blob:" + hashlib.sha256(obj.data).hexdigest()
    return type(obj).__name__ + ":" + hashlib.sha256(pickle.dumps(obj, protocol=4)).hexdigest()


def objects() -> List[object]:
    """Small, in-band, out-of-band (2 MiB buffer) and chunk-sized objects;
    the test's queues have 4 MiB chunks."""
    return [
        {"step": 1, "tokens": list(range(50))},
        b"x" * (1 * KIB),
        Blob(bytes(range(256)) * (8 * KIB)),  # 2 MiB, out of band, in a chunk
        os.urandom(3 * MIB),
        None,
        ("end", 7),
    ]


@pytest.fixture(autouse=True)
def watchdog():
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def children() -> Iterator[List[multiprocessing.Process]]:
    """Processes a test starts; any still alive at the end are killed."""
    started: List[multiprocessing.Process] = []
    yield started
    for process in started:
        if process.is_alive():
            process.kill()
        process.join(5)


def ipc_path(address: str) -> str:
    assert address.startswith("ipc://")
    return address[len("ipc://") :]


def close_and_check(queue: va.MessageQueue) -> None:
    """Closes the writer and checks that nothing of it is left."""
    handle = queue.export_handle()
    queue.close()
    if handle.buffer_handle is not None:
        name = handle.buffer_handle[3]
        assert not os.path.exists(f"/dev/shm/{name}"), f"left in /dev/shm: {name}"
    for address in (handle.local_subscribe_addr, handle.local_notify_addr):
        if address is not None:
            assert not os.path.exists(ipc_path(address)), f"left: {address}"


def join_all(processes: List[multiprocessing.Process]) -> None:
    for process in processes:
        process.join(JOIN_S)
        assert not process.is_alive(), f"{process.name} did not finish"
        assert process.exitcode == 0, f"{process.name} exited with {process.exitcode}"


# -- children (module level: importable under 'spawn') -----------------------


def reader_reports_digests(handle, rank, count, idle_before_last, conn) -> None:
    queue = va.MessageQueue.create_from_handle(handle, rank)
    queue.wait_until_ready()
    received = [digest(queue.dequeue(timeout=JOIN_S)) for _ in range(count)]
    conn.send(received)
    # The writer waits idle_before_last seconds, so this read is woken
    # through the SpinCondition's notify socket, not by spinning.
    if idle_before_last:
        received.append(digest(queue.dequeue(timeout=JOIN_S)))
        conn.send(received[-1])
    queue.close()


def reader_times_out(handle, conn) -> None:
    queue = va.MessageQueue.create_from_handle(handle, 0)
    queue.wait_until_ready()
    start = time.monotonic()
    try:
        queue.dequeue(timeout=0.3)
        conn.send(("no error", None, time.monotonic() - start))
    except Exception as error:  # reported to the test, which asserts
        conn.send((type(error).__name__, error.args, time.monotonic() - start))
    conn.recv()  # until the writer has filled the ring and timed out
    queue.close()


def reader_shut_down(handle, conn) -> None:
    import threading

    queue = va.MessageQueue.create_from_handle(handle, 0)
    queue.wait_until_ready()
    # Past the 1 s busy phase, so the reader is idle in its ZMQ poll.
    threading.Timer(1.5, queue.shutdown).start()
    start = time.monotonic()
    try:
        queue.dequeue()
        conn.send(("no error", None, time.monotonic() - start))
    except Exception as error:
        conn.send((type(error).__name__, error.args, time.monotonic() - start))
    queue.close()


def reader_from_pickled_handle(conn) -> None:
    handle = pickle.loads(conn.recv_bytes())
    rank = conn.recv()
    queue = va.MessageQueue.create_from_handle(handle, rank)
    queue.wait_until_ready()
    conn.send(digest(queue.dequeue(timeout=JOIN_S)))
    queue.close()


# -- tests --------------------------------------------------------------------


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_broadcast_reaches_two_reader_processes_in_order(children, method):
    context = multiprocessing.get_context(method)
    queue = va.MessageQueue(2, 2, max_chunk_bytes=4 * MIB, max_chunks=3)
    sent = objects()
    pipes = []
    for rank in range(2):
        parent, child = context.Pipe()
        process = context.Process(
            target=reader_reports_digests,
            args=(queue.export_handle(), rank, len(sent), True, child),
            name=f"reader-{rank}",
        )
        process.start()
        children.append(process)
        pipes.append(parent)
    queue.wait_until_ready()
    for obj in sent:  # more objects than chunks: the writer waits for readers
        queue.enqueue(obj, timeout=JOIN_S)
    expected = [digest(obj) for obj in sent]
    for parent in pipes:
        assert parent.poll(JOIN_S)
        assert parent.recv() == expected
    time.sleep(1.5)  # both readers go idle
    last = {"after": "idle"}
    queue.enqueue(last)
    for parent in pipes:
        assert parent.poll(JOIN_S)
        assert parent.recv() == digest(last)
    join_all(children)
    close_and_check(queue)


def test_object_larger_than_a_chunk_goes_over_the_socket(children):
    context = multiprocessing.get_context("spawn")
    queue = va.MessageQueue(1, 1, max_chunk_bytes=64 * KIB, max_chunks=4)
    sent = [
        os.urandom(1 * MIB),  # one pickle, larger than a chunk
        Blob(os.urandom(2 * MIB)),  # main pickle + one out-of-band frame
        b"small",
    ]
    parent, child = context.Pipe()
    process = context.Process(
        target=reader_reports_digests, args=(queue.export_handle(), 0, len(sent), False, child)
    )
    process.start()
    children.append(process)
    queue.wait_until_ready()
    for obj in sent:
        queue.enqueue(obj, timeout=JOIN_S)
    assert parent.poll(JOIN_S)
    assert parent.recv() == [digest(obj) for obj in sent]
    # The chunks say which message went over the socket (marker 1) and
    # which one is in the chunk (marker 0).
    markers = []
    for idx in range(3):
        with queue.buffer.get_data(idx) as chunk:
            markers.append(chunk[0])
    assert markers == [1, 1, 0]
    join_all(children)
    close_and_check(queue)


def test_waits_past_their_timeout_raise_timeout_error(children):
    context = multiprocessing.get_context("spawn")
    queue = va.MessageQueue(1, 1, max_chunk_bytes=4 * KIB, max_chunks=2)
    parent, child = context.Pipe()
    process = context.Process(target=reader_times_out, args=(queue.export_handle(), child))
    process.start()
    children.append(process)
    queue.wait_until_ready()
    # The reader: nothing sent, dequeue(timeout=0.3) raises TimeoutError().
    assert parent.poll(JOIN_S)
    name, args, elapsed = parent.recv()
    assert (name, args) == ("TimeoutError", ())
    assert elapsed >= 0.3
    # The writer: the reader reads nothing more, so two messages fill the
    # ring and the third waits for a free chunk until its timeout.
    queue.enqueue(1, timeout=5)
    queue.enqueue(2, timeout=5)
    start = time.monotonic()
    with pytest.raises(TimeoutError) as raised:
        queue.enqueue(3, timeout=0.3)
    assert raised.value.args == ()
    assert time.monotonic() - start >= 0.3
    with pytest.raises(RuntimeError, match="Only readers can dequeue"):
        queue.dequeue()
    parent.send("done")
    join_all(children)
    close_and_check(queue)


def test_shutdown_ends_an_idle_readers_wait_with_cancelled(children):
    context = multiprocessing.get_context("spawn")
    queue = va.MessageQueue(1, 1, max_chunk_bytes=4 * KIB, max_chunks=2)
    parent, child = context.Pipe()
    process = context.Process(target=reader_shut_down, args=(queue.export_handle(), child))
    process.start()
    children.append(process)
    queue.wait_until_ready()
    assert parent.poll(JOIN_S)
    name, args, elapsed = parent.recv()
    assert (name, args) == ("RuntimeError", ("cancelled",))
    assert elapsed >= 1.5
    join_all(children)
    close_and_check(queue)


def test_handle_pickled_to_a_process_started_before_the_queue(children):
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=reader_from_pickled_handle, args=(child,))
    process.start()
    children.append(process)
    queue = va.MessageQueue(1, 1, local_reader_ranks=[5], max_chunk_bytes=4 * KIB, max_chunks=2)
    parent.send_bytes(pickle.dumps(queue.export_handle()))
    parent.send(5)
    queue.wait_until_ready()
    sent = {"hello": [1, 2, 3]}
    queue.enqueue(sent)
    assert parent.poll(JOIN_S)
    assert parent.recv() == digest(sent)
    join_all(children)
    close_and_check(queue)


def test_remote_reader_over_tcp_beside_a_local_one(children):
    context = multiprocessing.get_context("spawn")
    queue = va.MessageQueue(2, 1, max_chunk_bytes=4 * KIB, max_chunks=2, connect_ip="127.0.0.1")
    assert queue.export_handle().remote_subscribe_addr.startswith("tcp://127.0.0.1:")
    pipes = []
    for rank in (0, -1):  # -1: not a local rank, so the remote role
        parent, child = context.Pipe()
        process = context.Process(target=reader_from_pickled_handle, args=(child,))
        process.start()
        children.append(process)
        parent.send_bytes(pickle.dumps(queue.export_handle()))
        parent.send(rank)
        pipes.append(parent)
    queue.wait_until_ready()
    sent = os.urandom(64 * KIB)  # larger than a chunk: the socket for the local one
    queue.enqueue(sent)
    for parent in pipes:
        assert parent.poll(JOIN_S)
        assert parent.recv() == digest(sent)
    join_all(children)
    close_and_check(queue)


def test_ring_buffer_pickles_as_its_name():
    ring = va.ShmRingBuffer(2, 4 * KIB, 3)
    try:
        attached = pickle.loads(pickle.dumps(ring))
        assert attached.handle() == ring.handle()
        assert not attached.is_creator
        with ring.get_metadata(1) as row:
            row[2] = 1
        with attached.get_metadata(1) as row:
            assert bytes(row) == b"\x00\x00\x01"
        attached.close()
        assert os.path.exists(f"/dev/shm/{ring.handle()[3]}")  # only the creator unlinks
    finally:
        name = ring.handle()[3]
        ring.close()
    assert not os.path.exists(f"/dev/shm/{name}")
