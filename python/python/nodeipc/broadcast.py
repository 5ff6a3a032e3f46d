"""vLLM's ``MessageQueue`` on nodeipc's broadcast ring.

``nodeipc.broadcast.MessageQueue`` has the public API and meanings of
``MessageQueue`` in ``vllm/distributed/device_communicators/shm_broadcast.py``
as of **vLLM 0.33.0** (the release this module follows), with the ``cancel``
argument of the 0.10–0.17 releases kept as an optional argument. A worker
loop written for vLLM's queue runs on this one with only the import changed.

The ring underneath is Rust (``nodeipc_channel::broadcast``): waits spin
briefly, then park on a futex, so an idle reader costs no CPU and wakes
within microseconds of the next ``enqueue``; a writer whose ring stays full
names the readers that are behind; a dead reader or writer is named within
a second. This module only pickles.

Where it differs from vLLM, and why:

* **Remote readers are not supported yet** (``n_reader > n_local_reader``
  is refused): they need an authenticated transport.
* **Objects of any size go through shared memory.** One larger than a
  chunk streams through the chunks into the reader's own memory; there is
  no ZMQ socket (and no ``local_subscribe_addr`` / ``local_notify_addr`` in
  the handle: both are ``None``).
* **The handle names a 0600 region** that the writer removes once
  ``wait_until_ready`` has seen every reader join, so nothing is left in
  ``/dev/shm`` after a crash past start-up. ``wait_until_ready`` is bounded
  (``timeout``, 300 s by default) where vLLM's blocks forever.
* **Out-of-band pickle buffers** (protocol 5, buffers of 1 MiB and more, as
  vLLM) are copied into the reader's memory before unpickling, as vLLM
  0.33 does; the message's bytes are the reader's own copy, never a view of
  the ring.
* **Errors**: a wait past its ``timeout`` raises ``nodeipc.TimeoutError``,
  a subclass of the builtin ``TimeoutError`` vLLM raises, whose message
  names the readers behind; a dead peer raises ``nodeipc.PeerDiedError``
  where vLLM would wait forever.
* ``acquire_write`` lends a whole chunk (``max_chunk_bytes``) as vLLM does;
  the reader's ``acquire_read`` sees its own copy of it.
* No torch tensor reducer and no tensor arena: tensors pickle as torch
  pickles them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import pickle
import struct
import threading
import time
import uuid
from typing import Any, Iterator, List, Optional, Tuple

from . import _native
from ._errors import NodeipcError

__all__ = ["Handle", "MessageQueue", "VLLM_RELEASE"]

#: The vLLM release whose ``shm_broadcast.py`` this module follows.
VLLM_RELEASE = "0.33.0"

logger = logging.getLogger(__name__)

#: Pickle buffers smaller than this stay in band (vLLM's threshold).
_OOB_MIN = 1024 * 1024
#: How often a blocked ``dequeue`` looks at a ``cancel`` event.
_CANCEL_SLICE = 0.2
#: ``wait_until_ready``'s default bound, in seconds.
READY_TIMEOUT = 300.0
_HEADER = struct.Struct("<I")
_LEN = struct.Struct("<Q")
#: The most buffers one message may carry (a bound on what a reader parses).
_MAX_BUFFERS = 1 << 20


def _warning_interval() -> float:
    try:
        return float(os.environ.get("VLLM_RINGBUFFER_WARNING_INTERVAL", "60"))
    except ValueError:
        return 60.0


@dataclasses.dataclass
class Handle:
    """What a reader needs to join: picklable, no descriptor in it.

    ``buffer_handle`` is ``(n_reader, max_chunk_bytes, max_chunks, name)``
    as in vLLM; the socket addresses are always ``None``.
    """

    local_reader_ranks: List[int] = dataclasses.field(default_factory=list)
    buffer_handle: Optional[Tuple[int, int, int, str]] = None
    local_subscribe_addr: Optional[str] = None
    local_notify_addr: Optional[str] = None
    remote_subscribe_addr: Optional[str] = None
    remote_addr_ipv6: bool = False


def _remote_refused(what: str) -> NotImplementedError:
    return NotImplementedError(
        f"{what}: remote readers are not supported yet (readers on other nodes "
        "need an authenticated transport, which comes later)"
    )


class MessageQueue:
    """One writer, ``n_reader`` readers, every object to every reader in order."""

    def __init__(
        self,
        n_reader: int,
        n_local_reader: int,
        local_reader_ranks: Optional[List[int]] = None,
        max_chunk_bytes: int = 1024 * 1024 * 24,
        max_chunks: int = 10,
        connect_ip: Optional[str] = None,
        *,
        name: Optional[str] = None,
    ) -> None:
        if n_reader > n_local_reader:
            raise _remote_refused(
                f"MessageQueue(n_reader={n_reader}, n_local_reader={n_local_reader})"
            )
        if n_local_reader < 1:
            raise ValueError(f"a MessageQueue needs at least one reader, not {n_local_reader}")
        if local_reader_ranks is None:
            local_reader_ranks = list(range(n_local_reader))
        else:
            assert len(local_reader_ranks) == n_local_reader
        self.n_reader = n_reader
        self.n_local_reader = n_local_reader
        self._max_chunk_bytes = max_chunk_bytes
        name = name or f"/nodeipc-mq-{os.getpid()}-{uuid.uuid4().hex[:16]}"
        self._ring = (n_local_reader, max_chunk_bytes, max_chunks, name)
        self._writer: Optional[_native.BroadcastWriter] = _native.BroadcastWriter(
            name, n_local_reader, max_chunk_bytes, max_chunks
        )
        self._reader: Optional[_native.BroadcastReader] = None
        self.handle = Handle(
            local_reader_ranks=list(local_reader_ranks),
            buffer_handle=(n_local_reader, max_chunk_bytes, max_chunks, name),
        )
        self._is_writer = True
        self._is_local_reader = False
        self._is_remote_reader = False
        self.local_reader_rank = -1
        self.shutting_down = False

    # -- roles ---------------------------------------------------------

    def export_handle(self) -> Handle:
        """The handle readers join with (pass it to them pickled)."""
        return self.handle

    @staticmethod
    def create_from_handle(
        handle: Handle, rank: int, *, join_wait: float = 30.0
    ) -> "MessageQueue":
        """A reader: ``rank`` must be one of ``handle.local_reader_ranks``."""
        if rank not in handle.local_reader_ranks or handle.buffer_handle is None:
            raise _remote_refused(f"MessageQueue.create_from_handle(rank={rank})")
        n, chunk_bytes, chunks, name = handle.buffer_handle
        self = MessageQueue.__new__(MessageQueue)
        self._ring = (n, chunk_bytes, chunks, name)
        self.n_reader = len(handle.local_reader_ranks)
        self.n_local_reader = n
        self._max_chunk_bytes = chunk_bytes
        self.handle = handle
        self.local_reader_rank = handle.local_reader_ranks.index(rank)
        self._writer = None
        self._reader = _native.BroadcastReader(
            name, n, chunk_bytes, chunks, self.local_reader_rank, join_wait
        )
        self._is_writer = False
        self._is_local_reader = True
        self._is_remote_reader = False
        self.shutting_down = False
        return self

    def wait_until_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Writer: waits until every reader joined, then removes the ring's
        name. Reader: waits until the writer has seen everyone join.
        Bounded by ``timeout`` seconds (vLLM's waits forever)."""
        if self._is_writer:
            self._w().wait_until_ready(timeout)
        else:
            self._r().wait_until_ready(timeout)

    def _w(self) -> _native.BroadcastWriter:
        assert self._writer is not None, "Only writers can enqueue"
        return self._writer

    def _r(self) -> _native.BroadcastReader:
        if self._reader is None:
            raise RuntimeError("Only readers can dequeue")
        return self._reader

    # -- writing -------------------------------------------------------

    def enqueue(self, obj: Any, timeout: Optional[float] = None) -> None:
        """Pickles ``obj`` (protocol 5, buffers of 1 MiB and more out of
        band) and sends it to every reader; ``TimeoutError`` naming the
        readers behind when there is no room within ``timeout`` seconds."""
        assert self._is_writer, "Only writers can enqueue"
        oob: List[memoryview] = []

        def keep(buffer: pickle.PickleBuffer) -> bool:
            raw = buffer.raw()
            if raw.nbytes < _OOB_MIN:
                return True
            oob.append(raw)
            return False

        main = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL, buffer_callback=keep)
        lengths = [len(main)] + [b.nbytes for b in oob]
        header = _HEADER.pack(len(lengths)) + b"".join(_LEN.pack(n) for n in lengths)
        self._send([header, main, *oob], timeout)

    def _send(self, parts: List[Any], timeout: Optional[float]) -> None:
        total = sum(memoryview(p).nbytes for p in parts)
        interval = _warning_interval()
        start = time.monotonic()
        ring = self._ring[1] * self._ring[2]
        # A message the ring holds whole is written only once it has room, so
        # a wait may be cut into slices (for the warning) without harm; a
        # larger one streams and gets the whole wait at once.
        while True:
            left = None if timeout is None else timeout - (time.monotonic() - start)
            if total > ring or interval <= 0:
                self._w().send_parts(parts, None if left is None else max(left, 0.0))
                return
            step = interval if left is None else max(min(interval, left), 0.0)
            try:
                self._w().send_parts(parts, step)
                return
            except TimeoutError as e:
                if left is not None and left <= step:
                    raise
                logger.info(
                    "No available shared memory broadcast block found in %d seconds. "
                    "This typically happens when some processes are hanging or doing "
                    "some time-consuming work (e.g. compilation, weight/kv cache "
                    "quantization). %s",
                    interval,
                    e,
                )

    @contextlib.contextmanager
    def acquire_write(self, timeout: Optional[float] = None) -> Iterator[memoryview]:
        """A writable view of the next chunk (``max_chunk_bytes``), sent to
        every reader when the block ends without an exception."""
        assert self._is_writer, "Only writers can acquire write"
        loan = self._w().begin_loan(self._max_chunk_bytes, timeout)
        view = memoryview(loan)
        sent = False
        try:
            yield view
            sent = True
        finally:
            view.release()
            if sent:
                loan.commit()
            else:
                loan.abort()

    def broadcast_object(self, obj: Any = None) -> Any:
        """Writer: sends ``obj`` and returns it. Reader: returns the next object."""
        if self._is_writer:
            self.enqueue(obj)
            return obj
        return self.dequeue()

    # -- reading -------------------------------------------------------

    def _recv(
        self, timeout: Optional[float], cancel: Optional[threading.Event], indefinite: bool
    ) -> _native.BroadcastMessage:
        interval = _warning_interval()
        start = time.monotonic()
        next_warning = start + interval
        while True:
            if self.shutting_down or (cancel is not None and cancel.is_set()):
                # What is there already is still handed out, as vLLM's
                # readers look at the ring before they look at the flag.
                try:
                    ready = self._r().recv(0.0)
                except NodeipcError:
                    ready = None
                if ready is not None:
                    return ready
                raise RuntimeError("cancelled")
            # One wait in Rust (parked on a futex, woken by the writer),
            # cut only where Python has something to do: the timeout, the
            # long-wait message, a `cancel` event to look at.
            now = time.monotonic()
            ends = []
            if timeout is not None:
                # The first look happens even with no time left (vLLM takes
                # a ready slot with timeout 0).
                ends.append(max(timeout - (now - start), 0.0))
            if not indefinite and interval > 0:
                ends.append(max(next_warning - now, 0.0))
            if cancel is not None:
                ends.append(_CANCEL_SLICE)
            try:
                message = self._r().recv(min(ends) if ends else None)
            except NodeipcError:
                if self.shutting_down:
                    raise RuntimeError("cancelled") from None
                raise
            if message is not None:
                return message
            now = time.monotonic()
            if timeout is not None and now - start >= timeout:
                raise _native_timeout(self, timeout)
            if not indefinite and interval > 0 and now >= next_warning:
                logger.info(
                    "No available shared memory broadcast block found in %d seconds. "
                    "This typically happens when some processes are hanging or doing "
                    "some time-consuming work (e.g. compilation, weight/kv cache "
                    "quantization).",
                    interval,
                )
                next_warning += interval

    def dequeue(
        self,
        timeout: Optional[float] = None,
        cancel: Optional[threading.Event] = None,
        indefinite: bool = False,
    ) -> Any:
        """The next object. ``TimeoutError`` past ``timeout`` seconds;
        ``RuntimeError("cancelled")`` once ``cancel`` is set or after
        ``shutdown()``; ``indefinite`` silences the long-wait message."""
        if not self._is_local_reader:
            raise RuntimeError("Only readers can dequeue")
        return _unpickle(self._recv(timeout, cancel, indefinite))

    @contextlib.contextmanager
    def acquire_read(
        self,
        timeout: Optional[float] = None,
        cancel: Optional[threading.Event] = None,
        indefinite: bool = False,
    ) -> Iterator[memoryview]:
        """A read-only view of the next message (this reader's own copy),
        released when the block ends."""
        assert self._is_local_reader, "Only readers can acquire read"
        view = memoryview(self._recv(timeout, cancel, indefinite))
        try:
            yield view
        finally:
            view.release()

    # -- the rest ------------------------------------------------------

    def shutdown(self) -> None:
        """Ends waits: a reader blocked in ``dequeue`` (in any thread)
        raises ``RuntimeError("cancelled")`` within 50 ms."""
        self.shutting_down = True
        if self._reader is not None:
            self._reader.stop()

    def close(self) -> None:
        """Leaves the ring now (a writer closes it: readers read what was
        sent, then get ``PeerDiedError``)."""
        for end in (self._writer, self._reader):
            if end is not None:
                end.close()

    @staticmethod
    def create_from_process_group(
        pg: Any,
        max_chunk_bytes: int,
        max_chunks: int,
        writer_rank: int = 0,
        external_writer_handle: Optional[Handle] = None,
        blocking: bool = True,
    ) -> "MessageQueue":
        """As vLLM's, over a group with ``rank``, ``world_size`` and
        ``broadcast_obj(obj, src)`` (vLLM's ``StatelessProcessGroup``), or a
        torch ``ProcessGroup`` when torch is installed. Every rank is taken
        to be on this node."""
        if all(hasattr(pg, a) for a in ("rank", "world_size", "broadcast_obj")):
            rank, world = pg.rank, pg.world_size

            def share(handle: Optional[Handle]) -> Handle:
                shared: Handle = pg.broadcast_obj(handle, writer_rank)
                return shared

        else:
            try:
                import torch.distributed as dist  # type: ignore[import-not-found]
            except ImportError:
                raise RuntimeError(
                    "MessageQueue.create_from_process_group: a torch ProcessGroup "
                    "needs torch, which is not installed (pass a group with rank, "
                    "world_size and broadcast_obj instead)"
                ) from None
            rank, world = dist.get_rank(pg), dist.get_world_size(pg)
            ranks = dist.get_process_group_ranks(pg)

            def share(handle: Optional[Handle]) -> Handle:
                box = [handle]
                dist.broadcast_object_list(box, src=ranks[writer_rank], group=pg)
                assert box[0] is not None
                return box[0]

        if external_writer_handle is not None:
            queue = MessageQueue.create_from_handle(external_writer_handle, rank)
        elif rank == writer_rank:
            readers = [r for r in range(world) if r != writer_rank]
            queue = MessageQueue(
                world - 1, world - 1, readers, max_chunk_bytes, max_chunks
            )
            share(queue.export_handle())
        else:
            queue = MessageQueue.create_from_handle(share(None), rank)
        if blocking:
            queue.wait_until_ready()
        return queue


def _native_timeout(queue: MessageQueue, timeout: float) -> TimeoutError:
    from ._errors import TimeoutError as NodeipcTimeout

    return NodeipcTimeout(
        f"broadcast ring {queue._ring[3]}: reader "
        f"{queue.local_reader_rank} got no message within {timeout} s"
    )


def _unpickle(message: Any) -> Any:
    """The object in ``message`` (the reader's own bytes): its header
    checked, its out-of-band buffers views of those bytes."""
    view = memoryview(message)
    size = view.nbytes
    if size < _HEADER.size:
        raise ValueError(f"a broadcast message of {size} bytes has no header")
    (count,) = _HEADER.unpack_from(view, 0)
    if count < 1 or count > _MAX_BUFFERS:
        raise ValueError(f"a broadcast message claims {count} buffers")
    at = _HEADER.size + count * _LEN.size
    if at > size:
        raise ValueError(f"a broadcast message's header ({at} bytes) is longer than it ({size})")
    buffers = []
    for i in range(count):
        (n,) = _LEN.unpack_from(view, _HEADER.size + i * _LEN.size)
        if n > size - at:
            raise ValueError(f"buffer {i} of a broadcast message claims {n} bytes past its end")
        buffers.append(view[at : at + n])
        at += n
    return pickle.loads(buffers[0], buffers=buffers[1:])
