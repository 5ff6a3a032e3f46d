"""nvidia-resiliency-ext's ``fault_tolerance`` module, its names with its
meanings (NVRx 0.7.0), over nodeipc's rank monitor.

A training script written for NVRx switches by its import alone::

    import nodeipc.fault_tolerance as fault_tolerance

and runs under ``nodeipc launch`` (which accepts ``ft_launcher``'s command
line). What the calculation does, how a checkpoint keeps the timeouts and
the maximum over ranks are the Rust crate ``nodeipc-monitor-host``'s
(``NvrxCalc``, ``NvrxState``); this module keeps NVRx's classes around
them. Where it differs from NVRx, the parity table in the package's README
says how.

The maximum over ranks, which NVRx takes with ``torch.distributed``: through
``torch.distributed`` when the script initialised it (never imported here
otherwise); else through a nodeipc group of the node's ranks, joined at the
first calculation under the launcher's group name plus ``-ft``; across
nodes without torch it is the maximum over each node's ranks.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import os
import signal
import socket
import struct
import sys
from typing import Any, Collection, Dict, List, Mapping, Optional, Set

from . import _native
from ._errors import NodeipcError, RankMonitorClientError

__all__ = [
    "FaultToleranceConfig",
    "WorkloadAction",
    "WorkloadControlRequest",
    "RankMonitorClient",
    "RankMonitorClientError",
    "RankMonitorState",
    "HeartbeatTimeouts",
    "SectionTimeouts",
]

logger = logging.getLogger(__name__)

#: The environment variable naming the rank's monitor socket (NVRx's; ``nodeipc
#: launch`` sets ``NODEIPC_MONITOR_SOCKET``, which is read too).
FT_RANK_MONITOR_IPC_SOCKET_ENV_VAR = "FT_RANK_MONITOR_IPC_SOCKET"

#: How long the ranks of a node wait for each other at a calculation
#: (joining the group, exchanging what each saw), in seconds.
SYNC_TIMEOUT = 300.0


def _fmt(value: Optional[float]) -> str:
    return "None" if value is None else f"{value:.2f}"


@dataclasses.dataclass
class HeartbeatTimeouts:
    """Heartbeat timeouts in seconds (None: no limit)."""

    initial: Optional[float] = None
    subsequent: Optional[float] = None
    were_calculated: Optional[bool] = None

    @property
    def are_valid(self) -> bool:
        """Both timeouts are set."""
        return self.initial is not None and self.subsequent is not None

    def __str__(self) -> str:
        return (
            f"HeartbeatTimeouts(initial={_fmt(self.initial)}, "
            f"subsequent={_fmt(self.subsequent)}, were_calculated={self.were_calculated})"
        )


@dataclasses.dataclass
class SectionTimeouts:
    """Section timeouts in seconds (None: no limit); ``calculated_sections``
    is the set of sections whose timeout was calculated."""

    section: Mapping[str, Optional[float]] = dataclasses.field(default_factory=dict)
    out_of_section: Optional[float] = None
    calculated_sections: Set[str] = dataclasses.field(default_factory=set)
    is_out_of_section_calculated: bool = False

    def __post_init__(self) -> None:
        self.calculated_sections = set(self.calculated_sections)

    @property
    def were_calculated(self) -> bool:
        """Every section's timeout and the out-of-section one were calculated."""
        return (
            self.calculated_sections == set(self.section.keys())
            and self.is_out_of_section_calculated
        )

    @property
    def are_valid(self) -> bool:
        """Every timeout is set."""
        return all(v is not None for v in self.section.values()) and (
            self.out_of_section is not None
        )

    def __str__(self) -> str:
        sections = "".join(f"{k}={_fmt(v)}, " for k, v in self.section.items())
        return (
            f"SectionTimeouts(out_of_section={_fmt(self.out_of_section)}, "
            f"sections=[{sections}], calculated_sections={self.calculated_sections}, "
            f"is_out_of_section_calculated={self.is_out_of_section_calculated})"
        )


class WorkloadAction(enum.Enum):
    """What a rank may ask the launcher for."""

    Continue = 0
    ExcludeThisNode = 1
    ShutdownWorkload = 2


class WorkloadControlRequest:
    """A rank's request to the launcher (``send_workload_control_request``)."""

    def __init__(self, action: WorkloadAction, description: str = "<not set>") -> None:
        self.action = action
        self.description = description

    def __str__(self) -> str:
        return f"WorkloadControlRequest(action={self.action}, description={self.description})"


class RankMonitorState(enum.Enum):
    """The states of NVRx's rank-monitor state machine (its names and values)."""

    UNINITIALIZED = 1
    INITIALIZE = 2
    HANDLING_START = 3
    HANDLING_PROCESSING = 4
    HANDLING_COMPLETED = 5
    FINALIZED = 6
    ABORTED = 7


_LOG_LEVELS = {"DEBUG": 10, "DBG": 10, "INFO": 20, "WARNING": 30, "WARN": 30, "ERROR": 40,
               "CRITICAL": 50}

#: Fields given as seconds, where NVRx's command line reads "none"/"null"/"" as None.
_SECONDS = (
    "initial_rank_heartbeat_timeout", "rank_heartbeat_timeout", "rank_out_of_section_timeout",
    "workload_check_interval", "node_health_check_interval", "safety_factor",
    "restart_check_interval", "gpu_memory_reclaim_timeout", "gpu_memory_tolerance_mb",
    "gpu_memory_poll_interval",
)


@dataclasses.dataclass
class FaultToleranceConfig:
    """Every fault-tolerance setting, with NVRx 0.7.0's names and defaults.
    The rank monitor uses the timeouts, the check interval, the termination
    signal and ``skip_section_response``; ``nodeipc launch`` reads the others
    it supports from the same file (see its ``--nvrx-config``)."""

    workload_check_interval: float = 5.0
    initial_rank_heartbeat_timeout: Optional[float] = None
    rank_heartbeat_timeout: Optional[float] = None
    rank_section_timeouts: Mapping[str, Optional[float]] = dataclasses.field(default_factory=dict)
    rank_out_of_section_timeout: Optional[float] = None
    node_health_check_interval: float = 5.0
    safety_factor: float = 5.0
    rank_termination_signal: Any = signal.SIGKILL
    log_level: Any = logging.INFO
    restart_check_interval: float = 60.0
    enable_nic_monitor: bool = False
    enable_nic_healthcheck: bool = True
    enable_dist_storage_healthcheck: bool = False
    storage_healthcheck_path: Optional[str] = None
    pci_topo_file: Optional[str] = None
    link_down_path_template: Optional[str] = None
    link_state_path_template: Optional[str] = None
    skip_section_response: bool = True
    segment: Optional[int] = None
    numa_bind_strict: bool = True
    gpu_memory_reclaim_timeout: float = 50.0
    gpu_memory_tolerance_mb: float = 512.0
    gpu_memory_poll_interval: float = 2.0
    check_remaining_processes: bool = False
    max_no_progress_cycles: int = 3
    min_progress_iterations: int = 1
    checkpoint_iteration_file: Optional[str] = None
    install_exception_hook: bool = False
    num_warmup_iterations: int = 5
    attribution_endpoint: Optional[str] = None
    attribution_stop_action: Optional[str] = None
    attribution_export_url: Optional[str] = None
    cycle_info_dir: Optional[str] = None
    segment_health_check_dir: Optional[str] = None

    def __post_init__(self) -> None:
        sig = self.rank_termination_signal
        if isinstance(sig, signal.Signals):
            pass
        elif isinstance(sig, int) and not isinstance(sig, bool):
            self.rank_termination_signal = signal.Signals(sig)
        elif isinstance(sig, str):
            name = sig.upper()
            if not hasattr(signal, name) or not isinstance(getattr(signal, name), signal.Signals):
                raise ValueError(f"Invalid rank_termination_signal string: {sig}")
            self.rank_termination_signal = getattr(signal, name)
        else:
            raise ValueError(f"Invalid rank_termination_signal: {sig!r}")
        level = self.log_level
        if isinstance(level, int) and not isinstance(level, bool):
            if not 10 <= level <= 50:
                raise ValueError(f"Invalid log_level: {level} (10 to 50)")
        elif isinstance(level, str) and level.upper() in _LOG_LEVELS:
            self.log_level = _LOG_LEVELS[level.upper()]
        else:
            raise ValueError(f"Invalid log_level: {level!r}")

    @property
    def is_progress_tracking_enabled(self) -> bool:
        return self.max_no_progress_cycles > 0

    @staticmethod
    def from_kwargs(ignore_not_recognized: bool = True, **kwargs: Any) -> "FaultToleranceConfig":
        """The fields named in ``kwargs``; others are ignored, or refused
        (``ValueError``) when not ``ignore_not_recognized``."""
        fields = {f.name for f in dataclasses.fields(FaultToleranceConfig)}
        unknown = {k: v for k, v in kwargs.items() if k not in fields}
        if unknown and not ignore_not_recognized:
            raise ValueError(f"Not recognized args: {unknown}")
        return FaultToleranceConfig(**{k: v for k, v in kwargs.items() if k in fields})

    @staticmethod
    def from_yaml_file(cfg_path: str, ignore_not_recognized: bool = True) -> "FaultToleranceConfig":
        """The first non-empty ``fault_tolerance`` section of a YAML (or
        JSON) file, found at any depth; ``ValueError`` when there is none."""
        with open(cfg_path, encoding="utf-8") as f:
            document = json.loads(_native.nvrx_yaml(f.read()))
        section = _find_section(document)
        if not section:
            raise ValueError(f"'fault_tolerance' section not found in config file {cfg_path}")
        return FaultToleranceConfig.from_kwargs(ignore_not_recognized=ignore_not_recognized,
                                                **section)

    @staticmethod
    def from_args(args: Any) -> "FaultToleranceConfig":
        """From an ``argparse.Namespace`` of ``ft_launcher``'s options:
        ``ft_cfg_path``'s file (a file without the section gives the
        defaults), then every ``ft_<field>`` attribute that is not None."""
        cfg = FaultToleranceConfig()
        path = getattr(args, "ft_cfg_path", None)
        if path is not None:
            try:
                cfg = FaultToleranceConfig.from_yaml_file(path)
            except ValueError as e:
                # A file without the section gives the defaults; one that
                # does not parse is an error.
                if "'fault_tolerance' section not found" not in str(e):
                    raise
        values = dataclasses.asdict(cfg)
        for field in dataclasses.fields(FaultToleranceConfig):
            given = getattr(args, "ft_" + field.name, None)
            if given is None:
                continue
            if field.name == "rank_section_timeouts" and isinstance(given, str):
                given = _parse_sections(given)
            elif field.name in _SECONDS and isinstance(given, str):
                given = _seconds(given)
            values[field.name] = given
        return FaultToleranceConfig(**values)

    def to_yaml_file(self, cfg_path: str) -> None:
        """Writes ``{fault_tolerance: {...}}`` (as JSON, which YAML reads),
        the signal by name, the log level as a number."""
        values = dataclasses.asdict(self)
        values["rank_termination_signal"] = signal.Signals(self.rank_termination_signal).name
        with open(cfg_path, "w", encoding="utf-8") as f:
            json.dump({"fault_tolerance": values}, f, indent=2)


def _find_section(node: Any) -> Any:
    """The first truthy ``fault_tolerance`` value, depth first."""
    if isinstance(node, dict):
        if node.get("fault_tolerance"):
            return node["fault_tolerance"]
        children = list(node.values())
    elif isinstance(node, list):
        children = node
    else:
        return None
    for child in children:
        found = _find_section(child)
        if found:
            return found
    return None


def _seconds(text: str) -> Optional[float]:
    text = text.strip()
    return None if text.lower() in ("", "none", "null") else float(text)


def _parse_sections(text: str) -> Dict[str, Optional[float]]:
    text = text.strip()
    if not text:
        return {}
    sections: Dict[str, Optional[float]] = {}
    for item in text.split(","):
        parts = item.split(":")
        if len(parts) != 2:
            raise ValueError(f"rank_section_timeouts item {item!r} is not name:seconds")
        sections[parts[0].strip()] = _seconds(parts[1])
    return sections


@dataclasses.dataclass
class RankInfo:
    """Who this rank is."""

    global_rank: int
    local_rank: int
    host: str
    pid: int


def _state_json(hb: Optional[HeartbeatTimeouts], st: Optional[SectionTimeouts]) -> str:
    """Timeouts in the state dict's form (both parts when given)."""
    current: Dict[str, Any] = {}
    if hb is not None:
        current["heartbeat"] = dataclasses.asdict(hb)
    if st is not None:
        current["section"] = {
            "section": dict(st.section),
            "out_of_section": st.out_of_section,
            "calculated_sections": sorted(st.calculated_sections),
            "is_out_of_section_calculated": st.is_out_of_section_calculated,
        }
    return json.dumps({"current_timeouts": current})


def _from_state(text: str) -> tuple[Optional[HeartbeatTimeouts], Optional[SectionTimeouts]]:
    current = json.loads(text)["current_timeouts"]
    hb = HeartbeatTimeouts(**current["heartbeat"]) if "heartbeat" in current else None
    st = SectionTimeouts(**current["section"]) if "section" in current else None
    return hb, st


def _env_int(*names: str) -> Optional[int]:
    for name in names:
        value = os.environ.get(name)
        if value:
            try:
                return int(value)
            except ValueError:
                raise RankMonitorClientError(
                    f"environment variable {name}={value!r} is not a whole number"
                ) from None
    return None


class RankMonitorClient:
    """The rank's side of the rank monitor, with NVRx's names and meanings.

    Beyond NVRx, all optional: ``socket_path`` (default
    ``FT_RANK_MONITOR_IPC_SOCKET``, then ``NODEIPC_MONITOR_SOCKET``),
    ``timeout`` (seconds to wait for the monitor), ``group`` (a
    :class:`nodeipc.Group` of the ranks to take the maximum over, instead of
    ``torch.distributed`` or the node's group); heartbeats take the
    shared-memory fast path when the monitor grants it.
    """

    CURRENT_TIMEOUTS_STATE_KEY = "current_timeouts"

    def __init__(
        self,
        *,
        socket_path: Optional[str] = None,
        timeout: float = 10.0,
        group: Optional[_native.Group] = None,
    ) -> None:
        self.rank_info: Optional[RankInfo] = None
        self.rank_monitor_socket: Optional[str] = None
        self.is_initialized = False
        self.hb_timeouts: Optional[HeartbeatTimeouts] = None
        self.section_timeouts: Optional[SectionTimeouts] = None
        self.loaded_hb_timeouts: Optional[HeartbeatTimeouts] = None
        self.loaded_section_timeouts: Optional[SectionTimeouts] = None
        self.cfg: Optional[FaultToleranceConfig] = None
        self.iter_idx = 0
        self._socket_path = socket_path
        self._timeout = timeout
        self._group = group
        self._ft_group: Optional[_native.Group] = None
        self._conn: Optional[_native.MonitorConnection] = None
        self._calc: Optional[_native.TimeoutsCalc] = None

    @property
    def timeouts(self) -> Optional[HeartbeatTimeouts]:
        """NVRx 0.2's name of ``hb_timeouts``."""
        return self.hb_timeouts

    @property
    def uses_shared_memory_heartbeats(self) -> bool:
        """Whether heartbeats take the shared-memory fast path."""
        return self._conn is not None and self._conn.has_heartbeat_region

    # -- lifecycle ---------------------------------------------------------

    def init_workload_monitoring(self, num_warmup_iters: Optional[int] = None) -> None:
        """Connects to the rank's monitor and registers (``Init``); the
        monitor's configuration comes back as ``cfg``. Timeouts loaded
        before with ``load_state_dict`` are then sent."""
        if self.is_initialized:
            raise RankMonitorClientError("RankMonitorClient is already initialized")
        rank = self._global_rank()
        local = _env_int("LOCAL_RANK", "NODEIPC_LOCAL_RANK")
        path = (self._socket_path or os.environ.get(FT_RANK_MONITOR_IPC_SOCKET_ENV_VAR)
                or os.environ.get("NODEIPC_MONITOR_SOCKET"))
        if not path:
            raise RankMonitorClientError(
                "FT_RANK_MONITOR_IPC_SOCKET env variable should be set in a process that is "
                "running RankMonitorClient (or NODEIPC_MONITOR_SOCKET, as nodeipc launch sets)"
            )
        try:
            conn = _native.MonitorConnection(path, self._timeout)
            reply = conn.init(rank, max(local or 0, 0), True)
        except NodeipcError as e:
            raise RankMonitorClientError(str(e)) from e
        self._conn = conn
        self.rank_monitor_socket = path
        self.rank_info = RankInfo(rank, -1 if local is None else local, socket.gethostname(),
                                  os.getpid())
        self.cfg = self._config(reply, num_warmup_iters)
        self._calc = _native.TimeoutsCalc(list(self.cfg.rank_section_timeouts),
                                          float(self.cfg.safety_factor))
        self.hb_timeouts = HeartbeatTimeouts(self.cfg.initial_rank_heartbeat_timeout,
                                             self.cfg.rank_heartbeat_timeout, False)
        self.section_timeouts = SectionTimeouts(dict(self.cfg.rank_section_timeouts),
                                                self.cfg.rank_out_of_section_timeout, set(), False)
        self.is_initialized = True
        if self.loaded_hb_timeouts is not None or self.loaded_section_timeouts is not None:
            self._send(self.loaded_hb_timeouts, self.loaded_section_timeouts)

    def _global_rank(self) -> int:
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
        rank = _env_int("RANK", "NODEIPC_RANK")
        if rank is None:
            raise RuntimeError("Could not find the rank of the current process. "
                               "Is it a part of a distributed workload?")
        return rank

    @staticmethod
    def _config(reply: Mapping[str, Any], warmup: Optional[int]) -> FaultToleranceConfig:
        """The monitor's configuration (its answer to ``Init``) as NVRx's."""
        raw = os.environ.get("NODEIPC_FT_SAFETY_FACTOR")
        try:
            safety = float(raw) if raw else 5.0
        except ValueError:
            raise RankMonitorClientError(
                f"NODEIPC_FT_SAFETY_FACTOR={raw!r} is not a number") from None
        values: Dict[str, Any] = {
            "initial_rank_heartbeat_timeout": reply.get("initial_heartbeat"),
            "rank_heartbeat_timeout": reply.get("heartbeat"),
            "rank_section_timeouts": dict(reply.get("sections") or {}),
            "rank_out_of_section_timeout": reply.get("out_of_section"),
            "rank_termination_signal": int(reply.get("termination_signal") or signal.SIGKILL),
            "skip_section_response": bool(reply.get("skip_section_replies")),
            "safety_factor": safety,
        }
        if reply.get("check_interval") is not None:
            values["workload_check_interval"] = reply["check_interval"]
        if warmup is not None:
            values["num_warmup_iterations"] = warmup
        return FaultToleranceConfig(**values)

    def shutdown_workload_monitoring(self) -> None:
        """Closes the connection; the monitor sees the rank leave."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self.is_initialized = False

    # -- what the rank reports ---------------------------------------------

    def _ready(self) -> tuple[_native.MonitorConnection, _native.TimeoutsCalc]:
        if not self.is_initialized or self._conn is None or self._calc is None:
            raise RankMonitorClientError("RankMonitorClient is not initialized")
        return self._conn, self._calc

    def send_heartbeat(self) -> None:
        """One heartbeat (shared memory when granted, the socket otherwise)."""
        conn, calc = self._ready()
        try:
            conn.heartbeat()
            calc.heartbeat()
        except NodeipcError as e:
            raise RankMonitorClientError(
                f"RankMonitorClient could not send the heartbeat. Exception: {e}") from e

    def _section(self, section: str, opening: bool) -> None:
        conn, calc = self._ready()
        if not calc.knows(section):
            # NVRx 0.7.0: a section with no entry in the configuration is not monitored.
            return
        try:
            if opening:
                calc.open(section)
                conn.start_section(section)
            else:
                calc.close(section)
                conn.end_section(section)
        except NodeipcError as e:
            raise RankMonitorClientError(
                f"RankMonitorClient could not send section update. Exception: {e}") from e

    def start_section(self, section: str) -> None:
        """Opens ``section`` (one with no configured timeout is not monitored)."""
        self._section(section, True)

    def end_section(self, section: str) -> None:
        """Closes ``section``."""
        self._section(section, False)

    def end_all_sections(self) -> None:
        """Closes every open section (none open is fine)."""
        conn, calc = self._ready()
        try:
            calc.close_all()
            conn.end_all_sections()
        except NodeipcError as e:
            raise RankMonitorClientError(
                f"RankMonitorClient could not send section update. Exception: {e}") from e

    # -- calculated timeouts -----------------------------------------------

    def _synchronize(self, calc: _native.TimeoutsCalc) -> None:
        """The maximum over ranks of what each saw (every rank calls it)."""
        dist = sys.modules.get("torch.distributed")
        if self._group is None and dist is not None and dist.is_available() \
                and dist.is_initialized():
            torch = sys.modules["torch"]
            device = "cuda" if dist.get_backend() == "nccl" else "cpu"
            values = torch.tensor(calc.maxima(), dtype=torch.float64, device=device)
            dist.all_reduce(values, op=dist.ReduceOp.MAX)
            calc.merge_maxima([float(v) for v in values.cpu().tolist()])
            return
        group = self._group if self._group is not None else self._node_group()
        if group is None:
            return
        mine = calc.maxima()
        try:
            gathered = group.all_gather(struct.pack(f"<{len(mine)}d", *mine),
                                        timeout=SYNC_TIMEOUT)
        except NodeipcError as e:
            raise RankMonitorClientError(
                f"the ranks of group {group.name} did not all calculate together: {e}") from e
        for raw in gathered:
            if len(raw) != 8 * len(mine):
                raise RankMonitorClientError(
                    f"a rank of group {group.name} observed {len(raw) // 8} values, "
                    f"this rank {len(mine)}: are its sections the same?")
            calc.merge_maxima(list(struct.unpack(f"<{len(mine)}d", raw)))

    def _node_group(self) -> Optional[_native.Group]:
        """The node's ranks, joined at the first calculation as
        ``${NODEIPC_GROUP}-ft``; None outside ``nodeipc launch``."""
        if self._ft_group is not None:
            return self._ft_group
        base = os.environ.get("NODEIPC_GROUP")
        size = _env_int("NODEIPC_LOCAL_WORLD_SIZE", "LOCAL_WORLD_SIZE")
        local = _env_int("NODEIPC_LOCAL_RANK", "LOCAL_RANK")
        if not base or size is None or local is None:
            return None
        name = f"{base}-ft"
        slot = 8 * (3 + 64)
        try:
            self._ft_group = _native.Group(name, local, size, timeout=SYNC_TIMEOUT,
                                           slot_size=slot)
        except NodeipcError as e:
            # The group's error names the group and, for a timed-out join,
            # the local ranks that never came.
            raise RankMonitorClientError(
                f"the node's ranks did not all come to calculate timeouts: {e}") from e
        return self._ft_group

    def calculate_and_set_hb_timeouts(self, skip_if_not_ready: bool = False) -> bool:
        """Calculates the heartbeat timeouts from the longest intervals seen
        on any rank (every rank calls it) and sends them. True when set;
        False when too few heartbeats were seen and ``skip_if_not_ready``;
        raises ``RankMonitorClientError`` then otherwise."""
        _, calc = self._ready()
        self._synchronize(calc)
        calculated = calc.heartbeat_timeouts(_state_json(self.hb_timeouts, None))
        if calculated is None:
            if skip_if_not_ready:
                return False
            raise RankMonitorClientError("Not enough data to compute timeouts.")
        hb, _ = _from_state(calculated)
        self._send(hb, None)
        return True

    def calculate_and_set_timeouts(self, skip_if_not_ready: bool = False) -> bool:
        """NVRx 0.2's name of ``calculate_and_set_hb_timeouts``."""
        return self.calculate_and_set_hb_timeouts(skip_if_not_ready)

    def calculate_and_set_section_timeouts(
        self,
        selected_sections: Optional[Collection[str]] = None,
        calc_out_of_section: bool = True,
        skip_if_not_ready: bool = False,
    ) -> bool:
        """Calculates the timeouts of ``selected_sections`` (None: every
        configured section; ``[]``: none) and, with ``calc_out_of_section``,
        the out-of-section one, from what any rank saw (every rank calls
        it), and sends them. Each needs one observation: a restarted job
        calculates from what it has. True when set; False when some were
        never seen and ``skip_if_not_ready``; raises then otherwise."""
        _, calc = self._ready()
        calc.bump_out_of_section()
        self._synchronize(calc)
        selected = None if selected_sections is None else list(selected_sections)
        try:
            calculated = calc.section_timeouts(_state_json(None, self.section_timeouts), selected,
                                               calc_out_of_section)
        except NodeipcError as e:
            raise RankMonitorClientError(str(e)) from e
        if calculated is None:
            if skip_if_not_ready:
                return False
            raise RankMonitorClientError("Not enough data to compute timeouts.")
        _, st = _from_state(calculated)
        self._send(None, st)
        return True

    def _send(self, hb: Optional[HeartbeatTimeouts], st: Optional[SectionTimeouts]) -> None:
        """Sends timeouts to the monitor (None parts unchanged) and adopts them."""
        conn, _ = self._ready()
        sections = None
        if st is not None:
            sections = {k: v for k, v in st.section.items() if v is not None}
        try:
            conn.send_timeouts(
                initial_heartbeat=hb.initial if hb is not None else None,
                heartbeat=hb.subsequent if hb is not None else None,
                out_of_section=st.out_of_section if st is not None else None,
                sections=sections,
            )
        except NodeipcError as e:
            raise RankMonitorClientError(str(e)) from e
        if hb is not None:
            self.hb_timeouts = hb
        if st is not None:
            self.section_timeouts = st

    # -- surviving a restart -----------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """The calculated timeouts in NVRx's checkpoint form (0.3 onward):
        ``{"current_timeouts": {"heartbeat": {...}, "section": {...}}}``,
        each part only when calculated."""
        current = _state_json(self.hb_timeouts, self.section_timeouts)
        result: Dict[str, Any] = json.loads(_native.nvrx_state_dict(current))
        return result

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores timeouts from a state dict in any form written before
        (NVRx 0.2's, 0.3's onward, nodeipc's earlier one, an empty one); they
        are sent to the monitor now if connected, else right after ``Init``.
        A malformed one raises ``RankMonitorClientError`` naming the key."""
        try:
            text = json.dumps(dict(state))
        except (TypeError, ValueError) as e:
            raise RankMonitorClientError(f"the state dict is not plain data: {e}") from None
        hb, st = _from_state(_native.nvrx_state_load(text))
        self.loaded_hb_timeouts = hb
        self.loaded_section_timeouts = st
        if self.is_initialized and (hb is not None or st is not None):
            self._send(hb, st)

    def send_workload_control_request(self, req: WorkloadControlRequest) -> None:
        """Asks the launcher for ``req.action``, over the monitor connection.
        ``nodeipc launch`` applies it when the round ends, as NVRx's launcher
        does at its next rendezvous: ``ShutdownWorkload`` ends the job with
        no restart, ``ExcludeThisNode`` takes this node out (on one node the
        job ends, saying why), ``Continue`` is acknowledged."""
        conn, _ = self._ready()
        try:
            conn.workload_control(WorkloadAction(req.action).value, str(req.description))
        except NodeipcError as e:
            raise RankMonitorClientError(str(e)) from e
