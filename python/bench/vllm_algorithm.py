"""vLLM's shared-memory broadcast algorithm, re-implemented for benchmarking.

This module follows the behaviour of ``vllm/distributed/device_communicators/
shm_broadcast.py`` in **vLLM 0.33.0** (the newest release whose source we read
whole). It is our own code, written from a description of that release's
behaviour; no line of vLLM is copied. It exists only so that
``broadcast_bench.py`` can compare ``nodeipc.broadcast.MessageQueue`` with the
algorithm it replaces, in the same run, on the same objects. It is not part of
the installed ``nodeipc`` package and must not be used in production.

What it does, as that release does:

* ``ShmRingBuffer``: one ``multiprocessing.shared_memory`` segment holding
  ``max_chunks`` chunks of ``max_chunk_bytes``, followed by one metadata row
  per chunk: a *written* flag byte, then one *read* flag byte per local
  reader. The writer takes a chunk when it is unwritten or read by everyone,
  clears ``written``, lets the caller fill it, resets every read flag, then
  sets ``written``. Reader *i* waits for ``written == 1`` and its own flag
  ``== 0``, reads, then sets its flag. Both sides walk the ring in order.
* ``MessageQueue``: the same public shape (``n_reader``, ``n_local_reader``,
  ``local_reader_ranks``, ``max_chunk_bytes`` = 24 MiB, ``max_chunks`` = 10,
  ``connect_ip``; ``export_handle`` / ``create_from_handle``;
  ``wait_until_ready``; ``enqueue`` / ``dequeue`` with ``timeout`` and
  ``indefinite``; ``acquire_write`` / ``acquire_read``; ``broadcast_object``;
  ``shutdown``). Objects are pickled with the highest protocol; pickle
  buffers of 1 MiB and more travel out of band. A message that fits a chunk
  is laid out as ``[0][count: u16 BE]([len: u32 BE][bytes])*``; a larger one
  marks its chunk with ``1`` and goes as a multipart message over the
  writer's ZMQ XPUB socket (every local reader's SUB receives it).
* Waiting: the writer spins with ``os.sched_yield()``. A reader spins with
  ``os.sched_yield()`` for one second after its last successful read, then
  waits on a ``SpinCondition``: a ZMQ SUB socket (``CONFLATE``) on which the
  writer publishes a one-byte hint after each write (``SNDHWM`` 1, may be
  dropped: the flags are authoritative), plus an in-process PAIR socket that
  ``shutdown()`` uses to wake it; each idle wait is capped at 5 s.
* Errors: a wait past its ``timeout`` raises the builtin ``TimeoutError()``;
  a reader after ``shutdown()`` raises ``RuntimeError("cancelled")``; the
  writer's ``dequeue`` raises ``RuntimeError("Only readers can dequeue")``;
  role misuse in ``enqueue`` / ``acquire_*`` is an ``AssertionError``. A wait
  longer than ``VLLM_RINGBUFFER_WARNING_INTERVAL`` seconds (default 60) logs
  "No available shared memory broadcast block found in N seconds" once per
  interval (readers: unless ``indefinite``).

Where this module differs from the release (none of it on the measured
paths):

* The segment is named ``nodeipc-bench-vllm-<hex>`` and the ZMQ ipc sockets
  ``<tmp>/nodeipc-bench-vllm-<uuid>.sock``, so a leak is caught by the
  project's ``/dev/shm`` and ``/tmp/nodeipc-*`` checks (vLLM uses the
  default ``psm_*`` name and ``<tmp>/<uuid>``).
* Remote readers bind TCP on ``connect_ip`` or 127.0.0.1 (vLLM finds the
  host's address); they are supported but not benchmarked.
* No torch: no tensor reducer, no tensor arena, no
  ``create_from_process_group``; no cgroup memory check (the ``/dev/shm``
  free-space check is kept). The optional native spin-loop extension is
  not reproduced (off by default in vLLM too).
* ``close()`` releases the sockets and the segment at a known time (the
  creator also unlinks the segment and its ipc socket files, which libzmq
  leaves behind); ``__del__`` calls it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import secrets
import struct
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from multiprocessing import resource_tracker, shared_memory
from typing import Any, Iterator, List, Optional, Tuple

import zmq

logger = logging.getLogger(__name__)

#: The release whose behaviour this module follows.
VLLM_RELEASE = "0.33.0"

MIB = 1024 * 1024
DEFAULT_MAX_CHUNK_BYTES = 24 * MIB
DEFAULT_MAX_CHUNKS = 10
#: Pickle buffers at least this large travel out of band.
OOB_THRESHOLD = MIB
#: A reader spins this long after its last read before it idles on ZMQ.
BUSY_LOOP_S = 1.0
#: An idle reader re-checks the flags at least this often (a lost hint).
IDLE_WAIT_CAP_MS = 5000
#: While busy, a reader drops stale wake-up hints this often.
NOTIFY_DRAIN_S = 2.0

_NAME_PREFIX = "nodeipc-bench-vllm-"
_fence_lock = threading.Lock()


def _warning_interval() -> int:
    return int(os.environ.get("VLLM_RINGBUFFER_WARNING_INTERVAL", "60"))


def memory_fence() -> None:
    """A full barrier: taking and dropping a lock is an atomic
    read-modify-write, which orders the flag bytes around it."""
    _fence_lock.acquire()
    _fence_lock.release()


def _ipc_address() -> str:
    base = os.environ.get("VLLM_RPC_BASE_PATH", tempfile.gettempdir())
    return f"ipc://{base}/{_NAME_PREFIX}{uuid.uuid4().hex}.sock"


@contextlib.contextmanager
def _untracked() -> Iterator[None]:
    """Attaching to a segment must not make this process's resource tracker
    unlink it at exit (only its creator owns it)."""
    saved = resource_tracker.register
    resource_tracker.register = lambda *args, **kwargs: None
    try:
        yield
    finally:
        resource_tracker.register = saved


class ShmRingBuffer:
    """``max_chunks`` chunks then ``max_chunks`` metadata rows of
    ``1 + n_reader`` flag bytes, in one shared-memory segment."""

    def __init__(
        self,
        n_reader: int,
        max_chunk_bytes: int,
        max_chunks: int,
        name: Optional[str] = None,
    ) -> None:
        self.n_reader = n_reader
        self.metadata_size = 1 + n_reader
        self.max_chunk_bytes = max_chunk_bytes
        self.max_chunks = max_chunks
        self.total_bytes_of_buffer = (max_chunk_bytes + self.metadata_size) * max_chunks
        self.data_offset = 0
        self.metadata_offset = max_chunk_bytes * max_chunks
        self.is_creator = name is None
        if self.is_creator:
            free = os.statvfs("/dev/shm")
            available = free.f_bavail * free.f_frsize
            if available < self.total_bytes_of_buffer:
                raise RuntimeError(
                    f"Insufficient space in /dev/shm for a ring of "
                    f"{self.total_bytes_of_buffer} bytes ({available} available)"
                )
            self.shared_memory = shared_memory.SharedMemory(
                name=_NAME_PREFIX + secrets.token_hex(8),
                create=True,
                size=self.total_bytes_of_buffer,
            )
            with memoryview(self.shared_memory.buf) as whole:
                with whole[self.metadata_offset :] as metadata:
                    metadata[:] = bytes(len(metadata))
        else:
            try:
                with _untracked():
                    self.shared_memory = shared_memory.SharedMemory(name=name)
            except FileNotFoundError:
                # Unpickled where the segment does not exist (another node):
                # the object has no segment and must not be used.
                return
            assert self.shared_memory.size >= self.total_bytes_of_buffer

    def handle(self) -> Tuple[int, int, int, str]:
        return (self.n_reader, self.max_chunk_bytes, self.max_chunks, self.shared_memory.name)

    def __reduce__(self):
        return (self.__class__, self.handle())

    @contextlib.contextmanager
    def get_data(self, current_idx: int) -> Iterator[memoryview]:
        start = self.data_offset + current_idx * self.max_chunk_bytes
        with self.shared_memory.buf[start : start + self.max_chunk_bytes] as view:
            yield view

    @contextlib.contextmanager
    def get_metadata(self, current_idx: int) -> Iterator[memoryview]:
        start = self.metadata_offset + current_idx * self.metadata_size
        with self.shared_memory.buf[start : start + self.metadata_size] as view:
            yield view

    def close(self) -> None:
        segment = getattr(self, "shared_memory", None)
        if segment is None:
            return
        self.shared_memory = None
        segment.close()
        if self.is_creator:
            try:
                segment.unlink()
            except FileNotFoundError:
                pass

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # a destructor never raises
            pass


class SpinCondition:
    """How a reader waits: ``sched_yield`` while it has read within the
    last ``busy_loop_s``, else a ZMQ poll on the writer's notify socket
    and on an in-process cancel socket. The writer side only notifies."""

    def __init__(
        self,
        is_reader: bool,
        context: zmq.Context,
        notify_address: str,
        busy_loop_s: float = BUSY_LOOP_S,
    ) -> None:
        self.is_reader = is_reader
        self.busy_loop_s = busy_loop_s
        if is_reader:
            self.notify_socket = context.socket(zmq.SUB)
            self.notify_socket.setsockopt(zmq.CONFLATE, 1)
            self.notify_socket.setsockopt(zmq.SUBSCRIBE, b"")
            self.notify_socket.connect(notify_address)
            cancel_address = f"inproc://{uuid.uuid4()}"
            self.cancel_receiver = context.socket(zmq.PAIR)
            self.cancel_receiver.bind(cancel_address)
            self.cancel_sender = context.socket(zmq.PAIR)
            self.cancel_sender.connect(cancel_address)
            self.poller = zmq.Poller()
            self.poller.register(self.notify_socket, zmq.POLLIN)
            self.poller.register(self.cancel_receiver, zmq.POLLIN)
            now = time.monotonic()
            self.last_read = now
            self.last_drain = now
        else:
            self.notify_socket = context.socket(zmq.PUB)
            self.notify_socket.setsockopt(zmq.SNDHWM, 1)
            self.notify_socket.bind(notify_address)

    def record_read(self) -> None:
        now = time.monotonic()
        self.last_read = now
        if now - self.last_drain > NOTIFY_DRAIN_S:
            self.last_drain = now
            self._drain()

    def _drain(self) -> None:
        while True:
            try:
                self.notify_socket.recv(zmq.NOBLOCK)
            except zmq.Again:
                return

    def wait(self, timeout_ms: Optional[int]) -> None:
        if time.monotonic() - self.last_read <= self.busy_loop_s:
            os.sched_yield()
            return
        events = dict(self.poller.poll(timeout_ms))
        if self.notify_socket in events:
            try:
                self.notify_socket.recv(zmq.NOBLOCK)
            except zmq.Again:
                pass

    def notify(self) -> None:
        try:
            self.notify_socket.send(b"\x00", zmq.NOBLOCK)
        except zmq.Again:
            pass  # a hint; the flags are authoritative

    def cancel(self) -> None:
        self.cancel_sender.send(b"\x00")

    def sockets(self) -> List[zmq.Socket]:
        if self.is_reader:
            return [self.notify_socket, self.cancel_receiver, self.cancel_sender]
        return [self.notify_socket]


@dataclass
class Handle:
    """What a reader needs to join; plain and picklable."""

    local_reader_ranks: List[int] = field(default_factory=list)
    buffer_handle: Optional[Tuple[int, int, int, str]] = None
    local_subscribe_addr: Optional[str] = None
    local_notify_addr: Optional[str] = None
    remote_subscribe_addr: Optional[str] = None
    remote_addr_ipv6: bool = False


def _deadline_ms(start: float, timeout: Optional[float], next_warning: Optional[float]) -> int:
    """How long an idle wait may last: at most the cap, the next warning
    and what is left of ``timeout``; ``TimeoutError`` once it is spent."""
    wait_s = IDLE_WAIT_CAP_MS / 1000
    elapsed = time.monotonic() - start
    if timeout is not None:
        left = timeout - elapsed
        if left <= 0:
            raise TimeoutError()
        wait_s = min(wait_s, left)
    if next_warning is not None:
        wait_s = min(wait_s, max(0.0, next_warning - elapsed))
    return max(0, int(wait_s * 1000))


class MessageQueue:
    """One writer, ``n_reader`` readers: ``n_local_reader`` of them through
    the shared-memory ring, the rest over ZMQ TCP."""

    def __init__(
        self,
        n_reader: int,
        n_local_reader: int,
        local_reader_ranks: Optional[List[int]] = None,
        max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
        max_chunks: int = DEFAULT_MAX_CHUNKS,
        connect_ip: Optional[str] = None,
    ) -> None:
        if local_reader_ranks is None:
            local_reader_ranks = list(range(n_local_reader))
        else:
            assert len(local_reader_ranks) == n_local_reader
        self.n_local_reader = n_local_reader
        n_remote_reader = n_reader - n_local_reader
        self.n_remote_reader = n_remote_reader
        self._closed = False
        context = zmq.Context()
        self._context = context

        if n_local_reader > 0:
            self.buffer: Optional[ShmRingBuffer] = ShmRingBuffer(
                n_local_reader, max_chunk_bytes, max_chunks
            )
            self.local_socket: Optional[zmq.Socket] = context.socket(zmq.XPUB)
            self.local_socket.setsockopt(zmq.XPUB_VERBOSE, True)
            local_subscribe_addr: Optional[str] = _ipc_address()
            self.local_socket.bind(local_subscribe_addr)
            self.current_idx = 0
            local_notify_addr: Optional[str] = _ipc_address()
            self._spin: Optional[SpinCondition] = SpinCondition(
                False, context, local_notify_addr
            )
        else:
            self.buffer = None
            self.local_socket = None
            local_subscribe_addr = None
            local_notify_addr = None
            self.current_idx = -1
            self._spin = None

        remote_addr_ipv6 = False
        if n_remote_reader > 0:
            ip = connect_ip or "127.0.0.1"
            remote_addr_ipv6 = ":" in ip
            self.remote_socket: Optional[zmq.Socket] = context.socket(zmq.XPUB)
            self.remote_socket.setsockopt(zmq.XPUB_VERBOSE, True)
            if remote_addr_ipv6:
                self.remote_socket.setsockopt(zmq.IPV6, 1)
                self.remote_socket.bind(f"tcp://[{ip}]:0")
            else:
                self.remote_socket.bind(f"tcp://{ip}:0")
            remote_subscribe_addr: Optional[str] = self.remote_socket.getsockopt_string(
                zmq.LAST_ENDPOINT
            )
        else:
            self.remote_socket = None
            remote_subscribe_addr = None

        self._is_writer = True
        self._is_local_reader = False
        self._is_remote_reader = False
        self.local_reader_rank = -1
        self.shutting_down = False
        self.handle = Handle(
            local_reader_ranks=local_reader_ranks,
            buffer_handle=self.buffer.handle() if self.buffer is not None else None,
            local_subscribe_addr=local_subscribe_addr,
            local_notify_addr=local_notify_addr,
            remote_subscribe_addr=remote_subscribe_addr,
            remote_addr_ipv6=remote_addr_ipv6,
        )
        logger.debug("message queue handle: %s", self.handle)

    def export_handle(self) -> Handle:
        return self.handle

    @staticmethod
    def create_from_handle(handle: Handle, rank: int) -> "MessageQueue":
        self = MessageQueue.__new__(MessageQueue)
        self.handle = handle
        self._is_writer = False
        self._closed = False
        self.shutting_down = False
        context = zmq.Context()
        self._context = context
        if rank in handle.local_reader_ranks:
            assert handle.buffer_handle is not None
            self.buffer = ShmRingBuffer(*handle.buffer_handle)
            self.current_idx = 0
            self.local_reader_rank = handle.local_reader_ranks.index(rank)
            self._is_local_reader = True
            self._is_remote_reader = False
            self.local_socket = context.socket(zmq.SUB)
            self.local_socket.setsockopt(zmq.SUBSCRIBE, b"")
            self.local_socket.connect(handle.local_subscribe_addr)
            self.remote_socket = None
            self._spin = SpinCondition(True, context, handle.local_notify_addr)
        else:
            assert handle.remote_subscribe_addr is not None, (
                f"rank {rank} is not a local reader and the queue has no remote readers"
            )
            self.buffer = None
            self.current_idx = -1
            self.local_reader_rank = -1
            self._is_local_reader = False
            self._is_remote_reader = True
            self.local_socket = None
            self._spin = None
            self.remote_socket = context.socket(zmq.SUB)
            self.remote_socket.setsockopt(zmq.SUBSCRIBE, b"")
            if handle.remote_addr_ipv6:
                self.remote_socket.setsockopt(zmq.IPV6, 1)
            self.remote_socket.connect(handle.remote_subscribe_addr)
        return self

    def wait_until_ready(self) -> None:
        """The start-up handshake: the writer waits for every reader's
        subscription, then says READY; each reader waits for READY."""
        if self._is_writer:
            if self.n_local_reader > 0:
                for _ in range(self.n_local_reader):
                    self.local_socket.recv()
                self.local_socket.send(b"READY")
            if self.n_remote_reader > 0:
                for _ in range(self.n_remote_reader):
                    self.remote_socket.recv()
                self.remote_socket.send(b"READY")
        elif self._is_local_reader:
            received = self.local_socket.recv()
            assert received == b"READY"
        elif self._is_remote_reader:
            received = self.remote_socket.recv()
            assert received == b"READY"

    @contextlib.contextmanager
    def acquire_write(self, timeout: Optional[float] = None) -> Iterator[memoryview]:
        assert self._is_writer, "Only writers can acquire write"
        start = time.monotonic()
        n_warning = 1
        interval = _warning_interval()
        while True:
            with self.buffer.get_metadata(self.current_idx) as metadata:
                written = metadata[0]
                read_count = sum(metadata[1:])
                if written and read_count != self.buffer.n_reader:
                    # Not yet read by everyone: wait.
                    os.sched_yield()
                    elapsed = time.monotonic() - start
                    if timeout is not None and elapsed > timeout:
                        raise TimeoutError()
                    if elapsed > interval * n_warning:
                        logger.info(
                            "No available shared memory broadcast block found in %d "
                            "seconds. This typically happens when some processes are "
                            "hanging or doing some time-consuming work (e.g. compilation)",
                            interval,
                        )
                        n_warning += 1
                    continue
                metadata[0] = 0
                memory_fence()
                with self.buffer.get_data(self.current_idx) as buf:
                    yield buf
                for i in range(1, self.buffer.n_reader + 1):
                    metadata[i] = 0
                memory_fence()
                metadata[0] = 1
                memory_fence()
                self.current_idx = (self.current_idx + 1) % self.buffer.max_chunks
                self._spin.notify()
                break

    @contextlib.contextmanager
    def acquire_read(
        self, timeout: Optional[float] = None, indefinite: bool = False
    ) -> Iterator[memoryview]:
        assert self._is_local_reader, "Only readers can acquire read"
        start = time.monotonic()
        n_warning = 1
        own = self.local_reader_rank + 1
        interval = _warning_interval()
        while True:
            with self.buffer.get_metadata(self.current_idx) as metadata:
                written = metadata[0]
                read = metadata[own]
                if not written or read:
                    next_warning = None if indefinite else interval * n_warning
                    self._spin.wait(_deadline_ms(start, timeout, next_warning))
                    if self.shutting_down:
                        raise RuntimeError("cancelled")
                    elapsed = time.monotonic() - start
                    if not indefinite and elapsed > interval * n_warning:
                        logger.info(
                            "No available shared memory broadcast block found in %d "
                            "seconds. This typically happens when some processes are "
                            "hanging or doing some time-consuming work (e.g. compilation).",
                            interval,
                        )
                        n_warning += 1
                    if timeout is not None and elapsed > timeout:
                        raise TimeoutError()
                    continue
                memory_fence()
                try:
                    with self.buffer.get_data(self.current_idx) as buf:
                        yield buf
                finally:
                    # The slot is consumed even if the caller's block raised.
                    metadata[own] = 1
                    memory_fence()
                    self.current_idx = (self.current_idx + 1) % self.buffer.max_chunks
                    self._spin.record_read()
                break

    def enqueue(self, obj: Any, timeout: Optional[float] = None) -> None:
        assert self._is_writer, "Only writers can enqueue"
        buffers: List[Any] = [None]

        def out_of_band(buffer: pickle.PickleBuffer) -> bool:
            raw = buffer.raw()
            if raw.nbytes < OOB_THRESHOLD:
                return True  # in band
            buffers.append(raw)
            return False

        main = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL, buffer_callback=out_of_band)
        buffers[0] = main
        if self.n_local_reader > 0:
            total = 6 + sum(memoryview(b).nbytes + 4 for b in buffers[1:])
            if total + len(main) >= self.buffer.max_chunk_bytes:
                with self.acquire_write(timeout) as buf:
                    buf[0] = 1  # overflow: the bytes follow on the socket
                self.local_socket.send_multipart(buffers, copy=False)
            else:
                with self.acquire_write(timeout) as buf:
                    buf[0] = 0
                    struct.pack_into(">H", buf, 1, len(buffers))
                    offset = 3
                    for part in buffers:
                        with memoryview(part) as view, view.cast("B") as flat:
                            size = flat.nbytes
                            struct.pack_into(">I", buf, offset, size)
                            offset += 4
                            buf[offset : offset + size] = flat
                            offset += size
        if self.n_remote_reader > 0:
            self.remote_socket.send_multipart(buffers, copy=False)

    def dequeue(self, timeout: Optional[float] = None, indefinite: bool = False) -> Any:
        if self._is_local_reader:
            overflow = False
            with self.acquire_read(timeout, indefinite) as buf:
                if buf[0] == 1:
                    overflow = True
                else:
                    obj = _loads_from_chunk(buf)
            if overflow:
                obj = MessageQueue.recv(self.local_socket, timeout)
        elif self._is_remote_reader:
            obj = MessageQueue.recv(self.remote_socket, timeout)
        else:
            raise RuntimeError("Only readers can dequeue")
        return obj

    @staticmethod
    def recv(socket: zmq.Socket, timeout: Optional[float]) -> Any:
        timeout_ms = None if timeout is None else max(0, int(timeout * 1000))
        if not socket.poll(timeout=timeout_ms):
            raise TimeoutError()
        frames = socket.recv_multipart(copy=False)
        return pickle.loads(frames[0].buffer, buffers=[f.buffer for f in frames[1:]])

    def broadcast_object(self, obj: Any = None) -> Any:
        if self._is_writer:
            self.enqueue(obj)
            return obj
        return self.dequeue()

    def shutdown(self) -> None:
        """Wakes a reader blocked in ``dequeue``, which then raises
        ``RuntimeError("cancelled")``."""
        self.shutting_down = True
        if self._is_local_reader and self._spin is not None:
            self._spin.cancel()

    def close(self) -> None:
        """Closes the sockets and the segment (the writer also unlinks it)."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        sockets = [self.local_socket, self.remote_socket]
        if self._spin is not None:
            sockets.extend(self._spin.sockets())
        for socket in sockets:
            if socket is not None:
                socket.close(linger=0)
        self._context.term()
        if self._is_writer:
            # libzmq leaves the ipc socket files of a closed socket in place.
            for address in (self.handle.local_subscribe_addr, self.handle.local_notify_addr):
                if address is not None:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(address[len("ipc://") :])
        if self.buffer is not None:
            self.buffer.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # a destructor never raises
            pass


def _loads_from_chunk(buf: memoryview) -> Any:
    """Unpickles ``[0][count][len][main]([len][oob])*`` from a chunk; the
    out-of-band buffers are copied out (the slot is reused once read)."""
    (count,) = struct.unpack_from(">H", buf, 1)
    offset = 3
    main = None
    oob: List[bytearray] = []
    for i in range(count):
        (size,) = struct.unpack_from(">I", buf, offset)
        offset += 4
        if i == 0:
            main = buf[offset : offset + size]
        else:
            oob.append(bytearray(buf[offset : offset + size]))
        offset += size
    try:
        return pickle.loads(main, buffers=oob)
    finally:
        main.release()
