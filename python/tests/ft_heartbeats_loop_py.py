"""NVRx's examples/fault_tolerance/train_ddp_heartbeats_api.py with torch
replaced by plain loops (ft_loop_common); the fault tolerance lines are
the example's, its import the only change. Rank 1 hangs in the first
round once the heartbeat timeouts are calculated."""

import os
import sys

import nodeipc.fault_tolerance as fault_tolerance
from ft_loop_common import Dist, hang, load, save, work

EPOCHS, ITERS, VAL_ITERS = 4, 8, 3
CHECKPOINT = "checkpoint.json"


def main() -> int:
    dist = Dist()
    restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    progress = {"epoch_idx": 0, "iter_idx": 0}
    ft_client = fault_tolerance.RankMonitorClient()
    ft_client.init_workload_monitoring()
    checkpoint = load(CHECKPOINT)
    if checkpoint is not None:
        ft_client.load_state_dict(checkpoint["ft_state"])
        progress.update(checkpoint["progress"])
        print(f"rank {dist.rank}: resumed at {progress} with {ft_client.hb_timeouts}", flush=True)
        if progress["epoch_idx"] == EPOCHS:
            ft_client.shutdown_workload_monitoring()
            dist.destroy()
            return 0
    for epoch_idx in range(progress["epoch_idx"], EPOCHS):
        for iter_idx in range(progress["iter_idx"], ITERS):
            if ft_client.hb_timeouts.are_valid is False and epoch_idx == 1 and iter_idx == 1:
                ft_client.calculate_and_set_hb_timeouts()
                print(f"rank {dist.rank}: calculated {ft_client.hb_timeouts}", flush=True)
            if restart == 0 and dist.rank == 1 and epoch_idx == 2 and iter_idx == 3:
                hang(dist.rank, f"at epoch {epoch_idx} iteration {iter_idx}")
            dist.all_reduce_max(work())
            progress["iter_idx"] = iter_idx + 1
            ft_client.send_heartbeat()
        progress["epoch_idx"] = epoch_idx + 1
        progress["iter_idx"] = 0
        for _ in range(VAL_ITERS):
            work()
            ft_client.send_heartbeat()
        save(dist, CHECKPOINT, {"progress": progress, "ft_state": ft_client.state_dict()})
    ft_client.shutdown_workload_monitoring()
    with open(f"done-{dist.rank}", "w") as f:
        f.write(str(restart))
    dist.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
