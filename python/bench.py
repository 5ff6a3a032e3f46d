"""Figures for the Python package, printed in one run:

* a heartbeat through RankMonitorClient's shared-memory fast path, through
  its socket path, and through a pickle-over-Unix-socket client written the
  way nvidia-resiliency-ext's is (a pickled request and a pickled ``OkMsg``
  reply per heartbeat, length-prefixed);
* a barrier of 2 Python processes through nodeipc.Group against
  ``multiprocessing.Barrier``.

Each row is the median of ``--rounds`` rounds of ``--iterations`` calls, with
the spread (min–max of the rounds). Needs the ``nodeipc`` program (``cargo
build -p nodeipc-cli``; ``--nodeipc PATH`` or NODEIPC_BIN_DIR) for the monitor.

    python python/bench.py --rounds 21 --iterations 20000
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import pathlib
import pickle
import secrets
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import tempfile
import time
from typing import Callable, List

import nodeipc
from nodeipc.monitor import RankMonitorClient


def rounds_of(call: Callable[[], None], iterations: int, rounds: int) -> List[float]:
    """Nanoseconds per call, one figure per round."""
    figures = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for _ in range(iterations):
            call()
        figures.append((time.perf_counter_ns() - start) / iterations)
    return figures


def row(label: str, figures: List[float]) -> float:
    median = statistics.median(figures)
    print(f"{label:<48} {median:>12.0f} ns   (spread {min(figures):.0f}–{max(figures):.0f})")
    return median


# -- the nvidia-resiliency-ext style client --------------------------------


class HeartbeatMsg:
    def __init__(self, rank: int, state=None):
        self.rank = rank
        self.state = state


class OkMsg:
    def __init__(self, cfg=None):
        self.cfg = cfg


def _send(sock: socket.socket, obj) -> None:
    data = pickle.dumps(obj)
    sock.sendall(struct.pack("<I", len(data)) + data)


def _recv(sock: socket.socket):
    def exact(n):
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise EOFError
            buf += chunk
        return buf

    (length,) = struct.unpack("<I", exact(4))
    return pickle.loads(exact(length))


def pickle_server(path: str, ready) -> None:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    ready.set()
    conn, _ = server.accept()
    try:
        while True:
            msg = _recv(conn)
            assert isinstance(msg, HeartbeatMsg)
            _send(conn, OkMsg())
    except EOFError:
        pass


# -- barriers ----------------------------------------------------------------


def nodeipc_rank(name: str, rank: int, iterations: int, rounds: int, out) -> None:
    group = nodeipc.Group(name, rank, 2, timeout=60)
    figures = rounds_of(group.barrier, iterations, rounds)
    if rank == 0:
        out.send(figures)
    group.leave()


def mp_rank(barrier, rank: int, iterations: int, rounds: int, out) -> None:
    figures = rounds_of(barrier.wait, iterations, rounds)
    if rank == 0:
        out.send(figures)


def two_processes(target, args_for) -> List[float]:
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    procs = [ctx.Process(target=target, args=(*args_for(r), send)) for r in range(2)]
    for p in procs:
        p.start()
    figures = receive.recv()
    for p in procs:
        p.join(60)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--iterations", type=int, default=20000)
    parser.add_argument("--nodeipc", help="the nodeipc program")
    args = parser.parse_args()
    program = args.nodeipc or shutil.which("nodeipc")
    if program is None:
        bin_dir = os.environ.get("NODEIPC_BIN_DIR") or str(pathlib.Path(__file__).resolve().parents[1] / "target" / "debug")
        program = os.path.join(bin_dir, "nodeipc")
    it, rounds = args.iterations, args.rounds
    print(f"{rounds} rounds of {it} calls each; median per call")

    workdir = tempfile.mkdtemp(prefix="bench-nodeipc-")
    os.chmod(workdir, 0o700)
    monitors = []
    try:
        medians = {}
        for granted in (True, False):
            sock = os.path.join(workdir, f"monitor-{granted}.sock")
            config = os.path.join(workdir, f"monitor-{granted}.json")
            with open(config, "w") as f:
                json.dump({"heartbeat_region": granted}, f)
            monitors.append(
                subprocess.Popen(
                    [program, "monitor", "serve", "--socket", sock, "--config", config],
                    stderr=subprocess.DEVNULL,
                )
            )
            client = RankMonitorClient(sock, rank=0)
            client.init_workload_monitoring()
            assert client.uses_shared_memory_heartbeats == granted
            label = "heartbeat, shared-memory fast path" if granted else "heartbeat, socket path"
            medians[granted] = row(label, rounds_of(client.send_heartbeat, it, rounds))
            client.shutdown_workload_monitoring()

        path = os.path.join(workdir, "pickle.sock")
        ctx = multiprocessing.get_context("fork")
        ready = ctx.Event()
        server = ctx.Process(target=pickle_server, args=(path, ready))
        server.start()
        ready.wait(10)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)

        def pickled_heartbeat() -> None:
            _send(conn, HeartbeatMsg(0))
            _recv(conn)

        pickled = row("heartbeat, pickle over a Unix socket (NVRx style)", rounds_of(pickled_heartbeat, max(it // 10, 1), rounds))
        conn.close()
        server.join(10)
        print(f"  fast path vs pickle client: {pickled / medians[True]:.0f}x (target >= 1000x)")
        print(f"  socket path vs pickle client: {pickled / medians[False]:.1f}x")

        name = f"/nodeipc-bench-py-{os.getpid()}-{secrets.token_hex(4)}"
        ours = row("barrier of 2 processes, nodeipc.Group", two_processes(nodeipc_rank, lambda r: (name, r, it, rounds)))
        barrier = multiprocessing.get_context("fork").Barrier(2)
        theirs = row(
            "barrier of 2 processes, multiprocessing.Barrier",
            two_processes(mp_rank, lambda r: (barrier, r, max(it // 10, 1), rounds)),
        )
        print(f"  nodeipc.Group vs multiprocessing.Barrier: {theirs / ours:.0f}x (target >= 20x)")
    finally:
        for m in monitors:
            m.send_signal(signal.SIGTERM)
            m.wait(20)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
