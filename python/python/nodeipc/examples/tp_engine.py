"""An engine broadcasting each step to N tensor-parallel workers, shaped as
vLLM's multiprocess executor: one ``MessageQueue`` from the engine to every
worker, one ``MessageQueue(1, 1)`` back from each worker, and a worker loop
written as vLLM's ``WorkerProc.worker_busy_loop``.

    python -m nodeipc.examples.tp_engine --workers 2

Prints steps per second, the broadcast's p50/p99 (from just before the
engine's ``enqueue`` to the last worker's return from ``dequeue``, one
monotonic clock for every process) and the workers' CPU while idle.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time
from multiprocessing.connection import Connection
from typing import Any, Dict, List, Optional, Tuple

from nodeipc.broadcast import Handle, MessageQueue

SUCCESS, FAILURE = "SUCCESS", "FAILURE"


class Worker:
    """What a model worker does with a step: here, a small digest of it."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def execute_model(self, scheduler_output: Dict[str, Any]) -> Tuple[int, int, float]:
        received = time.monotonic()
        tokens = sum(scheduler_output["num_scheduled_tokens"])
        return self.rank, tokens, received


def worker_main(handle: Handle, rank: int, ready: Connection) -> None:
    """A worker process: joins the broadcast, answers on its own queue."""
    rpc_broadcast_mq = MessageQueue.create_from_handle(handle, rank)
    worker_response_mq = MessageQueue(1, 1)
    ready.send({"status": "READY", "handle": worker_response_mq.export_handle()})
    rpc_broadcast_mq.wait_until_ready()
    worker_response_mq.wait_until_ready()
    worker = Worker(rank)
    # vLLM's WorkerProc.worker_busy_loop, with the import changed only.
    while True:
        method, args, kwargs, output_rank = rpc_broadcast_mq.dequeue(indefinite=True)
        if method == "shutdown":
            break
        try:
            func = getattr(worker, method)
            output = func(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - answered to the engine, as vLLM does
            if output_rank is None or rank == output_rank:
                worker_response_mq.enqueue((FAILURE, str(e)))
            continue
        if output_rank is None or rank == output_rank:
            worker_response_mq.enqueue((SUCCESS, output))
    worker_response_mq.close()
    rpc_broadcast_mq.close()


def scheduler_output(step: int) -> Dict[str, Any]:
    """A step's scheduler output: lists of a few hundred entries and a few
    KiB of arrays (block tables), as a decode step of a small batch."""
    batch = 64
    out: Dict[str, Any] = {
        "step": step,
        "req_ids": [f"req-{step}-{i}" for i in range(batch)],
        "num_scheduled_tokens": [1] * batch,
        "finished_req_ids": [],
    }
    try:
        import numpy

        out["block_tables"] = numpy.arange(batch * 16, dtype=numpy.int32).reshape(batch, 16)
        out["positions"] = numpy.full(batch, step, dtype=numpy.int64)
    except ImportError:
        out["block_tables"] = bytes(batch * 16 * 4)
    return out


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, all its threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: List[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nodeipc.examples.tp_engine")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--idle", type=float, default=5.0, help="seconds idle for the CPU figure")
    parser.add_argument("--start-method", default="spawn", choices=["spawn", "fork", "forkserver"])
    args = parser.parse_args(argv)
    n = args.workers
    ctx = multiprocessing.get_context(args.start_method)
    rpc_broadcast_mq = MessageQueue(n, n)
    handle = rpc_broadcast_mq.export_handle()
    pipes = [ctx.Pipe(duplex=False) for _ in range(n)]
    procs = [
        ctx.Process(target=worker_main, args=(handle, rank, pipes[rank][1]), daemon=True)
        for rank in range(n)
    ]
    for p in procs:
        p.start()
    response_mqs = []
    for rank in range(n):
        reply = pipes[rank][0].recv()
        assert reply["status"] == "READY"
        response_mqs.append(MessageQueue.create_from_handle(reply["handle"], 0))
    # The order matters (vLLM's): the broadcast first, then each response queue.
    rpc_broadcast_mq.wait_until_ready()
    for mq in response_mqs:
        mq.wait_until_ready()

    latencies = []
    start = time.monotonic()
    for step in range(args.steps):
        sent = time.monotonic()
        rpc_broadcast_mq.enqueue(("execute_model", (scheduler_output(step),), {}, None))
        last = 0.0
        for mq in response_mqs:
            status, result = mq.dequeue(timeout=60)
            if status != SUCCESS:
                raise RuntimeError(f"Worker failed with error '{result}'")
            last = max(last, result[2])
        latencies.append(last - sent)
    elapsed = time.monotonic() - start

    before = [cpu_seconds(p.pid) for p in procs if p.pid is not None]
    time.sleep(args.idle)
    after = [cpu_seconds(p.pid) for p in procs if p.pid is not None]
    idle_cpu = max(100.0 * (a - b) / args.idle for a, b in zip(after, before))

    rpc_broadcast_mq.enqueue(("shutdown", (), {}, None))
    for p in procs:
        p.join(30)
    us = [x * 1e6 for x in latencies]
    print(f"workers {n}, steps {args.steps}, start method {args.start_method}")
    print(f"steps per second      {args.steps / elapsed:10.0f}")
    print(f"broadcast p50         {statistics.median(us):10.1f} us")
    print(f"broadcast p99         {percentile(us, 0.99):10.1f} us")
    print(f"idle worker CPU       {idle_cpu:10.2f} % of a core (most of any worker, {args.idle} s)")
    return 0 if all(p.exitcode == 0 for p in procs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
