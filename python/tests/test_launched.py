"""Ranks under `nodeipc launch`: Python ranks alone, then a C++
KittensBroker rank, a C rank, a Python rank and a Rust rank in one group,
each joining by the NODEIPC_GROUP the launcher sets, taken as it is, and
all-gathering "<language> rank <r> pid <pid>". (C and C++ ranks alone:
capi/tests/it/launched.rs; Rust ranks alone: cli/tests/it/launch.rs.)"""

from __future__ import annotations

import pathlib
import subprocess
import sys
from typing import List

from conftest import HERE, c_program, ours_in_dev_shm, rust_program

# Rank 0 is C++ (KittensBroker; it creates the group), 1 C, 2 Python, 3
# Rust: "$1".."$5" are the programs, in that order.
DISPATCH = (
    'case "$LOCAL_RANK" in'
    ' 0) exec "$1" c++ ;;'
    ' 1) exec "$2" ;;'
    ' 2) exec "$3" "$4" ;;'
    ' 3) exec "$5" launched "$NODEIPC_GROUP" "$LOCAL_RANK" "$LOCAL_WORLD_SIZE" auto ;;'
    ' *) echo "no rank $LOCAL_RANK" >&2; exit 2 ;;'
    " esac"
)


def launch(run_dir: pathlib.Path, nproc: int, command: List[str]) -> str:
    """`nodeipc launch --nproc NPROC -- COMMAND`; its stdout, once it
    exited 0."""
    done = subprocess.run(
        [rust_program("nodeipc"), "launch", "--nproc", str(nproc), "--stop-timeout", "5",
         "--run-dir", str(run_dir), "--", *command],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=50,
    )
    assert done.returncode == 0, f"launch exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def gathered(stdout: str, languages: List[str]) -> None:
    """Every rank r said it is `languages[r]`, gathered every rank's
    "<language> rank <r> pid <pid>" with the pids the ranks said they run
    as (as many processes as ranks), in one group whose name starts with
    '/' and which leaves nothing in /dev/shm."""
    said = {}
    for line in stdout.splitlines():
        if line.startswith("rank ") and " gathered: " in line:
            head, what = line.split(" gathered: ", 1)
            _, rank, _, pid, _, group = head.split(" ", 5)
            said[int(rank)] = (int(pid), group, what)
    nproc = len(languages)
    assert sorted(said) == list(range(nproc)), stdout
    pids = [said[r][0] for r in range(nproc)]
    assert len(set(pids)) == nproc, pids
    expected = "|".join(f"{languages[r]} rank {r} pid {pids[r]}" for r in range(nproc))
    for rank, (_, group, what) in said.items():
        assert (group, what) == (said[0][1], expected), (rank, said)
    group = said[0][1]
    assert group.startswith("/nodeipc-"), group
    assert not ours_in_dev_shm(group), ours_in_dev_shm(group)


def test_python_ranks_join_the_launchers_group_verbatim(private_dir):
    out = launch(private_dir, 2, [sys.executable, str(HERE / "launched_rank_py.py")])
    gathered(out, ["python", "python"])


def test_cpp_c_python_and_rust_ranks_meet_in_one_launched_group(private_dir):
    cpp = c_program("launched_rank.cpp", private_dir)
    c = c_program("launched_rank.c", private_dir)
    out = launch(
        private_dir,
        4,
        ["sh", "-c", DISPATCH, "sh", cpp, c, sys.executable, str(HERE / "launched_rank_py.py"),
         rust_program("rank")],
    )
    gathered(out, ["c++", "c", "python", "rust"])
