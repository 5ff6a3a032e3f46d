"""The exceptions of nodeipc: one hierarchy under :class:`NodeipcError`.

Each also derives from the built-in exception a caller would catch for the
same failure (``TimeoutError``, ``PermissionError``, ``ValueError`` …), so
generic handlers keep working. The message is the Rust error's, naming the
object, the rank or the limit involved.
"""

import builtins


class NodeipcError(Exception):
    """Base of every error raised by nodeipc."""


#: The name the issue gives the base class.
Error = NodeipcError


class TimeoutError(NodeipcError, builtins.TimeoutError):
    """A bounded wait ran out (a barrier, a join, a semaphore, a reply)."""


class PeerDiedError(NodeipcError, builtins.ConnectionError):
    """A peer process died or left, or an earlier failure poisoned the group."""


class NotPermittedError(NodeipcError, builtins.PermissionError):
    """The object belongs to another user or has a mode we refuse."""


class RefusedError(NodeipcError):
    """The peer (a monitor, a group) refused the request and said why."""


class NotFoundError(NodeipcError, builtins.FileNotFoundError):
    """The named object does not exist."""


class AlreadyExistsError(NodeipcError, builtins.FileExistsError):
    """An object of that name exists already."""


class InvalidArgumentError(NodeipcError, builtins.ValueError):
    """An argument out of range: a size, a rank, a name, a timeout."""


class ForkedError(NodeipcError, builtins.RuntimeError):
    """The object belongs to the process this one was forked from: a forked
    child may only close it or let it go (which then closes and unmaps the
    child's copy and leaves the rest — threads, names, the group rank, the
    channel — to the parent). Make or open your own after the fork."""


class ConcurrentUseError(NodeipcError, builtins.RuntimeError):
    """Another thread is in a call on the object, and it takes one at a time
    (a group, a worker, a monitor connection) or one of each role (a
    coordinator: one sending and one gathering thread). Nothing was done;
    the object is intact. The message names the object and the rule."""


class RankMonitorClientError(NodeipcError):
    """Raised by :class:`nodeipc.monitor.RankMonitorClient`, as in
    nvidia-resiliency-ext."""


class MonitorRefusedError(RankMonitorClientError, RefusedError):
    """The monitor refused a request (a section not open, a second Init …)."""


class MonitorTimeoutError(RankMonitorClientError, TimeoutError):
    """The monitor did not answer in time (or never listened)."""


__all__ = [
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
