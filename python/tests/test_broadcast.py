"""nodeipc.broadcast.MessageQueue: vLLM's API and meanings, one test per
call; readers in processes (fork and spawn), the handle pickled to them;
killed readers and writers; a 100 MiB object; nothing left in /dev/shm."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import threading
import time

import pytest

import nodeipc
from conftest import ours_in_dev_shm
from nodeipc import _native
from nodeipc.broadcast import Handle, MessageQueue

MiB = 1 << 20


def objects():
    """What a step broadcasts: small dicts, a large bytes (streamed over
    1 MiB chunks), and, with numpy, arrays in and out of band."""
    items = [{"step": i, "ids": list(range(i))} for i in range(20)]
    items.append(b"x" * (3 * MiB + 5))
    items.append(("method", (1, 2), {"k": None}, 0))
    try:
        import numpy

        items.append(numpy.arange(300_000, dtype=numpy.int64))  # 2.4 MB: out of band
        items.append(numpy.ones(10, dtype=numpy.float32))
    except ImportError:
        pass
    return items


def same(a, b) -> bool:
    try:
        import numpy

        if isinstance(a, numpy.ndarray):
            return isinstance(b, numpy.ndarray) and a.dtype == b.dtype and (a == b).all()
    except ImportError:
        pass
    return a == b


def reader_main(handle_bytes: bytes, rank: int, results) -> None:
    handle = pickle.loads(handle_bytes)
    queue = MessageQueue.create_from_handle(handle, rank)
    queue.wait_until_ready()
    got = [queue.dequeue(timeout=30) for _ in objects()]
    results.put((rank, all(same(a, b) for a, b in zip(objects(), got))))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_readers_in_processes_get_every_object_in_order(unique_name, method):
    ctx = multiprocessing.get_context(method)
    name = unique_name("mq")
    writer = MessageQueue(2, 2, [1, 2], max_chunk_bytes=MiB, max_chunks=4, name=name)
    handle = pickle.dumps(writer.export_handle())
    results = ctx.Queue()
    readers = [ctx.Process(target=reader_main, args=(handle, r, results)) for r in (1, 2)]
    for p in readers:
        p.start()
    writer.wait_until_ready(timeout=60)
    assert not ours_in_dev_shm(name), "the name goes once every reader joined"
    for obj in objects():
        writer.enqueue(obj, timeout=30)
    got = sorted(results.get(timeout=60) for _ in readers)
    for p in readers:
        p.join(30)
    assert got == [(1, True), (2, True)]
    writer.close()


def test_the_handle_is_plain_data_and_names_a_0600_region(unique_name):
    name = unique_name("handle")
    writer = MessageQueue(1, 1, max_chunk_bytes=4096, max_chunks=2, name=name)
    handle = writer.export_handle()
    assert isinstance(handle, Handle)
    again = pickle.loads(pickle.dumps(handle))
    assert again == handle
    assert handle.buffer_handle == (1, 4096, 2, name)
    assert handle.local_subscribe_addr is None and handle.remote_subscribe_addr is None
    assert os.stat(f"/dev/shm{name}").st_mode & 0o777 == 0o600
    writer.close()
    assert not ours_in_dev_shm(name), "a writer closed before ready removes its name"


def pair(unique_name, chunk=64 * 1024, chunks=4):
    writer = MessageQueue(1, 1, max_chunk_bytes=chunk, max_chunks=chunks, name=unique_name("pair"))
    reader = MessageQueue.create_from_handle(writer.export_handle(), 0)
    writer.wait_until_ready(timeout=10)
    reader.wait_until_ready(timeout=10)
    return writer, reader


def test_dequeue_past_its_timeout_raises_timeout_error(unique_name):
    writer, reader = pair(unique_name)
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        reader.dequeue(timeout=0.3)
    assert time.monotonic() - start >= 0.3
    writer.enqueue("ready")
    assert reader.dequeue(timeout=0) == "ready"


def test_a_full_ring_raises_timeout_error_naming_the_reader_behind(unique_name):
    writer, reader = pair(unique_name, chunks=2)
    writer.enqueue(1)
    writer.enqueue(2)
    with pytest.raises(TimeoutError, match=r"reader 0 \(pid \d+\) 2 message"):
        writer.enqueue(3, timeout=0.2)
    assert writer._w().behind() == [(0, os.getpid(), 2, 2)]
    assert reader.dequeue() == 1
    writer.enqueue(3, timeout=5)
    assert [reader.dequeue(), reader.dequeue()] == [2, 3]


def test_cancel_and_shutdown_end_a_wait_with_cancelled(unique_name):
    writer, reader = pair(unique_name)
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    with pytest.raises(RuntimeError, match="cancelled"):
        reader.dequeue(cancel=cancel, indefinite=True)
    threading.Timer(0.2, reader.shutdown).start()
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="cancelled"):
        reader.dequeue()
    assert time.monotonic() - start < 5
    # A message sent before is still handed out after shutdown, then "cancelled".
    writer.enqueue("sent before")
    assert reader.dequeue() == "sent before"
    with pytest.raises(RuntimeError, match="cancelled"):
        reader.dequeue(timeout=0)


def test_ctrl_c_ends_a_wait(unique_name):
    writer, reader = pair(unique_name)
    main = threading.main_thread().ident
    threading.Timer(0.2, signal.pthread_kill, (main, signal.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt):
        reader.dequeue(indefinite=True)


def test_acquire_write_and_acquire_read_lend_a_chunk_and_release_the_view(unique_name):
    writer, reader = pair(unique_name, chunk=4096)
    with writer.acquire_write() as buf:
        assert len(buf) == 4096 and not buf.readonly
        buf[:5] = b"hello"
    with pytest.raises(ValueError):
        buf[0]  # released
    with reader.acquire_read() as view:
        assert view.readonly and bytes(view[:5]) == b"hello"
    with pytest.raises(ValueError):
        view[0]
    # An exception inside the block sends nothing.
    with pytest.raises(ZeroDivisionError):
        with writer.acquire_write() as buf:
            buf[:1] = b"!"
            1 / 0
    writer.enqueue("after")
    assert reader.dequeue() == "after"


def test_a_loan_commit_while_its_view_lives_is_refused(unique_name):
    writer = _native.BroadcastWriter(unique_name("loan"), 1, 4096, 2)
    loan = writer.begin_loan(16, None)
    view = memoryview(loan)
    with pytest.raises(BufferError):
        loan.commit()
    with pytest.raises(BufferError):
        writer.close()
    view.release()
    assert loan.commit() == 0
    with pytest.raises(BufferError):
        memoryview(loan)  # invalid after its commit
    writer.close()


def test_broadcast_object_sends_on_the_writer_and_receives_on_readers(unique_name):
    writer, reader = pair(unique_name)
    assert writer.broadcast_object({"a": 1}) == {"a": 1}
    assert reader.broadcast_object() == {"a": 1}


def test_roles_are_checked_as_vllm_checks_them(unique_name):
    writer, reader = pair(unique_name)
    with pytest.raises(RuntimeError, match="Only readers can dequeue"):
        writer.dequeue()
    with pytest.raises(AssertionError, match="Only writers can enqueue"):
        reader.enqueue(1)
    with pytest.raises(AssertionError, match="Only writers can acquire write"):
        with reader.acquire_write():
            pass
    with pytest.raises(AssertionError, match="Only readers can acquire read"):
        with writer.acquire_read():
            pass


def test_remote_readers_are_refused_by_name():
    with pytest.raises(NotImplementedError, match="remote readers are not supported yet"):
        MessageQueue(2, 1)


def test_create_from_process_group_over_a_group_without_torch(unique_name):
    class Group:
        """Two ranks in threads, sharing the broadcast object."""

        def __init__(self, rank, box, ready):
            self.rank, self.world_size, self.box, self.ready = rank, 2, box, ready

        def broadcast_obj(self, obj, src):
            if self.rank == src:
                self.box.append(obj)
                self.ready.set()
                return obj
            self.ready.wait(10)
            return self.box[0]

    box, ready, made = [], threading.Event(), {}

    def rank(r):
        made[r] = MessageQueue.create_from_process_group(Group(r, box, ready), 4096, 2)

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    made[0].enqueue("over the group")
    assert made[1].dequeue(timeout=5) == "over the group"
    try:
        import torch  # noqa: F401
    except ImportError:
        with pytest.raises(RuntimeError, match="needs torch"):
            MessageQueue.create_from_process_group(object(), 4096, 2)


def idle_reader(handle_bytes: bytes) -> None:
    queue = MessageQueue.create_from_handle(pickle.loads(handle_bytes), 0)
    queue.wait_until_ready()
    time.sleep(600)


def test_a_killed_reader_is_named_within_a_second(unique_name):
    ctx = multiprocessing.get_context("fork")
    writer = MessageQueue(1, 1, max_chunk_bytes=4096, max_chunks=2, name=unique_name("kr"))
    p = ctx.Process(target=idle_reader, args=(pickle.dumps(writer.export_handle()),))
    p.start()
    try:
        writer.wait_until_ready(timeout=30)
        writer.enqueue(1)
        writer.enqueue(2)
        os.kill(p.pid, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(nodeipc.PeerDiedError, match=rf"reader 0 \(pid {p.pid}\) died"):
            writer.enqueue(3)
        assert time.monotonic() - start < 1.0
        writer._writer.drop_reader(0)
        writer.enqueue(3)
    finally:
        p.kill()
        p.join()


def writing_then_idle(handle_pipe, name: str) -> None:
    writer = MessageQueue(1, 1, max_chunk_bytes=4096, max_chunks=4, name=name)
    handle_pipe.send(writer.export_handle())
    writer.wait_until_ready(timeout=30)
    writer.enqueue("last")
    time.sleep(600)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_killed_writer_is_named_to_its_reader(unique_name, method):
    ctx = multiprocessing.get_context(method)
    mine, theirs = ctx.Pipe()
    p = ctx.Process(target=writing_then_idle, args=(theirs, unique_name("kw")))
    p.start()
    try:
        reader = MessageQueue.create_from_handle(mine.recv(), 0)
        reader.wait_until_ready(timeout=30)
        assert reader.dequeue(timeout=30) == "last"
        os.kill(p.pid, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(nodeipc.PeerDiedError, match=rf"writer \(pid {p.pid}\) died"):
            reader.dequeue()
        assert time.monotonic() - start < 1.5
    finally:
        p.kill()
        p.join()


def big_reader(handle_bytes: bytes, results) -> None:
    queue = MessageQueue.create_from_handle(pickle.loads(handle_bytes), 0)
    queue.wait_until_ready()
    got = queue.dequeue(timeout=60)
    results.put((len(got), got[:7], got[-7:]))


def test_an_object_of_100_mib_goes_through_shared_memory(unique_name):
    ctx = multiprocessing.get_context("spawn")
    writer = MessageQueue(1, 1, max_chunk_bytes=4 * MiB, max_chunks=4, name=unique_name("big"))
    results = ctx.Queue()
    p = ctx.Process(target=big_reader, args=(pickle.dumps(writer.export_handle()), results))
    p.start()
    writer.wait_until_ready(timeout=60)
    obj = b"<start>" + bytes(100 * MiB) + b"<end!!>"
    writer.enqueue(obj, timeout=60)
    assert results.get(timeout=90) == (len(obj), b"<start>", b"<end!!>")
    p.join(30)


def test_the_tp_engine_example_runs_and_leaves_nothing():
    import subprocess
    import sys

    before = set(ours_in_dev_shm("nodeipc-mq-"))
    done = subprocess.run(
        [sys.executable, "-m", "nodeipc.examples.tp_engine", "--workers", "2", "--steps", "50", "--idle", "0.5"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "steps per second" in done.stdout and "idle worker CPU" in done.stdout
    assert set(ours_in_dev_shm("nodeipc-mq-")) <= before


def test_a_long_wait_logs_vllms_message_unless_indefinite(unique_name, monkeypatch, caplog):
    monkeypatch.setenv("VLLM_RINGBUFFER_WARNING_INTERVAL", "1")
    writer, reader = pair(unique_name, chunks=1)
    with caplog.at_level("INFO", logger="nodeipc.broadcast"):
        with pytest.raises(TimeoutError):
            reader.dequeue(timeout=1.5)
        assert "No available shared memory broadcast block found in 1 seconds" in caplog.text
        caplog.clear()
        with pytest.raises(TimeoutError):
            reader.dequeue(timeout=1.5, indefinite=True)
        assert "No available shared memory broadcast block" not in caplog.text
        # The writer's message names who is behind.
        writer.enqueue("fills the ring")
        with pytest.raises(TimeoutError):
            writer.enqueue("waits", timeout=1.5)
        assert "reader 0" in caplog.text


def fnv1a(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def test_a_rust_reader_beside_a_python_one_reads_the_same_bytes(unique_name):
    import subprocess

    from conftest import built_file

    program = built_file(
        "examples/broadcast_reader",
        "the channel's example",
        "cargo build -p nodeipc-channel --example broadcast_reader",
        executable=True,
    )
    name = unique_name("rust")
    writer = MessageQueue(2, 2, max_chunk_bytes=4096, max_chunks=4, name=name)
    python_reader = MessageQueue.create_from_handle(writer.export_handle(), 0)
    rust = subprocess.Popen(
        [program, name, "2", "4096", "4", "1", "3"], stdout=subprocess.PIPE, text=True
    )
    try:
        writer.wait_until_ready(timeout=30)
        python_reader.wait_until_ready(timeout=30)
        sent = [{"small": 1}, b"y" * 10_000, list(range(100))]  # the second streams
        seen = []
        for obj in sent:
            writer.enqueue(obj, timeout=30)
            with python_reader.acquire_read(timeout=30) as view:
                seen.append(f"{view.nbytes} {fnv1a(bytes(view)):016x}")
        out, _ = rust.communicate(timeout=60)
        assert rust.returncode == 0
        assert out.split("\n")[:3] == seen
    finally:
        rust.kill()
        rust.wait()


# -- a hostile reader ---------------------------------------------------------
#
# The ring's layout (channel/README.md, "Broadcast ring"): 384 bytes of the
# writer's lines, a 128-byte slot per reader (state, pid, start time, read
# position, ...), then a 32-byte header per chunk (sequence, message, total,
# offset). A reader process may write all of it: it maps the region
# writable to move its own position. These tests have one do so with
# garbage and check that the writer and the honest readers get errors,
# never a hang and never a wrong object.

_SLOTS = 384
_SLOT = 128
_CHUNK_HEADER = 32


def hostile_reader(handle_bytes: bytes, name: str, readers: int, chunks: int, conn) -> None:
    """Reader 0: opens the region by its name before it joins (the name
    goes once every reader has), then on command writes garbage over its
    own slot ("flags") or over every chunk header ("headers")."""
    import mmap
    import random

    fd = os.open(f"/dev/shm{name}", os.O_RDWR)
    mem = mmap.mmap(fd, 0)
    os.close(fd)
    queue = MessageQueue.create_from_handle(pickle.loads(handle_bytes), 0)
    queue.wait_until_ready()
    garbage = random.Random(38)
    conn.send("joined")
    while True:
        what = conn.recv()
        if what == "flags":
            at, size = _SLOTS, _SLOT
        elif what == "headers":
            at, size = _SLOTS + readers * _SLOT, chunks * _CHUNK_HEADER
        else:
            return
        mem[at : at + size] = garbage.randbytes(size)
        conn.send("written")


def honest_reader(handle_bytes: bytes, rank: int, conn) -> None:
    """Dequeues one object per "read" command and says what it got: the
    object, or the error's kind and message."""
    queue = MessageQueue.create_from_handle(pickle.loads(handle_bytes), rank)
    queue.wait_until_ready()
    conn.send("joined")
    while conn.recv() == "read":
        try:
            conn.send(("object", queue.dequeue(timeout=10)))
        except Exception as e:  # noqa: BLE001 - what it was is the answer
            kind = "timeout" if isinstance(e, TimeoutError) else type(e).__name__
            conn.send((kind, isinstance(e, nodeipc.NodeipcError), str(e)))


class HostileRing:
    """A writer here, reader 0 hostile and readers 1 and 2 honest, each a
    forked process driven over a pipe; all ended on exit."""

    readers, chunks = 3, 4

    def __init__(self, name: str):
        ctx = multiprocessing.get_context("fork")
        self.name = name
        self.writer = MessageQueue(
            self.readers, self.readers, max_chunk_bytes=4096, max_chunks=self.chunks, name=name
        )
        handle = pickle.dumps(self.writer.export_handle())
        self.pipes, self.processes = [], []
        for rank in range(self.readers):
            mine, theirs = ctx.Pipe()
            if rank == 0:
                args = (handle, name, self.readers, self.chunks, theirs)
                target = hostile_reader
            else:
                args, target = (handle, rank, theirs), honest_reader
            p = ctx.Process(target=target, args=args)
            p.start()
            self.pipes.append(mine)
            self.processes.append(p)

    def __enter__(self) -> "HostileRing":
        self.writer.wait_until_ready(timeout=30)
        for conn in self.pipes:
            assert self.answer(conn) == "joined"
        return self

    def __exit__(self, *exc) -> None:
        for p in self.processes:
            p.kill()
            p.join(10)
        self.writer.close()

    @staticmethod
    def answer(conn):
        assert conn.poll(20), "a reader process did not answer within 20 s"
        return conn.recv()

    def hostile(self, what: str) -> None:
        self.pipes[0].send(what)
        assert self.answer(self.pipes[0]) == "written"

    def honest_read(self) -> list:
        for conn in self.pipes[1:]:
            conn.send("read")
        return [self.answer(conn) for conn in self.pipes[1:]]


def test_a_hostile_reader_writing_its_flags_gets_the_writer_an_error_naming_it(unique_name):
    name = unique_name("hostile-flags")
    with HostileRing(name) as ring:
        # Reader 0 reads nothing: four messages fill the ring.
        for i in range(4):
            ring.writer.enqueue({"step": i}, timeout=10)
            assert ring.honest_read() == [("object", {"step": i})] * 2
        ring.hostile("flags")
        start = time.monotonic()
        with pytest.raises(nodeipc.NodeipcError, match="reader 0") as raised:
            ring.writer.enqueue({"step": 4}, timeout=10)
        assert not isinstance(raised.value, TimeoutError), raised.value
        assert time.monotonic() - start < 5, "an error, not a wait for the timeout"
        # The writer may go on without it; the honest readers get every
        # object, in order.
        ring.writer._writer.drop_reader(0)
        ring.writer.enqueue({"step": 4}, timeout=10)
        assert ring.honest_read() == [("object", {"step": 4})] * 2
    assert not ours_in_dev_shm(name)


def test_a_hostile_reader_writing_the_chunk_headers_gets_the_honest_readers_errors(unique_name):
    name = unique_name("hostile-headers")
    with HostileRing(name) as ring:
        ring.writer.enqueue("first", timeout=10)
        assert ring.honest_read() == [("object", "first")] * 2
        # Unread by anyone: a message over two chunks.
        ring.writer.enqueue(b"z" * 6000, timeout=10)
        ring.hostile("headers")
        start = time.monotonic()
        for got in ring.honest_read():
            kind, ours, message = got
            assert kind not in ("object", "timeout"), got
            assert ours, f"a NodeipcError, not {got}"
        assert time.monotonic() - start < 8, "errors, not waits for the timeout"
        # A later message is not taken for another: the handles stay failed.
        ring.writer.enqueue("later", timeout=10)
        for got in ring.honest_read():
            assert got[0] not in ("object", "timeout") and got[1], got
    assert not ours_in_dev_shm(name)
