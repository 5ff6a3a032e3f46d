"""What NVRx's examples take from torch, replaced: the ranks meet in a
nodeipc.Group (the launcher's NODEIPC_GROUP), an all-reduce is an
all-gather, a checkpoint is a JSON file that rank 0 writes. Shared by the
loops of test_ft_loops.py; nothing here touches fault tolerance."""

import json
import os
import struct
import time

import nodeipc


class Dist:
    """torch.distributed's part the examples use."""

    def __init__(self) -> None:
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.group = nodeipc.Group(os.environ["NODEIPC_GROUP"], int(os.environ["LOCAL_RANK"]),
                                   int(os.environ["LOCAL_WORLD_SIZE"]), timeout=60)

    def all_reduce_max(self, value: float) -> float:
        return max(struct.unpack("<d", b)[0]
                   for b in self.group.all_gather(struct.pack("<d", value)))

    def barrier(self) -> None:
        self.group.barrier()

    def destroy(self) -> None:
        self.group.leave()


def work(seconds: float = 0.05) -> float:
    """One iteration's forward, backward and step."""
    time.sleep(seconds)
    return seconds


def save(dist: Dist, path: str, checkpoint: dict) -> None:
    """Rank 0 writes, inside a barrier (the examples' sync_workers)."""
    if dist.rank == 0:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(checkpoint, f)
        os.replace(tmp, path)
    dist.barrier()


def load(path: str):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def hang(rank: int, where: str) -> None:
    """The examples' --simulated_fault rank_hung (SIGSTOP) in the first round."""
    print(f"rank {rank}: simulated hang {where}", flush=True)
    time.sleep(3600)
