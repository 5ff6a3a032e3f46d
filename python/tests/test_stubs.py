"""The type stubs match the extension module (mypy's stubtest), and a
script using the package type-checks under mypy --strict."""

import pathlib
import subprocess
import sys

from conftest import HERE, require_module

USER = '''
import nodeipc
from nodeipc.monitor import RankMonitorClient

region = nodeipc.Region.anonymous(64)
view: memoryview = memoryview(region)
group: nodeipc.Group = nodeipc.Group("/nodeipc-typed", 0, 1, timeout=None)
gathered: list[bytes] = group.all_gather(b"x", timeout=1.0)
fds: list[int | None] = group.exchange_fds(region.fileno())
sem = nodeipc.ShmSemaphore(region, offset=8, initial=0)
sem.wait(timeout=None)
client = RankMonitorClient("/tmp/socket", check_interval=0.5)
ready: bool = client.calculate_and_set_hb_timeouts(skip_if_not_ready=True)
state: dict[str, object] = client.state_dict()
'''


def test_the_stubs_match_the_extension_module():
    require_module("mypy")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy.stubtest",
            "nodeipc._native",
            "--allowlist",
            str(HERE / "stubtest-allowlist.txt"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_script_using_the_package_type_checks(tmp_path: pathlib.Path):
    require_module("mypy")
    script = tmp_path / "user.py"
    script.write_text(USER)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_package_itself_type_checks_strictly(tmp_path: pathlib.Path):
    require_module("mypy")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "-p", "nodeipc"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
