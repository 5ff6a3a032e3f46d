"""RankMonitorClient against a real monitor (`nodeipc monitor serve`): a
training loop killed for a hang, calculated timeouts surviving a restart
through state_dict, the socket path, the rank from the environment, errors."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import nodeipc
from conftest import HERE, python_child, rust_program  # noqa: F401
from nodeipc.monitor import RankMonitorClient, RankMonitorClientError


def run_rank(*args, env):
    """Runs tests/train_py.py to its end."""
    return subprocess.run(
        [sys.executable, str(HERE / "train_py.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def child_env(socket, **extra):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "NODEIPC_RANK", "LOCAL_RANK")}
    env["NODEIPC_MONITOR_SOCKET"] = socket
    env.update(extra)
    return env


def test_a_training_loop_that_hangs_is_killed_and_its_timeouts_were_calculated(monitor):
    socket = monitor(heartbeat_region=True)
    child = python_child("train_py.py", "hang", env=child_env(socket))
    lines = []
    while True:
        line = child.stdout.readline()
        assert line, f"the rank ended early: {lines} {child.stderr.read()}"
        lines.append(line.strip())
        if line.strip() == "hanging":
            break
    hung = time.monotonic()
    out, err = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL, f"{lines} {out} {err}"
    assert "still alive" not in out
    # Heartbeats every ~10 ms: 5 x that is far below the floor of
    # max(1 s, 2 x 0.1 s), which is what was set.
    assert "shared memory True" in lines
    assert "hb 1.0" in lines, lines
    assert "step 1.0" in lines, lines
    # Killed after about the heartbeat timeout, not the 60 s of its sleep.
    assert time.monotonic() - hung < 10


def test_calculated_timeouts_survive_a_restart_through_state_dict(monitor, private_dir):
    socket = monitor(heartbeat_region=True, restart_expected=True)
    state = private_dir / "state.json"
    saved = run_rank("save", str(state), env=child_env(socket))
    assert saved.returncode == 0, saved.stdout + saved.stderr
    kept = json.loads(state.read_text())
    assert kept["hb_timeouts"]["were_calculated"] is True
    assert kept["hb_timeouts"]["subsequent"] == 1.0
    assert kept["section_timeouts"]["calculated_sections"] == ["step"]
    # The job restarts: a new monitor, which knows nothing of them.
    fresh = monitor(heartbeat_region=True, restart_expected=True)
    restored = run_rank("restore", str(state), env=child_env(fresh))
    assert restored.returncode == 0, restored.stdout + restored.stderr
    lines = restored.stdout.splitlines()
    assert "before hb None" in lines, lines
    assert "hb 1.0" in lines and "step 1.0" in lines, lines
    assert "calculated True" in lines


def test_heartbeats_go_over_the_socket_when_no_region_is_granted(monitor):
    socket = monitor(heartbeat_region=False)
    done = run_rank("socket", env=child_env(socket))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "shared memory False" in done.stdout
    assert "heartbeats 5" in done.stdout


def test_a_refusal_and_a_timeout_say_which_they_are(monitor, private_dir):
    client = RankMonitorClient(monitor(), rank=0, timeout=5)
    client.init_workload_monitoring()
    try:
        with pytest.raises(nodeipc.RefusedError) as caught:
            client.end_section("never-opened")
        assert isinstance(caught.value, RankMonitorClientError)
        assert "never-opened" in str(caught.value)
    finally:
        client.shutdown_workload_monitoring()
    with pytest.raises(nodeipc.TimeoutError) as caught:
        RankMonitorClient(str(private_dir / "nobody.sock"), timeout=0.2).init_workload_monitoring()
    assert isinstance(caught.value, RankMonitorClientError)


def test_section_timeouts_need_no_heartbeats(monitor):
    done = run_rank("sections", env=child_env(monitor()))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "step 1.0 out 1.0" in done.stdout and "hb None" in done.stdout, done.stdout


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"NODEIPC_RANK": "7", "RANK": "3", "LOCAL_RANK": "2"}, "rank 7 local 2"),
        ({"RANK": "3"}, "rank 3 local 0"),
        ({}, "rank 0 local 0"),
    ],
)
def test_the_rank_comes_from_the_environment(monitor, env, expected):
    socket = monitor()
    done = run_rank("rank", env=child_env(socket, **env))
    assert done.returncode == 0, done.stdout + done.stderr
    assert expected in done.stdout


def test_errors_are_rank_monitor_client_errors(private_dir, monkeypatch):
    monkeypatch.delenv("NODEIPC_MONITOR_SOCKET", raising=False)
    client = RankMonitorClient()
    with pytest.raises(RankMonitorClientError) as caught:
        client.init_workload_monitoring()
    assert "NODEIPC_MONITOR_SOCKET" in str(caught.value)
    with pytest.raises(RankMonitorClientError):
        client.send_heartbeat()
    nobody = str(private_dir / "nobody.sock")
    start = time.monotonic()
    with pytest.raises(RankMonitorClientError) as caught:
        RankMonitorClient(nobody, timeout=0.3).init_workload_monitoring()
    assert time.monotonic() - start < 5
    assert nobody in str(caught.value)
    assert isinstance(caught.value, nodeipc.NodeipcError)
    with pytest.raises(RankMonitorClientError):
        RankMonitorClient(nobody, check_interval=-1)
    monkeypatch.setenv("NODEIPC_RANK", "seven")
    with pytest.raises(RankMonitorClientError) as caught:
        RankMonitorClient(nobody).init_workload_monitoring()
    assert "NODEIPC_RANK" in str(caught.value)
    with pytest.raises(RankMonitorClientError):
        RankMonitorClient(nobody).load_state_dict({"nothing": 1})


def test_the_safety_floor_follows_the_check_interval(monkeypatch):
    assert RankMonitorClient("x", check_interval=0.1).safety_floor == 1.0
    assert RankMonitorClient("x", check_interval=2.5).safety_floor == 5.0
    monkeypatch.setenv("NODEIPC_MONITOR_CHECK_INTERVAL", "0.75")
    assert RankMonitorClient("x").safety_floor == 1.5


def test_timeouts_calculated_over_a_group_are_the_maximum_of_its_ranks(monitor, unique_name):
    name = unique_name("ft-group")
    # Rank 0 beats every ~10 ms, rank 1 every ~1 s: alone, rank 0 would
    # get the floor; together both get rank 1's ~5 x 1 s (a margin a loaded
    # machine needs: rank 0 does not beat while it waits for rank 1).
    ranks = [
        python_child("train_py.py", "group", name, str(r), pause, env=child_env(monitor()))
        for r, pause in ((0, "0.01"), (1, "1.0"))
    ]
    outputs = []
    for proc in ranks:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, out + err
        outputs.append(out.splitlines())
    hb = [float(line.split()[1]) for out in outputs for line in out if line.startswith("hb ")]
    step = [float(line.split()[1]) for out in outputs for line in out if line.startswith("step ")]
    assert len(hb) == 2 and hb[0] == hb[1] and hb[0] >= 4.5, outputs
    assert len(step) == 2 and step[0] == step[1] and step[0] >= 4.5, outputs
