"""nodeipc: processes on one Linux node, from Python.

Thin classes over the Rust crates of nodeipc:

* :class:`Region` — a shared-memory region (named, or a memfd) whose buffer
  ``memoryview``, ``numpy.frombuffer`` and ``torch.frombuffer`` see without
  a copy;
* :class:`NamedSemaphore` (glibc's layout, C peers can share it) and
  :class:`ShmSemaphore` (a futex semaphore inside a region);
* :class:`Group` — ranks that join by name and meet in barriers,
  all-gathers, broadcasts and descriptor exchanges;
* :mod:`nodeipc.fault_tolerance` — nvidia-resiliency-ext's
  ``fault_tolerance`` module, its names with its meanings (a script
  switches by its import); :mod:`nodeipc.monitor` — the earlier client
  under NVRx's names, with nodeipc's own estimator;
* :mod:`nodeipc.channel` — the execute channel's ``Coordinator`` and
  ``Worker`` over bytes;
* :mod:`nodeipc.broadcast` — vLLM's ``MessageQueue`` (one writer, N
  readers) on a broadcast ring; ``python -m nodeipc.examples.tp_engine``
  shows it in an engine-shaped loop.

Timeouts are seconds (``int`` or ``float``); ``None`` waits without limit.
Every blocking call releases the interpreter lock and runs Python's signal
handlers at least every 50 ms, so Ctrl-C ends a wait with
``KeyboardInterrupt``.
"""

from ._errors import (
    AlreadyExistsError,
    ConcurrentUseError,
    Error,
    ForkedError,
    InvalidArgumentError,
    MonitorRefusedError,
    MonitorTimeoutError,
    NodeipcError,
    NotFoundError,
    NotPermittedError,
    PeerDiedError,
    RankMonitorClientError,
    RefusedError,
    TimeoutError,
)
from ._native import Group, NamedSemaphore, Region, ShmSemaphore

__version__ = "0.1.0"

__all__ = [
    "Group",
    "NamedSemaphore",
    "Region",
    "ShmSemaphore",
    "NodeipcError",
    "Error",
    "TimeoutError",
    "PeerDiedError",
    "NotPermittedError",
    "RefusedError",
    "NotFoundError",
    "AlreadyExistsError",
    "InvalidArgumentError",
    "ForkedError",
    "ConcurrentUseError",
    "RankMonitorClientError",
    "MonitorRefusedError",
    "MonitorTimeoutError",
]
