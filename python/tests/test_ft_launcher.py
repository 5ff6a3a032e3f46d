"""nvidia-resiliency-ext's heartbeats example, torch replaced, under
`nodeipc launch` given ft_launcher's own command line: its YAML file, its
--ft-* overrides and torchrun's options with underscores, the script named
without `-- python`. A hung rank is killed by its monitor and the job
restarted; the launcher exits 0."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from conftest import HERE, rust_program

# The example's own configuration file (fault_tol_cfg_heartbeats.yaml),
# as NVRx ships it: no timeouts given, log level DEBUG.
YAML = """fault_tolerance:
    initial_rank_heartbeat_timeout: null
    rank_heartbeat_timeout: null
    log_level: "DEBUG"
"""


def test_nvrx_heartbeats_example_restarts_a_hung_rank_and_ends_0(tmp_path: pathlib.Path):
    (tmp_path / "fault_tol_cfg_heartbeats.yaml").write_text(YAML)
    env = dict(os.environ, PYTHON=sys.executable)
    # The job script's line with `ft_launcher` replaced by `nodeipc launch`.
    argv = [
        rust_program("nodeipc"), "launch",
        "--nproc_per_node=2",
        "--max_restarts=2",
        "--ft-cfg-path=fault_tol_cfg_heartbeats.yaml",
        "--ft-initial-rank-heartbeat-timeout=30",
        "--ft-rank-heartbeat-timeout=2",
        "--ft-workload-check-interval=0.2",
        "--ft-rank-termination-signal=SIGKILL",
        "--monitor-interval=1",
        str(HERE / "ft_train_py.py"), "20",
    ]
    done = subprocess.run(
        argv, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=120,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    # The monitor, not a timeout of the test, ended the hung rank.
    assert "rank 1: simulated hang at iteration 5" in out, out
    assert "heartbeat timeout" in out, out
    assert "round 1 started" in out, out
    # Both ranks completed in the restarted round.
    for rank in (0, 1):
        assert (tmp_path / f"done-{rank}").read_text() == "1", out
    # Warned once for the file's log level and once for --monitor-interval.
    assert out.count("accepted, no effect") == 2, out
