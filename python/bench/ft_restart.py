"""Time from a rank's hang to the whole group restarted (issue 33), with N
ranks: `nodeipc launch` given ft_launcher's command line, beside a launcher
written as nvidia-resiliency-ext 0.7.0's is (a rank monitor process per
rank, pickled messages over a Unix socket, the launcher polling its
workers every `--monitor-interval`, then stopping them all with SIGTERM
and starting them again). Both get the same heartbeat timeout and the same
check interval; NVRx's launcher polls at its default 0.3 s.

Each rank heartbeats every 20 ms; in round 0 rank 3 writes the time
(CLOCK_MONOTONIC, one clock for all processes) and hangs. In round 1 each
rank writes the time it started. The figure is the last restarted rank's
start minus the hang, less the heartbeat timeout: what detection, stop and
restart cost beyond the timeout itself.

    python3 python/bench/ft_restart.py [--ranks 8] [--rounds 5]

(`nodeipc` on PATH or NODEIPC_BIN; the nodeipc package importable.) Not run
in CI: a measurement, printed with its median and min–max.
"""

from __future__ import annotations

import argparse
import os
import pickle
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

TIMEOUT = 1.0  # heartbeat timeout, both
CHECK = 0.1  # the monitors' check interval, both
NVRX_MONITOR_INTERVAL = 0.3  # ft_launcher's default worker poll
HANG_RANK = 3


def rank_main(kind: str, out: str) -> None:
    """One rank: a client of its monitor, heartbeats, the hang in round 0."""
    rank = int(os.environ["RANK"])
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if restart == 1:
        with open(os.path.join(out, f"start-{rank}"), "w") as f:
            f.write(repr(time.monotonic()))
    if kind == "nodeipc":
        from nodeipc.monitor import RankMonitorClient

        client = RankMonitorClient()
        client.init_workload_monitoring()
        beat = client.send_heartbeat
    else:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(os.environ["FT_RANK_MONITOR_IPC_SOCKET"])
        send(conn, {"type": "init", "pid": os.getpid(), "rank": rank})
        assert recv(conn) == {"ok": True}
        beat = lambda: send(conn, {"type": "heartbeat"})  # noqa: E731
    for iteration in range(1000):
        if restart == 0 and rank == HANG_RANK and iteration == 10:
            with open(os.path.join(out, "hang"), "w") as f:
                f.write(repr(time.monotonic()))
            time.sleep(3600)
        beat()
        time.sleep(0.02)
        if restart == 1 and iteration == 5:
            return


# NVRx's wire form: a length-prefixed pickle.
def send(conn: socket.socket, obj) -> None:
    data = pickle.dumps(obj)
    conn.sendall(len(data).to_bytes(4, "little") + data)


def recv(conn: socket.socket):
    head = b""
    while len(head) < 4:
        chunk = conn.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    size = int.from_bytes(head, "little")
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return pickle.loads(data)


def nvrx_monitor(path: str) -> None:
    """A rank monitor as NVRx's: accepts its rank, unpickles its messages,
    checks every CHECK seconds, kills a rank silent for TIMEOUT."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    while True:
        conn, _ = server.accept()
        pid = None
        last = time.monotonic()
        while True:
            ready, _, _ = select.select([conn], [], [], CHECK)
            if ready:
                msg = recv(conn)
                if msg is None:
                    break
                if msg["type"] == "init":
                    pid = msg["pid"]
                    send(conn, {"ok": True})
                last = time.monotonic()
            if pid is not None and time.monotonic() - last > TIMEOUT:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                break
        conn.close()


def nvrx_launch(ranks: int, out: str) -> None:
    """ft_launcher's loop: monitors that persist across restarts, workers
    polled every NVRX_MONITOR_INTERVAL, a failure stops all (SIGTERM, then
    SIGKILL after a grace) and starts round 1."""
    sockets = [os.path.join(out, f"rmon{r}.sock") for r in range(ranks)]
    monitors = []
    for path in sockets:
        pid = os.fork()
        if pid == 0:
            try:
                nvrx_monitor(path)
            finally:
                os._exit(0)
        monitors.append(pid)
    while not all(os.path.exists(p) for p in sockets):
        time.sleep(0.01)
    try:
        for restart in (0, 1):
            workers = []
            for r in range(ranks):
                env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r),
                           TORCHELASTIC_RESTART_COUNT=str(restart),
                           FT_RANK_MONITOR_IPC_SOCKET=sockets[r])
                workers.append(subprocess.Popen(
                    [sys.executable, "-u", __file__, "--rank", "nvrx", out], env=env))
            while True:
                time.sleep(NVRX_MONITOR_INTERVAL)
                codes = [w.poll() for w in workers]
                if all(c == 0 for c in codes):
                    return
                if any(c not in (None, 0) for c in codes):
                    break
            for w in workers:
                if w.poll() is None:
                    w.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 15
            for w in workers:
                try:
                    w.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    w.kill()
                    w.wait()
    finally:
        for pid in monitors:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def nodeipc_launch(ranks: int, out: str) -> None:
    program = os.environ.get("NODEIPC_BIN", "nodeipc")
    subprocess.run(
        [program, "launch", f"--nproc-per-node={ranks}", "--max-restarts=1",
         "--ft-initial-rank-heartbeat-timeout=60",
         f"--ft-rank-heartbeat-timeout={TIMEOUT}",
         f"--ft-workload-check-interval={CHECK}",
         "--ft-rank-termination-signal=SIGKILL",
         "--stop-timeout=15",
         __file__, "--rank", "nodeipc", out],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env=dict(os.environ, PYTHON=sys.executable),
    )


def one(kind: str, ranks: int) -> float:
    with tempfile.TemporaryDirectory(prefix="ft-restart-") as out:
        (nodeipc_launch if kind == "nodeipc" else nvrx_launch)(ranks, out)
        hang = float(open(os.path.join(out, "hang")).read())
        starts = [float(open(os.path.join(out, f"start-{r}")).read()) for r in range(ranks)]
        return max(starts) - hang - TIMEOUT


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        rank_main(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results = {"nodeipc": [], "nvrx-design": []}
    for _ in range(args.rounds):  # interleaved
        for kind in results:
            results[kind].append(one("nodeipc" if kind == "nodeipc" else "nvrx", args.ranks))
    print(f"hang to all {args.ranks} ranks restarted, beyond the {TIMEOUT} s timeout "
          f"(check every {CHECK} s; NVRx polls workers every {NVRX_MONITOR_INTERVAL} s):")
    for kind, values in results.items():
        print(f"  {kind:12} median {statistics.median(values) * 1000:7.0f} ms  "
              f"min-max {min(values) * 1000:.0f}-{max(values) * 1000:.0f} ms  (n={len(values)})")
    ratio = statistics.median(results["nvrx-design"]) / statistics.median(results["nodeipc"])
    print(f"  nvrx-design / nodeipc: {ratio:.2f}x")


if __name__ == "__main__":
    main()
