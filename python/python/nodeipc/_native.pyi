"""Type stubs of the extension module ``nodeipc._native`` (re-exported by
``nodeipc``). Timeouts are seconds; ``None`` waits without limit, and every
wait can be interrupted by Ctrl-C (``KeyboardInterrupt``)."""

from types import TracebackType
from typing import Dict, List, Optional, Type, final

from typing_extensions import Buffer, Self

#: How often a parked wait runs Python's signal handlers, at least (seconds).
SLICE_SECONDS: float
#: The serialized FileDescriptorProto of each .proto file of the contract.
FILE_DESCRIPTORS: Dict[str, bytes]

@final
class Region(Buffer):
    """A mapped shared-memory region; its buffer is writable shared memory
    (``memoryview(region)``, ``numpy.frombuffer(region, dtype)``,
    ``torch.frombuffer(region, dtype=...)``), seen without a copy."""

    @staticmethod
    def create(name: str, size: int) -> Region:
        """Creates ``name`` (``/nodeipc-...``), exclusive, mode 0600; the
        name is removed when this object goes unless ``persist()``."""
    @staticmethod
    def open(name: str, min_size: int = 0, timeout: Optional[float] = 0.0) -> Region:
        """Opens ``name`` (ours, mode 0600, at least ``min_size`` bytes),
        waiting up to ``timeout`` seconds for it (0: look once)."""
    @staticmethod
    def anonymous(size: int) -> Region:
        """An unnamed region (memfd) to pass by descriptor."""
    @staticmethod
    def from_fd(fd: int) -> Region:
        """Maps the region behind ``fd``; the caller keeps (and closes) ``fd``."""
    @property
    def name(self) -> Optional[str]: ...
    @property
    def size(self) -> int: ...
    @property
    def sealed(self) -> bool:
        """Whether the size is sealed (``seal()``)."""
    def __len__(self) -> int: ...
    def fileno(self) -> int:
        """The region's own descriptor: pass it on, do not close it."""
    def seal(self) -> None:
        """Forbids growing or shrinking it (memfd only)."""
    def unlink(self) -> None:
        """Removes the name now; every mapping lives on."""
    def persist(self) -> None:
        """Keeps the name after this object goes."""
    def read(self, offset: int, length: int) -> bytes:
        """A copy of ``length`` bytes at ``offset``."""
    def write(self, offset: int, data: bytes) -> None:
        """Copies ``data`` to ``offset``."""
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        kind: Optional[Type[BaseException]],
        value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool:
        """Unlinks the name of a region ``create`` made."""

@final
class NamedSemaphore:
    """A POSIX named semaphore in glibc's layout (``sem_open`` peers share it)."""

    @staticmethod
    def create(name: str, value: int = 0) -> NamedSemaphore: ...
    @staticmethod
    def open(name: str, timeout: Optional[float] = 0.0) -> NamedSemaphore: ...
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> int: ...
    def post(self) -> None: ...
    def try_wait(self) -> bool: ...
    def wait(self, timeout: Optional[float] = None) -> None:
        """Raises ``nodeipc.TimeoutError`` when ``timeout`` runs out."""
    def unlink(self) -> None: ...
    def persist(self) -> None: ...

@final
class ShmSemaphore:
    """A futex semaphore at ``offset`` of ``region`` (``SIZE`` bytes,
    4-aligned); ``initial`` sets its count (once, before peers use it)."""

    SIZE: int
    def __new__(cls, region: Region, offset: int = 0, initial: Optional[int] = None) -> Self: ...
    @property
    def value(self) -> int: ...
    def post(self) -> None: ...
    def try_wait(self) -> bool: ...
    def wait(self, timeout: Optional[float] = None) -> None: ...

@final
class Group:
    """One rank of a group of processes meeting by ``name``; the constructor
    joins (waiting up to ``timeout`` for every rank). Collective calls take
    the group's timeout unless given ``timeout=``; a timed-out or
    interrupted collective poisons the group (peers get ``PeerDiedError``)."""

    def __new__(
        cls,
        name: str,
        rank: int,
        size: int,
        timeout: Optional[float] = 60.0,
        slot_size: int = 64,
        transport: str = "auto",
    ) -> Self:
        """``transport``: "auto", "pidfd" or "scm_rights"."""
    @property
    def name(self) -> str: ...
    @property
    def rank(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def slot_size(self) -> int: ...
    @property
    def transport(self) -> str: ...
    @property
    def left(self) -> bool: ...
    def pids(self) -> List[int]: ...
    def barrier(self, *, timeout: Optional[float] = ...) -> None: ...
    def all_gather(self, data: bytes, *, timeout: Optional[float] = ...) -> List[bytes]: ...
    def broadcast(self, data: bytes, root: int, *, timeout: Optional[float] = ...) -> bytes: ...
    def exchange_fds(self, fd: int, *, timeout: Optional[float] = ...) -> List[Optional[int]]:
        """New descriptors (the caller's to close) by rank; ours is None."""
    def broadcast_fd(self, fd: Optional[int], root: int, *, timeout: Optional[float] = ...) -> int:
        """A new descriptor for ``root``'s ``fd`` (others pass None)."""
    def leave(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        kind: Optional[Type[BaseException]],
        value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool: ...

@final
class MonitorConnection:
    """A rank's connection to its monitor (``RankMonitorClient`` uses it)."""

    def __new__(cls, path: str, timeout: float = 10.0) -> Self: ...
    def attach_estimator(self, safety_factor: float, min_samples: int, smoothing: float = 0.5) -> None: ...
    def init(self, global_rank: int, local_rank: int, want_region: bool = True) -> Dict[str, object]: ...
    @property
    def has_heartbeat_region(self) -> bool: ...
    @property
    def closed(self) -> bool: ...
    def heartbeat(self) -> None: ...
    def heartbeat_socket(self) -> None: ...
    def start_section(self, name: str) -> None: ...
    def end_section(self, name: str) -> None: ...
    def end_all_sections(self) -> None: ...
    def send_timeouts(
        self,
        initial_heartbeat: Optional[float] = None,
        heartbeat: Optional[float] = None,
        out_of_section: Optional[float] = None,
        sections: Optional[Dict[str, float]] = None,
    ) -> Dict[str, object]: ...
    def propose(self) -> Optional[Dict[str, object]]: ...
    def propose_sections(self) -> Dict[str, object]: ...
    def heartbeat_samples(self) -> int: ...
    def section_samples(self, section: str) -> int: ...
    def status(self) -> Dict[str, object]: ...
    def workload_control(self, action: int, description: str) -> None: ...
    def close(self) -> None: ...

@final
class TimeoutsCalc:
    """nvidia-resiliency-ext's timeout calculation (``nodeipc.fault_tolerance``
    uses it); timeouts cross as a state dict's JSON."""

    def __new__(cls, sections: List[str], safety_factor: float) -> Self: ...
    def knows(self, name: str) -> bool: ...
    def heartbeat(self) -> None: ...
    def open(self, name: str) -> None: ...
    def close(self, name: str) -> None: ...
    def close_all(self) -> None: ...
    def bump_out_of_section(self) -> None: ...
    def maxima(self) -> List[float]: ...
    def merge_maxima(self, other: List[float]) -> None: ...
    def heartbeat_timeouts(self, current: str) -> Optional[str]: ...
    def section_timeouts(
        self, current: str, selected: Optional[List[str]], out_of_section: bool
    ) -> Optional[str]: ...

def nvrx_state_load(json: str) -> str:
    """A state dict's JSON in any earlier form, in NVRx 0.3 onward's."""

def nvrx_state_dict(current: str) -> str:
    """What ``state_dict()`` keeps of the timeouts in force."""

def nvrx_yaml(text: str) -> str:
    """A nvidia-resiliency-ext configuration file's text as JSON."""

@final
class Coordinator:
    """The coordinator's end of an execute channel over anonymous regions
    (see :mod:`nodeipc.channel`). Calls not given ``timeout=`` take the
    channel's ``timeout``; ``timeout=None`` waits without limit."""

    def __new__(
        cls,
        name: str,
        workers: int,
        request_capacity: int = 65536,
        response_size: int = 16384,
        depth: int = 1,
        timeout: Optional[float] = 30.0,
    ) -> Self: ...
    @property
    def name(self) -> str: ...
    def serve(self, socket_path: str) -> None:
        """Serves the logon handshake at ``socket_path`` (its directory ours, 0700)."""
    def wait_for_workers(self, timeout: Optional[float] = 30.0) -> None: ...
    def stop_serving(self) -> None: ...
    def send(self, data: bytes, *, timeout: Optional[float] = ...) -> int:
        """Broadcasts ``data``; returns the request's index (0, 1, ...)."""
    def recv_all(self, *, timeout: Optional[float] = ...) -> List[bytes]:
        """Every worker's answer to the oldest request not yet gathered."""
    def recv_first(self) -> tuple[int, bytes]:
        """The first answer to arrive, with its worker's rank."""
    def drain(self) -> int: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        kind: Optional[Type[BaseException]],
        value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool: ...

@final
class Worker:
    """A worker's end of an execute channel (see :mod:`nodeipc.channel`)."""

    @staticmethod
    def connect(socket_path: str, rank: int, timeout: Optional[float] = 30.0) -> Worker:
        """Logs on through the coordinator's handshake as ``rank``."""
    @property
    def rank(self) -> int: ...
    @property
    def name(self) -> str: ...
    def recv(self, *, timeout: Optional[float] = ...) -> bytes:
        """The next request; ``PeerDiedError`` once the coordinator closed
        the channel (after every request sent before) or died."""
    def respond(self, data: bytes) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        kind: Optional[Type[BaseException]],
        value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool: ...

@final
class BroadcastWriter:
    """The writer of a broadcast ring (see :mod:`nodeipc.broadcast`)."""

    def __new__(cls, name: str, readers: int, chunk_bytes: int, chunks: int) -> Self: ...
    def wait_until_ready(self, timeout: float) -> None:
        """Waits until every reader joined, then removes the ring's name."""
    def send_parts(self, parts: List[Buffer], timeout: Optional[float] = None) -> int:
        """Sends the parts' bytes as one message; ``TimeoutError`` naming the
        readers behind, ``PeerDiedError`` for a dead or departed reader."""
    def begin_loan(self, len: int, timeout: Optional[float] = None) -> BroadcastLoan:
        """Lends the next chunk's first ``len`` bytes."""
    def drop_reader(self, rank: int) -> None: ...
    def behind(self) -> List[tuple[int, int, int, int]]:
        """``(rank, pid, messages, chunks)`` of each reader behind."""
    @property
    def sent(self) -> int: ...
    @property
    def name(self) -> str: ...
    def close(self) -> None: ...

@final
class BroadcastLoan(Buffer):
    """A chunk lent to write one message in place; its buffer is writable
    until ``commit()`` or ``abort()``, both refused while a view lives."""

    def commit(self) -> Optional[int]: ...
    def abort(self) -> None: ...
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __release_buffer__(self, buffer: memoryview, /) -> None: ...

@final
class BroadcastReader:
    """A reader of a broadcast ring (see :mod:`nodeipc.broadcast`)."""

    def __new__(
        cls,
        name: str,
        readers: int,
        chunk_bytes: int,
        chunks: int,
        rank: int,
        join_wait: float = 30.0,
    ) -> Self: ...
    def wait_until_ready(self, timeout: float) -> None: ...
    def recv(self, timeout: Optional[float] = None) -> Optional[BroadcastMessage]:
        """The next message, or ``None`` once ``timeout`` passed."""
    def stop(self) -> None:
        """Ends the current wait and every later one (from any thread)."""
    @property
    def name(self) -> str: ...
    def close(self) -> None: ...

@final
class BroadcastMessage(Buffer):
    """A message received: the reader's own bytes, a read-only buffer."""

    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __release_buffer__(self, buffer: memoryview, /) -> None: ...
