"""The parity table in the package's README names every public name of
nvidia-resiliency-ext 0.7.0's fault_tolerance module (and the members of
the classes training scripts touch), and says the truth about each: a
"same" or "differs" name exists in nodeipc.fault_tolerance, an "absent"
one does not, and no name NVRx's examples or docs use is absent."""

from __future__ import annotations

import pathlib
import re

import nodeipc.fault_tolerance as ft

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"

# NVRx 0.7.0's public names, from its source: the package's nine exports,
# the public names of its submodules that users import, and the members of
# the classes the examples and docs use (0.2's names included).
NVRX = {
    "FaultToleranceConfig", "WorkloadAction", "WorkloadControlRequest", "RankMonitorClient",
    "RankMonitorClientError", "RankMonitorServer", "InvalidStateTransitionException",
    "RankMonitorState", "RankMonitorStateMachine",
    "HeartbeatTimeouts", "SectionTimeouts", "TimeoutsCalc", "TimeoutsCalcError",
    "FT_RANK_MONITOR_IPC_SOCKET_ENV_VAR", "FT_LAUNCHER_IPC_SOCKET_ENV_VAR",
    *(f"FaultToleranceConfig.{m}" for m in
      ("from_yaml_file", "from_kwargs", "from_args", "to_yaml_file")),
    *(f"RankMonitorClient.{m}" for m in (
        "init_workload_monitoring", "shutdown_workload_monitoring", "send_heartbeat",
        "start_section", "end_section", "end_all_sections", "calculate_and_set_hb_timeouts",
        "calculate_and_set_section_timeouts", "calculate_and_set_timeouts", "state_dict",
        "load_state_dict", "send_workload_control_request", "hb_timeouts", "section_timeouts",
        "timeouts", "cfg", "is_initialized", "rank_info", "CURRENT_TIMEOUTS_STATE_KEY")),
    "HeartbeatTimeouts.are_valid", "HeartbeatTimeouts.were_calculated",
    "SectionTimeouts.are_valid", "SectionTimeouts.were_calculated",
    "SectionTimeouts.calculated_sections",
}

# What NVRx's examples (heartbeats, sections, basic_ft_example) and docs use.
USED = {
    "RankMonitorClient", "FaultToleranceConfig", "WorkloadAction", "WorkloadControlRequest",
    "HeartbeatTimeouts.are_valid", "RankMonitorClient.send_workload_control_request",
    *(f"RankMonitorClient.{m}" for m in (
        "init_workload_monitoring", "shutdown_workload_monitoring", "send_heartbeat",
        "start_section", "end_section", "calculate_and_set_hb_timeouts",
        "calculate_and_set_section_timeouts", "calculate_and_set_timeouts", "state_dict",
        "load_state_dict", "hb_timeouts", "timeouts")),
}


def rows() -> dict:
    text = README.read_text()
    table = text.split("<!-- parity:start -->", 1)[1].split("<!-- parity:end -->", 1)[0]
    found = {}
    for name, verdict in re.findall(r"^\| `([^`]+)` \| ([^|]+?) \|$", table, re.M):
        assert name not in found, f"{name} twice"
        found[name] = verdict
    return found


def resolve(name: str) -> bool:
    """Whether `name` (dotted for members) is there; members of classes are
    looked up on an instance, as scripts use them."""
    instances = {
        "RankMonitorClient": ft.RankMonitorClient(),
        "HeartbeatTimeouts": ft.HeartbeatTimeouts(),
        "SectionTimeouts": ft.SectionTimeouts(),
        "FaultToleranceConfig": ft.FaultToleranceConfig(),
    }
    head, _, member = name.partition(".")
    if not member:
        return hasattr(ft, head)
    return hasattr(instances[head], member)


def test_the_table_lists_every_nvrx_name_once():
    assert set(rows()) == NVRX


def test_each_verdict_is_true_of_the_module():
    for name, verdict in rows().items():
        kind = verdict.split(":")[0]
        assert kind in ("same", "differs", "absent"), f"{name}: {verdict}"
        if kind == "absent":
            assert not resolve(name), f"{name} is there but the table says absent"
            assert name not in USED, f"{name} is used by NVRx's examples or docs"
            assert ":" in verdict, f"{name}: absent without why"
        else:
            assert resolve(name), f"{name} is missing but the table says {kind}"
        if kind == "differs":
            assert ":" in verdict, f"{name}: differs without how"
