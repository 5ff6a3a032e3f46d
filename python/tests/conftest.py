"""Shared fixtures: unique names, a watchdog per test, the leak check, and
the Rust programs some tests drive (`nodeipc`, the integration tests'
`rank`) and the C/C++ ones they build on the C ABI's libnodeipc.a. Under
CI=true a missing module or program fails the test instead of skipping
it."""

from __future__ import annotations

import faulthandler
import importlib
import itertools
import json
import os
import pathlib
import secrets
import shutil
import signal
import subprocess
import sys
from typing import Iterator, List

import pytest

CI = os.environ.get("CI") == "true"
REPO = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
_counter = itertools.count()


def skip(reason: str) -> None:
    """Skips the test; under CI=true, fails it: a skip is not a pass."""
    if CI:
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


def require_module(name: str):
    try:
        return importlib.import_module(name)
    except ImportError:
        skip(f"Python module {name} is missing (pip install {name})")


def built_file(name: str, what: str, build: str, executable: bool) -> str:
    """A file `build` (a cargo command) made: in NODEIPC_BIN_DIR, else
    $CARGO_TARGET_DIR/debug, else target/debug of the repository."""
    candidates = []
    if os.environ.get("NODEIPC_BIN_DIR"):
        candidates.append(pathlib.Path(os.environ["NODEIPC_BIN_DIR"]))
    if os.environ.get("CARGO_TARGET_DIR"):
        candidates.append(pathlib.Path(os.environ["CARGO_TARGET_DIR"]) / "debug")
    candidates.append(REPO / "target" / "debug")
    for directory in candidates:
        path = directory / name
        if path.is_file() and (not executable or os.access(path, os.X_OK)):
            return str(path)
    skip(f"{what} {name} is not built ({build}; looked in {candidates})")
    raise AssertionError("unreachable")


def rust_program(name: str) -> str:
    """A program built by `cargo build` (see `built_file`)."""
    return built_file(name, "the Rust program", "cargo build", executable=True)


def c_program(source: str, out_dir: pathlib.Path) -> str:
    """Compiles capi/tests/c/SOURCE (C11 with $CC else cc for a .c, C++17
    with $CXX else g++ for a .cpp) against the C ABI's headers and the
    static library `cargo build -p nodeipc-capi` made; the program's path.
    Skipped (failed under CI=true) without a compiler or the library."""
    library = built_file(
        "libnodeipc.a", "the C ABI's static library", "cargo build -p nodeipc-capi", executable=False
    )
    if source.endswith(".cpp"):
        compiler, std = os.environ.get("CXX", "g++"), "-std=c++17"
    else:
        compiler, std = os.environ.get("CC", "cc"), "-std=c11"
    if shutil.which(compiler) is None:
        skip(f"no compiler {compiler} to build {source}")
    program = out_dir / pathlib.Path(source).name.replace(".", "_")
    done = subprocess.run(
        [compiler, std, "-O1", "-Wall", "-Wextra", "-Werror", "-o", str(program),
         "-I", str(REPO / "capi" / "include"), str(REPO / "capi" / "tests" / "c" / source),
         library, "-lpthread", "-ldl", "-lm", "-lrt"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, f"{compiler} failed on {source}:\n{done.stderr}"
    return str(program)


def ours_in_dev_shm(fragment: str) -> List[str]:
    fragment = fragment.lstrip("/")
    return sorted(n for n in os.listdir("/dev/shm") if fragment in n)


@pytest.fixture
def unique_name(request) -> Iterator[callable]:
    """Makes `/nodeipc-test-py-...` names unique to this run and test, and
    checks after the test that none is left in /dev/shm."""
    run = f"{os.getpid()}-{secrets.token_hex(4)}"
    prefix = f"/nodeipc-test-py-{run}-"

    def make(tag: str = "x") -> str:
        return f"{prefix}{tag}-{next(_counter)}"

    yield make
    leaked = ours_in_dev_shm(prefix)
    for name in leaked:
        try:
            os.unlink(f"/dev/shm/{name}")
        except OSError:
            pass
    assert not leaked, f"left in /dev/shm: {leaked}"


@pytest.fixture(autouse=True)
def watchdog():
    """Dumps every thread's stack and exits if a test hangs for 60 s."""
    faulthandler.dump_traceback_later(60, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def private_dir() -> Iterator[pathlib.Path]:
    """A private (0700) directory for sockets and configs, removed after."""
    import tempfile

    path = pathlib.Path(tempfile.mkdtemp(prefix="pytest-nodeipc-"))
    os.chmod(path, 0o700)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def python_child(script: str, *args: str, **kwargs) -> subprocess.Popen:
    """Runs tests/<script> in this interpreter, stdout piped."""
    return subprocess.Popen(
        [sys.executable, str(HERE / script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


@pytest.fixture
def monitor(private_dir):
    """Starts `nodeipc monitor serve`: `monitor(**config)` returns the socket
    of a new one; each is stopped (SIGTERM) after the test."""
    started = []

    def start(**config):
        socket = private_dir / f"monitor-{len(started)}.sock"
        path = private_dir / f"monitor-{len(started)}.json"
        defaults = {"check_interval_ms": 100, "termination_signal": "SIGKILL"}
        path.write_text(json.dumps({**defaults, **config}))
        proc = subprocess.Popen(
            [rust_program("nodeipc"), "monitor", "serve", "--socket", str(socket), "--config", str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(proc)
        return str(socket)

    yield start
    for proc in started:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        assert proc.returncode == 0, proc.stderr
