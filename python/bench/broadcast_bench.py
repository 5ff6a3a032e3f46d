"""Broadcast-queue benchmark: one writer process, N reader processes, any
queue with vLLM's ``MessageQueue`` API, named by import path.

    python python/bench/broadcast_bench.py                      # the baseline
    python python/bench/broadcast_bench.py \\
        --impl vllm_algorithm:MessageQueue --impl nodeipc.broadcast:MessageQueue

Several ``--impl`` run in the same process, in interleaved rounds: each round
runs every row of every implementation, one reader count after another and,
for each, the implementations in an order rotating from round to round. Rows:

* broadcast latency of a 1 KiB object to 1, 2 and 4 readers: from just
  before ``enqueue`` to the return of the *last* reader's ``dequeue``, both
  read from CLOCK_MONOTONIC (one clock for all processes on Linux). The
  writer waits for every reader's reply (on a ``MessageQueue(1, 1)`` per
  reader, as vLLM's executor does) before the next message, so both
  implementations see the same closed-loop load; the round trip with the
  replies is its own row. A round's figure is the median of its messages.
* throughput of 1 MiB and 32 MiB objects (the latter larger than the
  24 MiB chunk) to 1 and 2 readers: messages sent back to back, from the
  first ``enqueue`` to the last reader's return of the last ``dequeue``,
  payload bytes only.
* CPU of an idle reader (``/proc/<pid>/stat`` utime + stime, all its
  threads, as a % of one core) over the 5 s after its last message, and
  over the 5 s after that; then the wake-up of the first ``dequeue`` after
  10 s idle (``enqueue`` time to the reader's return). A reader that spins
  with ``sched_yield`` gets only its share of a busy machine, so its 0-5 s
  figure is lower there than on an idle one: compare within one run.

Every row prints the median of its rounds, the min–max and the IQR. The
objects are tuples holding random ``bytes`` (pickled in band by both).
Readers are separate processes (``--start-method spawn`` or ``fork``); each
group of readers is started for its rows and stopped after them, so no
reader spins in the background while another group is measured.

``--quick`` is a smoke run for CI: 3 rounds, small objects (the "large" one
still larger than a 1 MiB chunk) and 2 s idle instead of 10 s. Its figures
are not the benchmark's. ``--json PATH`` writes every round's figure.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import faulthandler
import gc
import importlib
import json
import multiprocessing
import os
import pathlib
import platform
import signal
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

HERE = pathlib.Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))  # so that "vllm_algorithm" imports

KIB = 1024
MIB = 1024 * KIB
BASELINE = "vllm_algorithm:MessageQueue"
#: A reply or a group's start that takes longer than this is a hang.
REPLY_TIMEOUT_S = 300.0
CLK_TCK = os.sysconf("SC_CLK_TCK")


def load(path: str) -> Any:
    """``module:attr`` (or ``module.attr``) to the object it names."""
    module, _, attr = path.partition(":") if ":" in path else path.rpartition(".")
    if not module or not attr:
        raise SystemExit(f"--impl {path!r}: expected module:Class")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as error:
        raise SystemExit(f"--impl {path!r}: {error}") from error


def now_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def cpu_ticks(pid: int) -> int:
    """utime + stime of every thread of ``pid``, in clock ticks."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        text = stat.read()
    # The command name is in parentheses and may hold spaces: split after it.
    fields = text[text.rindex(b")") + 2 :].split()
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of stat(5)


# -- the reader process -----------------------------------------------------


def die_with_parent(parent_pid: int) -> None:
    """The kernel kills this process when its parent dies (a hung run's
    watchdog, Ctrl-C): no reader is left spinning. No thread, no timer."""
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1
    if libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent_pid:  # the parent died before prctl
        os._exit(3)


def reader_main(
    impl: str, handle: Any, rank: int, response_chunk_bytes: int, parent_pid: int, conn
) -> None:
    """A worker as vLLM's: joins the broadcast, offers a reply queue, then
    answers what the writer asks until told to exit."""
    die_with_parent(parent_pid)
    queue_cls = load(impl)
    broadcast = queue_cls.create_from_handle(handle, rank)
    replies = queue_cls(1, 1, max_chunk_bytes=response_chunk_bytes, max_chunks=4)
    conn.send((os.getpid(), replies.export_handle()))
    conn.close()
    broadcast.wait_until_ready()
    replies.wait_until_ready()
    while True:
        kind, last, _payload = broadcast.dequeue(indefinite=True)
        received = now_ns()
        del _payload
        if kind == "exit":
            break
        if kind == "ask" or last:
            replies.enqueue(received)
    del broadcast, replies
    gc.collect()


# -- a group of readers -------------------------------------------------------


class Group:
    """A writer and ``n`` reader processes of one implementation."""

    def __init__(self, impl: str, n: int, config: "Config") -> None:
        self.impl = impl
        self.n = n
        context = multiprocessing.get_context(config.start_method)
        queue_cls = load(impl)
        self.queue = queue_cls(
            n, n, max_chunk_bytes=config.chunk_bytes, max_chunks=config.chunks
        )
        handle = self.queue.export_handle()
        self.processes = []
        self.pipes = []
        for rank in range(n):
            parent, child = context.Pipe()
            process = context.Process(
                target=reader_main,
                args=(impl, handle, rank, config.response_chunk_bytes, os.getpid(), child),
                name=f"reader-{rank}",
                daemon=True,
            )
            process.start()
            child.close()
            self.processes.append(process)
            self.pipes.append(parent)
        self.pids = []
        self.replies = []
        for rank, parent in enumerate(self.pipes):
            if not parent.poll(REPLY_TIMEOUT_S):
                raise RuntimeError(f"{impl}: reader {rank} sent no handle")
            pid, reply_handle = parent.recv()
            self.pids.append(pid)
            self.replies.append(queue_cls.create_from_handle(reply_handle, 0))
        # vLLM's order: the broadcast queue first, then each reply queue.
        self.queue.wait_until_ready()
        for reply in self.replies:
            reply.wait_until_ready()

    def send(self, kind: str, last: bool, payload: Optional[bytes]) -> int:
        """Enqueues one message; returns the time just before."""
        start = now_ns()
        self.queue.enqueue((kind, last, payload))
        return start

    def collect(self) -> List[int]:
        """Every reader's reply: the time its ``dequeue`` returned."""
        return [reply.dequeue(timeout=REPLY_TIMEOUT_S) for reply in self.replies]

    def close(self) -> None:
        self.queue.enqueue(("exit", True, None))
        for process in self.processes:
            process.join(REPLY_TIMEOUT_S)
            if process.exitcode != 0:
                raise RuntimeError(f"{self.impl}: {process.name} exited with {process.exitcode}")
        for pipe in self.pipes:
            pipe.close()
        for obj in [*self.replies, self.queue]:
            close = getattr(obj, "close", None)
            if close is not None:
                close()
        self.replies = []
        self.queue = None
        gc.collect()


# -- what is measured -------------------------------------------------------


@dataclasses.dataclass
class Config:
    rounds: int
    start_method: str
    chunk_bytes: int
    chunks: int
    response_chunk_bytes: int
    latency_readers: List[int]
    latency_bytes: int
    latency_messages: int
    latency_warmup: int
    throughput_readers: List[int]
    throughput: List[tuple]  # (object bytes, messages per round)
    idle_s: float
    cpu_window_s: float
    quick: bool


def size_label(size: int) -> str:
    return f"{size // MIB} MiB" if size >= MIB else f"{size // KIB} KiB"


def measure_latency(group: Group, config: Config, record: Callable) -> None:
    payload = os.urandom(config.latency_bytes)
    one_way, round_trip = [], []
    for i in range(config.latency_warmup + config.latency_messages):
        start = group.send("ask", False, payload)
        received = group.collect()
        done = now_ns()
        if i >= config.latency_warmup:
            one_way.append(max(received) - start)
            round_trip.append(done - start)
    label = size_label(config.latency_bytes)
    readers = f"{group.n} reader{'s' if group.n > 1 else ''}"
    record(f"latency {label} to {readers}", "us", statistics.median(one_way) / 1e3)
    record(f"round trip {label}, {readers} reply", "us", statistics.median(round_trip) / 1e3)


def measure_throughput(group: Group, size: int, messages: int, record: Callable) -> None:
    payload = os.urandom(size)
    group.send("ask", True, payload)  # warm-up: every chunk path touched once
    group.collect()
    start = now_ns()
    for i in range(messages):
        group.send("data", i == messages - 1, payload)
    end = max(group.collect())
    readers = f"{group.n} reader{'s' if group.n > 1 else ''}"
    mib_per_s = size * messages / MIB / ((end - start) / 1e9)
    record(f"throughput {size_label(size)} to {readers}", "MiB/s", mib_per_s)


def measure_idle(group: Group, config: Config, record: Callable) -> None:
    """One reader: its CPU while idle, then its first wake-up."""
    pid = group.pids[0]
    group.send("ask", False, b"")
    group.collect()
    t0, c0 = time.monotonic(), cpu_ticks(pid)
    time.sleep(config.cpu_window_s)
    t1, c1 = time.monotonic(), cpu_ticks(pid)
    time.sleep(max(0.0, config.idle_s - config.cpu_window_s))
    t2, c2 = time.monotonic(), cpu_ticks(pid)
    start = group.send("ask", False, b"")
    (received,) = group.collect()
    w = f"{config.cpu_window_s:g}"
    record(f"idle reader CPU, 0-{w} s after", "% core", 100 * (c1 - c0) / CLK_TCK / (t1 - t0))
    if t2 - t1 > 0.5:
        record(
            f"idle reader CPU, {w}-{config.idle_s:g} s after",
            "% core",
            100 * (c2 - c1) / CLK_TCK / (t2 - t1),
        )
    record(f"wake-up after {config.idle_s:g} s idle", "us", (received - start) / 1e3)


def reader_counts(config: Config) -> List[int]:
    return sorted(set(config.latency_readers) | set(config.throughput_readers) | {1})


def run_group(impl: str, n: int, config: Config, record: Callable) -> None:
    """Every row with ``n`` readers, once, for ``impl``."""
    group = Group(impl, n, config)
    try:
        if n in config.latency_readers:
            measure_latency(group, config, record)
        if n in config.throughput_readers:
            for size, messages in config.throughput:
                measure_throughput(group, size, messages, record)
        if n == 1:
            measure_idle(group, config, record)  # last: nothing follows it
    finally:
        group.close()


# -- report -----------------------------------------------------------------


def summary(values: Sequence[float]) -> Dict[str, float]:
    ordered = sorted(values)
    if len(ordered) >= 2:
        q1, _, q3 = statistics.quantiles(ordered, n=4)
    else:
        q1 = q3 = ordered[0]
    return {
        "median": statistics.median(ordered),
        "min": ordered[0],
        "max": ordered[-1],
        "q1": q1,
        "q3": q3,
    }


def fmt(value: float) -> str:
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--impl",
        action="append",
        help=f"module:Class of a MessageQueue (repeatable; default {BASELINE})",
    )
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--start-method", choices=["spawn", "fork"], default="spawn")
    parser.add_argument("--chunk-mib", type=int, default=24, help="max_chunk_bytes in MiB")
    parser.add_argument("--chunks", type=int, default=10, help="max_chunks")
    parser.add_argument("--latency-messages", type=int, default=200, help="per round")
    parser.add_argument("--quick", action="store_true", help="CI smoke run (not the benchmark)")
    parser.add_argument("--json", metavar="PATH", help="write every round's figure here")
    args = parser.parse_args(argv)
    impls = args.impl or [BASELINE]
    for impl in impls:
        load(impl)  # a wrong path fails now, not in a child

    if args.quick:
        config = Config(
            rounds=3,
            start_method=args.start_method,
            chunk_bytes=1 * MIB,
            chunks=args.chunks,
            response_chunk_bytes=64 * KIB,
            latency_readers=[1, 2],
            latency_bytes=1 * KIB,
            latency_messages=20,
            latency_warmup=5,
            throughput_readers=[1],
            throughput=[(64 * KIB, 16), (2 * MIB, 4)],
            idle_s=2.0,
            cpu_window_s=1.0,
            quick=True,
        )
    else:
        if args.rounds < 21:
            print(f"note: {args.rounds} rounds; the benchmark's figures need at least 21")
        config = Config(
            rounds=args.rounds,
            start_method=args.start_method,
            chunk_bytes=args.chunk_mib * MIB,
            chunks=args.chunks,
            response_chunk_bytes=1 * MIB,
            latency_readers=[1, 2, 4],
            latency_bytes=1 * KIB,
            latency_messages=args.latency_messages,
            latency_warmup=20,
            throughput_readers=[1, 2],
            throughput=[(1 * MIB, 64), (32 * MIB, 6)],
            idle_s=10.0,
            cpu_window_s=5.0,
            quick=False,
        )

    if config.quick:
        print(
            "QUICK SMOKE RUN: 3 rounds, small objects (1 MiB chunks), 2 s idle instead "
            "of 10 s, 1 s CPU window instead of 5 s. These are not the benchmark's figures."
        )
    print(
        f"python {platform.python_version()}, {os.cpu_count()} CPUs, start method "
        f"{config.start_method}, chunks {config.chunks} x {size_label(config.chunk_bytes)}, "
        f"{config.rounds} rounds, load average {os.getloadavg()[0]:.2f} at start"
    )
    print("implementations: " + ", ".join(impls))

    load_at_start = os.getloadavg()[0]
    figures: Dict[str, Dict[str, List[float]]] = {}
    units: Dict[str, str] = {}
    started = time.monotonic()
    for round_index in range(config.rounds):
        # A hung round dies with every thread's stack (its readers with it).
        faulthandler.dump_traceback_later(REPLY_TIMEOUT_S * 2, exit=True)
        shift = round_index % len(impls)
        for n in reader_counts(config):
            for impl in impls[shift:] + impls[:shift]:

                def record(row: str, unit: str, value: float, impl: str = impl) -> None:
                    figures.setdefault(row, {}).setdefault(impl, []).append(value)
                    units[row] = unit

                run_group(impl, n, config, record)
        faulthandler.cancel_dump_traceback_later()
        print(
            f"  round {round_index + 1}/{config.rounds} done "
            f"({time.monotonic() - started:.0f} s)",
            flush=True,
        )

    print(
        f"\nload average {os.getloadavg()[0]:.2f} at the end; "
        f"median of {config.rounds} rounds, [min-max], (IQR q1-q3)"
    )
    rows = []
    width = max(len(r) for r in figures) + 2
    for row, by_impl in figures.items():
        base = None
        for impl in impls:
            values = by_impl.get(impl, [])
            if not values:
                continue
            s = summary(values)
            ratio = ""
            if base is None:
                base = s["median"]
            elif base:
                ratio = f"  x{s['median'] / base:.2f} of {impls[0]}"
            name = impl if len(impls) > 1 else ""
            print(
                f"{row:<{width}} {fmt(s['median']):>9} {units[row]:<6} "
                f"[{fmt(s['min'])}-{fmt(s['max'])}] ({fmt(s['q1'])}-{fmt(s['q3'])})"
                f"  {name}{ratio}"
            )
            rows.append({"row": row, "impl": impl, "unit": units[row], "rounds": values, **s})

    if args.json:
        report = {
            "quick": config.quick,
            "config": dataclasses.asdict(config),
            "implementations": impls,
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average": {"start": load_at_start, "end": os.getloadavg()[0]},
            "rows": rows,
        }
        pathlib.Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
