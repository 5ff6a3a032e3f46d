"""nvidia-resiliency-ext's three training loops (its heartbeats example,
its sections example, the old basic_ft_example), torch replaced by plain
loops and a nodeipc.Group, `import nodeipc.fault_tolerance as
fault_tolerance` the only change to their fault tolerance lines, each run
under `nodeipc launch` with ft_launcher's command line and NVRx's own
configuration file: rank 1 hangs in the first round, its monitor kills it
once the calculated timeout runs out, the job restarts, the restarted
round loads the previous round's state_dict, and the launch exits 0."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

from conftest import HERE, rust_program

HEARTBEATS_YAML = """fault_tolerance:
    initial_rank_heartbeat_timeout: null
    rank_heartbeat_timeout: null
    log_level: "DEBUG"
"""
SECTIONS_YAML = """fault_tolerance:
    initial_rank_heartbeat_timeout: null
    rank_heartbeat_timeout: null
    rank_section_timeouts:
        init: 20
        step: 10
        checkpoint: 30
    rank_out_of_section_timeout: 30
    log_level: "DEBUG"
"""
BASIC = ["--ft-initial-rank-heartbeat-timeout=30", "--ft-rank-heartbeat-timeout=15"]


def by_rank(out: str, what: str) -> dict:
    """`rank R: WHAT X(...)` lines (ranks' lines may share one line of the
    launcher's output): the X(...) text of each rank."""
    return {int(r): text for r, text in re.findall(rf"rank (\d): {what} (\w+\([^)]*\))", out)}


def launch(tmp_path: pathlib.Path, script: str, yaml: str | None, extra: list[str]) -> str:
    argv = [rust_program("nodeipc"), "launch", "--nproc_per_node=2", "--max_restarts=2",
            "--ft-workload-check-interval=0.2"]
    if yaml is not None:
        (tmp_path / "fault_tol_cfg.yaml").write_text(yaml)
        argv.append("--ft-cfg-path=fault_tol_cfg.yaml")
    argv += [*extra, str(HERE / script)]
    # Timeouts 50 x the longest interval seen: generous on a loaded machine.
    env = dict(os.environ, PYTHON=sys.executable, NODEIPC_FT_SAFETY_FACTOR="50")
    done = subprocess.run(argv, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=150)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "rank 1: simulated hang" in out, out
    assert "round 1 started" in out, out
    for rank in (0, 1):
        assert (tmp_path / f"done-{rank}").read_text() == "1", out
    return out


def test_the_heartbeats_example_restarts_a_hung_rank_and_resumes_with_its_timeouts(tmp_path):
    out = launch(tmp_path, "ft_heartbeats_loop_py.py", HEARTBEATS_YAML, [])
    assert "heartbeat timeout" in out, out
    assert "rank 0: calculated HeartbeatTimeouts(" in out, out
    resumed = by_rank(out, r"resumed at \{[^}]*\} with")
    assert sorted(resumed) == [0, 1], out
    assert all("were_calculated=True" in r for r in resumed.values()), out


def test_the_sections_example_restarts_a_hung_step_and_calculates_init_from_what_it_has(tmp_path):
    out = launch(tmp_path, "ft_sections_loop_py.py", SECTIONS_YAML, [])
    assert "step" in out and "simulated hang in step" in out, out
    loaded = re.findall(r"rank (\d): loaded SectionTimeouts\(.*?calculated_sections=(\{[^}]*\})",
                        out)
    assert sorted(int(r) for r, _ in loaded) == [0, 1], out
    assert all("'step'" in calculated for _, calculated in loaded), out
    state = (tmp_path / "ft_state.json").read_text()
    import json

    section = json.loads(state)["current_timeouts"]["section"]
    # The restart calculated `init` from its one observation, and the end
    # of the job the out-of-section timeout.
    assert section["calculated_sections"] == ["checkpoint", "init", "step"], state
    assert section["is_out_of_section_calculated"] is True, state


def test_the_basic_example_with_nvrx_02_names_restarts_and_reloads_its_state(tmp_path):
    out = launch(tmp_path, "ft_basic_loop_py.py", None, BASIC)
    assert "HeartbeatTimeouts(initial=30.00, subsequent=15.00, were_calculated=False)" in out, out
    loaded = by_rank(out, "loaded ft timeouts")
    assert sorted(loaded) == [0, 1], out
    assert all("were_calculated=True" in text for text in loaded.values()), out
    assert "heartbeat timeout" in out, out


@pytest.mark.parametrize(
    "action, code, said",
    [
        ("ShutdownWorkload", 1, "not restarted: rank 1 asked to shut the workload down: "
                                "test asks ShutdownWorkload"),
        ("ExcludeThisNode", 1, "rank 1 asked to exclude this node (test asks ExcludeThisNode)"),
        ("Continue", 0, "every rank exited 0 (restarts: 1)"),
    ],
)
def test_workload_control_requests_reach_the_launcher(tmp_path, action, code, said):
    argv = [rust_program("nodeipc"), "launch", "--nproc_per_node=2", "--max_restarts=2",
            "--ft-initial-rank-heartbeat-timeout=30", str(HERE / "ft_workload_py.py"), action]
    env = dict(os.environ, PYTHON=sys.executable)
    done = subprocess.run(argv, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == code, out
    assert f"rank 1: sent {action}" in out, out
    assert said in out, out
    assert f"rank 1 asked to {action_words(action)}: test asks {action}" in out, out
    restarted = (tmp_path / "done-1-1").exists()
    assert restarted == (action == "Continue"), out


def action_words(action: str) -> str:
    return {"ShutdownWorkload": "shutdown workload", "ExcludeThisNode": "exclude this node",
            "Continue": "continue"}[action]
