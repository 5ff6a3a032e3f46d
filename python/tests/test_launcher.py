"""The wheel's console script `nodeipc` becomes the native program it
carries (exec: same process, nothing of Python left), for the launcher and
every other subcommand."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys

import nodeipc._launcher

from conftest import skip

PROGRAM = nodeipc._launcher.PROGRAM

# A rank reports its parent (the launcher): pid, program, ignored signals
# (SigIgn, hex); then the ignored signals a program it runs starts with. A
# shell and grep, not Python: Python ignores SIGPIPE and SIGXFSZ itself.
RANK = (
    'echo report $PPID "$(readlink /proc/$PPID/exe)"'
    ' "$(grep ^SigIgn: /proc/$PPID/status | cut -f2)"'
    ' "$(grep ^SigIgn: /proc/self/status | cut -f2)"'
)


def console_script() -> str:
    """The `nodeipc` script pip installed beside this interpreter."""
    path = pathlib.Path(sys.executable).parent / "nodeipc"
    if not path.is_file():
        skip(f"no console script {path}: the package is not installed from its wheel")
    if not PROGRAM.is_file():
        skip(f"{PROGRAM} is missing: a wheel built by python/build-wheel.sh carries it")
    return str(path)


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=60)


def test_the_launcher_is_the_script_process_itself_with_no_signal_of_pythons_ignored():
    script = console_script()
    child = subprocess.Popen(
        [script, "launch", "--nproc", "1", "--", "sh", "-c", RANK],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 0, f"{out}\n{err}"
    reports = [line.split() for line in out.splitlines() if line.startswith("report ")]
    assert len(reports) == 1, f"{out}\n{err}"
    _, parent, exe, parent_ignored, rank_ignored = reports[0]
    # exec kept the process: the rank's parent is the process the script
    # started as, now running the packaged program (not Python).
    assert int(parent) == child.pid
    assert os.path.samefile(exe, PROGRAM), exe
    # Python ignores SIGPIPE and SIGXFSZ; neither reaches the ranks. (The
    # launcher, a Rust program, ignores SIGPIPE itself, and its standard
    # library restores it for children: only SIGXFSZ tells for it.)
    for signum in (signal.SIGPIPE, signal.SIGXFSZ):
        assert not int(rank_ignored, 16) & (1 << (signum - 1)), f"rank ignores {signum.name}"
    assert not int(parent_ignored, 16) & (1 << (signal.SIGXFSZ - 1)), "launcher ignores SIGXFSZ"


def test_the_script_and_python_m_answer_as_the_program_does():
    script = console_script()
    for argv in (["--version"], ["no-such-subcommand"], ["launch", "--help"]):
        direct = run(str(PROGRAM), *argv)
        for through in (run(script, *argv), run(sys.executable, "-m", "nodeipc", *argv)):
            assert (through.returncode, through.stdout, through.stderr) == (
                direct.returncode,
                direct.stdout,
                direct.stderr,
            ), argv
    assert run(script, "--version").stdout.startswith("nodeipc ")


def test_without_the_program_the_script_says_so_and_exits_127(tmp_path: pathlib.Path):
    missing = tmp_path / "nodeipc"
    done = run(
        sys.executable,
        "-c",
        "import pathlib, nodeipc._launcher as l;"
        f"l.PROGRAM = pathlib.Path({str(missing)!r}); l.main()",
        "launch",
    )
    assert done.returncode == 127
    assert f"the native program is not in this installation ({missing} is missing)" in done.stderr
