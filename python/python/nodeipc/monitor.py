"""A rank's monitor client with nvidia-resiliency-ext's names.

A training script that used ``nvidia_resiliency_ext``'s client changes one
import::

    from nodeipc.monitor import RankMonitorClient, RankMonitorClientError

The client speaks to a ``nodeipc monitor serve`` process (or any nodeipc
monitor) over the Unix socket named by ``NODEIPC_MONITOR_SOCKET`` or the
constructor's ``socket_path``. Heartbeats take the shared-memory fast path
(one atomic increment) when the monitor grants it, the socket otherwise.
Timeouts are calculated by the Rust estimator from what this rank was seen
doing, never below ``max(1 s, 2 × the monitor's check interval)``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Dict, Iterable, List, Mapping, Optional

from . import _native
from ._errors import NodeipcError, RankMonitorClientError

__all__ = [
    "RankMonitorClient",
    "RankMonitorClientError",
    "HeartbeatTimeouts",
    "SectionTimeouts",
]

#: The monitor's default check interval, used for the safety floor unless
#: the constructor or ``NODEIPC_MONITOR_CHECK_INTERVAL`` says otherwise.
DEFAULT_CHECK_INTERVAL = 1.0


@dataclasses.dataclass
class HeartbeatTimeouts:
    """Heartbeat timeouts in seconds (None: none), as nvidia-resiliency-ext's."""

    initial: Optional[float] = None
    subsequent: Optional[float] = None
    were_calculated: bool = False


@dataclasses.dataclass
class SectionTimeouts:
    """Section timeouts in seconds (None: none), as nvidia-resiliency-ext's."""

    section: Dict[str, float] = dataclasses.field(default_factory=dict)
    out_of_section: Optional[float] = None
    calculated_sections: List[str] = dataclasses.field(default_factory=list)
    is_out_of_section_calculated: bool = False


def _env_int(*names: str) -> int:
    """The first of ``names`` set in the environment, as an int; 0 if none."""
    for name in names:
        value = os.environ.get(name)
        if value is None or value == "":
            continue
        try:
            rank = int(value)
        except ValueError:
            raise RankMonitorClientError(
                f"environment variable {name}={value!r} is not a whole number"
            ) from None
        if not 0 <= rank < 2**32:
            raise RankMonitorClientError(
                f"environment variable {name}={value!r} is not in 0..2^32"
            )
        return rank
    return 0


def _wrap(error: NodeipcError) -> RankMonitorClientError:
    if isinstance(error, RankMonitorClientError):
        return error
    return RankMonitorClientError(str(error))


class RankMonitorClient:
    """The rank's side of the rank monitor (nvidia-resiliency-ext's names).

    Args:
        socket_path: the monitor's socket; default ``NODEIPC_MONITOR_SOCKET``.
        rank: the global rank; default ``NODEIPC_RANK``, then ``RANK``, else 0.
        local_rank: default ``LOCAL_RANK``, else 0.
        timeout: seconds to wait for the monitor to listen, and for each reply.
        check_interval: the monitor's check interval in seconds, for the
            safety floor; default ``NODEIPC_MONITOR_CHECK_INTERVAL``, else 1.
        safety_factor: calculated timeouts are this times the longest
            interval seen (nvidia-resiliency-ext's default, 5).
        min_samples: intervals to see before a timeout is calculated.
        group: an optional :class:`nodeipc.Group` of every rank: calculated
            timeouts are then the maximum over the ranks, and every rank must
            call the ``calculate_and_set_*`` methods together.
    """

    def __init__(
        self,
        socket_path: Optional[str] = None,
        *,
        rank: Optional[int] = None,
        local_rank: Optional[int] = None,
        timeout: float = 10.0,
        check_interval: Optional[float] = None,
        safety_factor: float = 5.0,
        min_samples: int = 3,
        group: Optional[_native.Group] = None,
    ) -> None:
        self._socket_path = socket_path
        self._rank = rank
        self._local_rank = local_rank
        self._timeout = timeout
        if check_interval is None:
            raw = os.environ.get("NODEIPC_MONITOR_CHECK_INTERVAL")
            try:
                check_interval = float(raw) if raw else DEFAULT_CHECK_INTERVAL
            except ValueError:
                raise RankMonitorClientError(
                    f"NODEIPC_MONITOR_CHECK_INTERVAL={raw!r} is not a number of seconds"
                ) from None
        if not check_interval > 0:
            raise RankMonitorClientError(
                f"check_interval must be a positive number of seconds, not {check_interval}"
            )
        self._check_interval = float(check_interval)
        self._safety_factor = safety_factor
        self._min_samples = min_samples
        self._group = group
        self._conn: Optional[_native.MonitorConnection] = None
        self.hb_timeouts = HeartbeatTimeouts()
        self.section_timeouts = SectionTimeouts()
        self._loaded = False

    # -- lifecycle ---------------------------------------------------------

    @property
    def is_initialized(self) -> bool:
        """Whether ``init_workload_monitoring`` connected and registered."""
        return self._conn is not None

    @property
    def uses_shared_memory_heartbeats(self) -> bool:
        """Whether heartbeats take the shared-memory fast path."""
        return self._conn is not None and self._conn.has_heartbeat_region

    @property
    def safety_floor(self) -> float:
        """The least a calculated timeout may be: max(1 s, 2 × check interval)."""
        return max(1.0, 2.0 * self._check_interval)

    def init_workload_monitoring(self) -> None:
        """Connects to the monitor and registers this rank (``Init``).

        Timeouts loaded with ``load_state_dict`` beforehand are sent right
        after, so a restarted rank runs with its calculated timeouts.
        """
        if self._conn is not None:
            raise RankMonitorClientError("init_workload_monitoring was called twice")
        path = self._socket_path or os.environ.get("NODEIPC_MONITOR_SOCKET")
        if not path:
            raise RankMonitorClientError(
                "no monitor socket: set NODEIPC_MONITOR_SOCKET or pass socket_path"
            )
        rank = self._rank if self._rank is not None else _env_int("NODEIPC_RANK", "RANK")
        local = self._local_rank if self._local_rank is not None else _env_int("LOCAL_RANK")
        try:
            conn = _native.MonitorConnection(path, self._timeout)
            conn.attach_estimator(self._safety_factor, self._min_samples)
            config = conn.init(rank, local, True)
        except NodeipcError as e:
            raise _wrap(e) from e
        self._conn = conn
        if conn.has_heartbeat_region:
            # The fast path is one atomic increment: call it without this
            # class's wrapper, which would cost more than the heartbeat (its
            # errors are RankMonitorClientError already).
            setattr(self, "send_heartbeat", conn.heartbeat)
        if self._loaded:
            # The loaded timeouts, not the monitor's defaults, are in force.
            self._send_calculated()
        else:
            self._adopt(config, calculated=False)

    def shutdown_workload_monitoring(self) -> None:
        """Closes the connection; the monitor sees the rank leave."""
        self.__dict__.pop("send_heartbeat", None)
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> "RankMonitorClient":
        self.init_workload_monitoring()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown_workload_monitoring()

    # -- what the rank reports --------------------------------------------

    def _connection(self) -> _native.MonitorConnection:
        if self._conn is None:
            raise RankMonitorClientError(
                "the client is not initialized: call init_workload_monitoring() first"
            )
        return self._conn

    def send_heartbeat(self) -> None:
        """One heartbeat (shared memory when granted, the socket otherwise)."""
        try:
            self._connection().heartbeat()
        except NodeipcError as e:
            raise _wrap(e) from e

    def start_section(self, section: str) -> None:
        """Opens ``section``; its timeout, if any, starts."""
        try:
            self._connection().start_section(section)
        except NodeipcError as e:
            raise _wrap(e) from e

    def end_section(self, section: str) -> None:
        """Closes ``section``."""
        try:
            self._connection().end_section(section)
        except NodeipcError as e:
            raise _wrap(e) from e

    def end_all_sections(self) -> None:
        """Closes every open section."""
        try:
            self._connection().end_all_sections()
        except NodeipcError as e:
            raise _wrap(e) from e

    # -- calculated timeouts ----------------------------------------------

    def _floor(self, value: Optional[float]) -> Optional[float]:
        return None if value is None else max(value, self.safety_floor)

    def _agree(
        self, proposal: Optional[Dict[str, Any]], group: Optional[_native.Group]
    ) -> Optional[Dict[str, Any]]:
        """With a group: every rank's proposal, merged by maximum; None when
        any rank has none yet. Alone: the proposal as it is."""
        group = group if group is not None else self._group
        if group is None:
            return proposal
        mine = json.dumps(proposal, separators=(",", ":")).encode()
        try:
            gathered = group.all_gather(mine)
        except NodeipcError as e:
            raise _wrap(e) from e
        proposals = [json.loads(raw) for raw in gathered]
        if any(p is None for p in proposals):
            return None
        merged: Dict[str, Any] = {"heartbeat": None, "out_of_section": None, "sections": {}}
        for p in proposals:
            for key in ("heartbeat", "out_of_section"):
                if p.get(key) is not None:
                    merged[key] = max(merged[key] or 0.0, p[key])
            for name, limit in p.get("sections", {}).items():
                merged["sections"][name] = max(merged["sections"].get(name, 0.0), limit)
        # A section or stretch is calculated only when every rank saw enough.
        for key in ("out_of_section",):
            if any(p.get(key) is None for p in proposals):
                merged[key] = None
        common = set.intersection(*(set(p.get("sections", {})) for p in proposals))
        merged["sections"] = {k: v for k, v in merged["sections"].items() if k in common}
        return merged

    def calculate_and_set_hb_timeouts(
        self, skip_if_not_ready: bool = False, group: Optional[_native.Group] = None
    ) -> bool:
        """Calculates the heartbeat timeout from the intervals seen and sends
        it. Returns True when set; False when there were too few intervals
        and ``skip_if_not_ready``; raises ``RankMonitorClientError`` then
        otherwise. With ``group`` (or the constructor's), every rank of it
        calls this together and all set the maximum of their timeouts."""
        conn = self._connection()
        try:
            proposal = self._agree(conn.propose(), group)
        except NodeipcError as e:
            raise _wrap(e) from e
        if proposal is None or proposal.get("heartbeat") is None:
            if skip_if_not_ready:
                return False
            raise RankMonitorClientError(
                "not enough heartbeats to calculate the heartbeat timeout "
                f"({conn.heartbeat_samples()} intervals seen, {self._min_samples} needed)"
            )
        heartbeat = self._floor(proposal["heartbeat"])
        try:
            config = conn.send_timeouts(heartbeat=heartbeat)
        except NodeipcError as e:
            raise _wrap(e) from e
        self._adopt(config, calculated=False)
        self.hb_timeouts.were_calculated = True
        return True

    def calculate_and_set_section_timeouts(
        self,
        selected_sections: Optional[Iterable[str]] = None,
        calc_out_of_section: bool = True,
        skip_if_not_ready: bool = False,
        group: Optional[_native.Group] = None,
    ) -> bool:
        """Calculates the timeouts of ``selected_sections`` (default: every
        section seen) and, with ``calc_out_of_section``, of the stretches
        outside sections, and sends them. Returns True when set; False when
        some lacked observations and ``skip_if_not_ready``; raises
        ``RankMonitorClientError`` then otherwise. With ``group`` (or the
        constructor's), every rank of it calls this together and all set the
        maximum of their timeouts."""
        conn = self._connection()
        try:
            proposal = self._agree(conn.propose_sections(), group)
        except NodeipcError as e:
            raise _wrap(e) from e
        sections: Dict[str, float] = dict((proposal or {}).get("sections", {}))
        out_of_section = (proposal or {}).get("out_of_section")
        wanted = list(selected_sections) if selected_sections is not None else list(sections)
        missing = [name for name in wanted if name not in sections]
        if calc_out_of_section and out_of_section is None:
            missing.append("<out of section>")
        if proposal is None or missing:
            if skip_if_not_ready:
                return False
            raise RankMonitorClientError(
                "not enough observations to calculate the timeouts of "
                + (", ".join(missing) if missing else "any section")
                + f" (each needs {self._min_samples})"
            )
        chosen = {name: max(sections[name], self.safety_floor) for name in wanted}
        try:
            config = conn.send_timeouts(
                out_of_section=self._floor(out_of_section) if calc_out_of_section else None,
                sections=chosen,
            )
        except NodeipcError as e:
            raise _wrap(e) from e
        self._adopt(config, calculated=False)
        calculated = set(self.section_timeouts.calculated_sections) | set(wanted)
        self.section_timeouts.calculated_sections = sorted(calculated)
        if calc_out_of_section:
            self.section_timeouts.is_out_of_section_calculated = True
        return True

    def _adopt(self, config: Mapping[str, Any], calculated: bool) -> None:
        """Keeps the timeouts the monitor says are in force."""
        self.hb_timeouts.initial = config.get("initial_heartbeat")
        self.hb_timeouts.subsequent = config.get("heartbeat")
        self.section_timeouts.section = dict(config.get("sections", {}))
        self.section_timeouts.out_of_section = config.get("out_of_section")
        if calculated:
            self.hb_timeouts.were_calculated = True

    def _send_calculated(self) -> None:
        """Sends the calculated timeouts loaded from a state dict."""
        conn = self._connection()
        hb = self.hb_timeouts
        st = self.section_timeouts
        sections = {name: st.section[name] for name in st.calculated_sections if name in st.section}
        try:
            config = conn.send_timeouts(
                heartbeat=hb.subsequent if hb.were_calculated else None,
                out_of_section=st.out_of_section if st.is_out_of_section_calculated else None,
                sections=sections,
            )
        except NodeipcError as e:
            raise _wrap(e) from e
        were = hb.were_calculated
        self._adopt(config, calculated=were)

    # -- surviving a restart ----------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """The calculated timeouts, as a dict of plain values (picklable,
        JSON-serialisable) to save with a checkpoint."""
        return {
            "hb_timeouts": dataclasses.asdict(self.hb_timeouts),
            "section_timeouts": dataclasses.asdict(self.section_timeouts),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores timeouts from ``state_dict()``; the calculated ones are
        sent to the monitor now if connected, else right after ``Init``."""
        try:
            hb = HeartbeatTimeouts(**dict(state["hb_timeouts"]))
            st = SectionTimeouts(**dict(state["section_timeouts"]))
        except (KeyError, TypeError) as e:
            raise RankMonitorClientError(f"not a RankMonitorClient state dict: {e}") from None
        self.hb_timeouts = hb
        self.section_timeouts = st
        self._loaded = True
        if self._conn is not None:
            self._send_calculated()
