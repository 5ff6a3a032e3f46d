"""nodeipc.fault_tolerance keeps nvidia-resiliency-ext 0.7.0's names and
meanings: its timeout classes, its checkpoint form both ways (the literal
structures of NVRx 0.2 and 0.3 onward), its calculation against a real
monitor (`nodeipc monitor serve`), its configuration class."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import time

import pytest

import nodeipc
import nodeipc.fault_tolerance as fault_tolerance
from nodeipc.fault_tolerance import (
    FaultToleranceConfig,
    HeartbeatTimeouts,
    RankMonitorClient,
    RankMonitorClientError,
    SectionTimeouts,
)

# NVRx 0.3 onward's state_dict after a calculation of heartbeats and of two
# sections, as its RankMonitorClient.state_dict() builds it.
NVRX_STATE = {
    "current_timeouts": {
        "heartbeat": {"initial": 12.5, "subsequent": 3.25, "were_calculated": True},
        "section": {
            "section": {"init": 20.0, "step": 4.5, "checkpoint": 7.0},
            "out_of_section": 9.0,
            "calculated_sections": ["checkpoint", "step"],
            "is_out_of_section_calculated": True,
        },
    }
}
# NVRx 0.2's: the heartbeat timeouts straight under the key.
NVRX_02_STATE = {"current_timeouts": {"initial": 12.5, "subsequent": 3.25, "were_calculated": True}}
# nodeipc.monitor's before this module.
OURS_BEFORE = {
    "hb_timeouts": {"initial": 12.5, "subsequent": 3.25, "were_calculated": True},
    "section_timeouts": {
        "section": {"init": 20.0, "step": 4.5, "checkpoint": 7.0},
        "out_of_section": 9.0,
        "calculated_sections": ["checkpoint", "step"],
        "is_out_of_section_calculated": True,
    },
}
SECTIONS = {"init": 20000, "step": 10000, "checkpoint": 30000}


@pytest.fixture
def rank_env(monkeypatch):
    for name in ("NODEIPC_GROUP", "NODEIPC_MONITOR_SOCKET", "FT_RANK_MONITOR_IPC_SOCKET",
                 "NODEIPC_FT_SAFETY_FACTOR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")


def connected(socket: str) -> RankMonitorClient:
    client = RankMonitorClient(socket_path=socket, timeout=5)
    client.init_workload_monitoring()
    return client


def test_the_timeout_classes_keep_nvrx_meanings():
    hb = HeartbeatTimeouts(initial=30.0, subsequent=None)
    assert not hb.are_valid and hb.were_calculated is None
    assert HeartbeatTimeouts(1.0, 2.0, True).are_valid
    assert HeartbeatTimeouts(1.0, 2.0, True) == HeartbeatTimeouts(1.0, 2.0, True)
    assert HeartbeatTimeouts(1.0, 2.0, True) != HeartbeatTimeouts(1.0, 2.0, False)
    assert str(HeartbeatTimeouts(30, 15.5, False)) == (
        "HeartbeatTimeouts(initial=30.00, subsequent=15.50, were_calculated=False)"
    )
    assert repr(hb) == "HeartbeatTimeouts(initial=30.0, subsequent=None, were_calculated=None)"
    st = SectionTimeouts({"a": 1.0, "b": None}, 3.0, ["a"], False)
    assert st.calculated_sections == {"a"}
    assert not st.are_valid and not st.were_calculated
    full = SectionTimeouts({"a": 1.0}, 3.0, {"a"}, True)
    assert full.are_valid and full.were_calculated
    assert full == SectionTimeouts({"a": 1.0}, 3.0, ["a"], True)
    assert str(st) == (
        "SectionTimeouts(out_of_section=3.00, sections=[a=1.00, b=None, ], "
        "calculated_sections={'a'}, is_out_of_section_calculated=False)"
    )
    assert [a.value for a in fault_tolerance.WorkloadAction] == [0, 1, 2]
    req = fault_tolerance.WorkloadControlRequest(fault_tolerance.WorkloadAction.ExcludeThisNode)
    assert str(req) == (
        "WorkloadControlRequest(action=WorkloadAction.ExcludeThisNode, description=<not set>)"
    )
    assert fault_tolerance.RankMonitorState.ABORTED.value == 7
    assert RankMonitorClient.CURRENT_TIMEOUTS_STATE_KEY == "current_timeouts"


@pytest.mark.parametrize("state", [NVRX_STATE, OURS_BEFORE], ids=["nvrx-0.3+", "ours-before"])
def test_a_state_dict_round_trips_in_nvrx_form(monitor, rank_env, state):
    socket = monitor(section_timeouts_ms=SECTIONS)
    client = RankMonitorClient(socket_path=socket, timeout=5)
    client.load_state_dict(json.loads(json.dumps(state)))
    client.init_workload_monitoring()
    try:
        assert client.hb_timeouts == HeartbeatTimeouts(12.5, 3.25, True)
        assert client.section_timeouts.calculated_sections == {"checkpoint", "step"}
        assert client.state_dict() == NVRX_STATE
        # The monitor enforces them.
        status = client._conn.status()
        assert status["heartbeat"] == 3.25 and status["sections"]["step"] == 4.5, status
    finally:
        client.shutdown_workload_monitoring()


def test_nvrx_02_and_empty_states_load_and_nothing_calculated_is_the_key_alone(monitor, rank_env):
    socket = monitor(section_timeouts_ms=SECTIONS)
    client = connected(socket)
    try:
        assert client.state_dict() == {"current_timeouts": {}}
        for empty in ({}, {"current_timeouts": {}}):
            client.load_state_dict(empty)
            assert client.state_dict() == {"current_timeouts": {}}
        client.load_state_dict(NVRX_02_STATE)
        assert client.hb_timeouts == HeartbeatTimeouts(12.5, 3.25, True)
        assert client.state_dict() == {"current_timeouts": {"heartbeat": NVRX_02_STATE[
            "current_timeouts"]}}
    finally:
        client.shutdown_workload_monitoring()


@pytest.mark.parametrize(
    "state, key",
    [
        ({"current_timeouts": 5}, "current_timeouts is a number"),
        ({"current_timeouts": {"heartbeat": {"initial": "x"}}}, "current_timeouts.heartbeat.initial"),
        ({"current_timeouts": {"section": {"sections": {}}}}, '"sections"'),
        ({"hb_timeouts": {"subsequent": -1}}, "hb_timeouts.subsequent"),
        ({"bogus": 1}, '"bogus"'),
        ({"current_timeouts": {"heartbeat": {"initial": float("nan")}}}, "not JSON"),
    ],
)
def test_a_malformed_state_dict_is_refused_naming_the_key(state, key):
    client = RankMonitorClient()
    with pytest.raises(RankMonitorClientError) as caught:
        client.load_state_dict(state)
    assert key in str(caught.value)
    assert client.loaded_hb_timeouts is None


def test_calculations_follow_nvrx_from_what_each_has(monitor, rank_env):
    socket = monitor(section_timeouts_ms=SECTIONS, out_of_section_timeout_ms=30000)
    client = connected(socket)
    try:
        cfg = client.cfg
        assert cfg.workload_check_interval == pytest.approx(0.1)
        assert cfg.rank_section_timeouts == {"init": 20.0, "step": 10.0, "checkpoint": 30.0}
        assert cfg.rank_termination_signal == signal.SIGKILL
        assert client.hb_timeouts == HeartbeatTimeouts(None, None, False)
        # The sections example after a restart: one `init`, then its update.
        client.start_section("init")
        client.end_section("init")
        assert client.calculate_and_set_section_timeouts(["init"], False)
        st = client.section_timeouts
        assert st.calculated_sections == {"init"} and st.section["step"] == 10.0
        assert 0 < st.section["init"] < 20.0
        # [] checks every section, as NVRx does: step and checkpoint unseen.
        assert not client.calculate_and_set_section_timeouts([], True, skip_if_not_ready=True)
        with pytest.raises(RankMonitorClientError, match="Not enough data"):
            client.calculate_and_set_section_timeouts()
        # A section with no configured timeout is not monitored (NVRx 0.7.0).
        client.start_section("unconfigured")
        client.end_section("unconfigured")
        with pytest.raises(RankMonitorClientError, match="not open"):
            client.end_section("step")
        # Heartbeats: one is not enough, two are.
        client.send_heartbeat()
        assert not client.calculate_and_set_hb_timeouts(skip_if_not_ready=True)
        with pytest.raises(RankMonitorClientError, match="Not enough data"):
            client.calculate_and_set_timeouts()
        # Far enough apart that 5 x the interval outlasts the rest of the test.
        time.sleep(0.3)
        client.send_heartbeat()
        assert client.calculate_and_set_hb_timeouts()
        hb = client.hb_timeouts
        assert hb.are_valid and hb.were_calculated is True and client.timeouts is hb
        status = client._conn.status()
        assert status["heartbeat"] == pytest.approx(hb.subsequent, abs=0.001), status
        assert client.state_dict()["current_timeouts"]["heartbeat"]["were_calculated"] is True
    finally:
        client.shutdown_workload_monitoring()
    with pytest.raises(RankMonitorClientError, match="not initialized"):
        client.send_heartbeat()


def test_a_local_rank_that_never_comes_to_calculate_is_named(monitor, rank_env, monkeypatch,
                                                               unique_name):
    # Local rank 0 of 2 calculates alone: the `-ft` group's join times out
    # and the group's own error names local rank 1, which never came.
    base = unique_name("ft-missing")
    monkeypatch.setenv("NODEIPC_GROUP", base)
    monkeypatch.setenv("NODEIPC_LOCAL_RANK", "0")
    monkeypatch.setenv("NODEIPC_LOCAL_WORLD_SIZE", "2")
    monkeypatch.setattr(fault_tolerance, "SYNC_TIMEOUT", 0.5)
    client = connected(monitor())
    try:
        with pytest.raises(RankMonitorClientError) as caught:
            client.calculate_and_set_hb_timeouts(skip_if_not_ready=True)
    finally:
        client.shutdown_workload_monitoring()
    message = str(caught.value)
    assert f"{base}-ft" in message, message
    assert "rank 1 never joined" in message, message
    assert "1 of 2 ranks arrived" in message, message
    assert isinstance(caught.value.__cause__, nodeipc.TimeoutError), repr(caught.value.__cause__)


def test_the_client_refuses_what_nvrx_refuses(monkeypatch, rank_env):
    client = RankMonitorClient()
    with pytest.raises(RankMonitorClientError, match="FT_RANK_MONITOR_IPC_SOCKET"):
        client.init_workload_monitoring()
    monkeypatch.delenv("RANK")
    with pytest.raises(RuntimeError, match="Could not find the rank"):
        client.init_workload_monitoring()


NVRX_SECTIONS_YAML = """fault_tolerance:
    initial_rank_heartbeat_timeout: null
    rank_heartbeat_timeout: null
    rank_section_timeouts:
        init: 20
        step: 10
        checkpoint: 30
    rank_out_of_section_timeout: 30
    log_level: "DEBUG"
"""


def test_fault_tolerance_config_reads_nvrx_files_kwargs_and_args(tmp_path):
    path = tmp_path / "fault_tol_cfg_sections.yaml"
    path.write_text(NVRX_SECTIONS_YAML)
    cfg = FaultToleranceConfig.from_yaml_file(str(path))
    assert cfg.rank_section_timeouts == {"init": 20, "step": 10, "checkpoint": 30}
    assert cfg.log_level == logging.DEBUG and cfg.initial_rank_heartbeat_timeout is None
    assert cfg.safety_factor == 5.0 and cfg.rank_termination_signal == signal.SIGKILL
    nested = tmp_path / "nested.yaml"
    nested.write_text("model:\n  layers: 2\nruns:\n  - fault_tolerance:\n      safety_factor: 3\n")
    assert FaultToleranceConfig.from_yaml_file(str(nested)).safety_factor == 3
    none = tmp_path / "none.yaml"
    none.write_text("model: {}\n")
    with pytest.raises(ValueError, match="'fault_tolerance' section not found"):
        FaultToleranceConfig.from_yaml_file(str(none))
    with pytest.raises(ValueError, match="Not recognized args"):
        FaultToleranceConfig.from_kwargs(ignore_not_recognized=False, bogus=1)
    assert FaultToleranceConfig.from_kwargs(bogus=1) == FaultToleranceConfig()
    with pytest.raises(ValueError, match="rank_termination_signal"):
        FaultToleranceConfig(rank_termination_signal="SIGNOPE")
    args = argparse.Namespace(
        ft_cfg_path=str(path),
        ft_rank_heartbeat_timeout="none",
        ft_initial_rank_heartbeat_timeout="60",
        ft_rank_section_timeouts="setup:600, step:null",
        ft_rank_termination_signal="sigterm",
        ft_log_level="warn",
    )
    cfg = FaultToleranceConfig.from_args(args)
    assert cfg.initial_rank_heartbeat_timeout == 60.0 and cfg.rank_heartbeat_timeout is None
    assert cfg.rank_section_timeouts == {"setup": 600.0, "step": None}
    assert cfg.rank_out_of_section_timeout == 30
    assert cfg.rank_termination_signal == signal.SIGTERM and cfg.log_level == 30
    out = tmp_path / "out.yaml"
    cfg.to_yaml_file(str(out))
    assert FaultToleranceConfig.from_yaml_file(str(out)) == cfg
