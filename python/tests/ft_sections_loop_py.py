"""NVRx's examples/fault_tolerance/train_ddp_sections_api.py with torch
replaced by plain loops (ft_loop_common); the fault tolerance lines are
the example's, its import the only change. Rank 1 hangs inside a `step`
section in the first round once the step timeout is calculated."""

import json
import os
import sys

import nodeipc.fault_tolerance as fault_tolerance
from ft_loop_common import Dist, hang, load, save, work

EPOCHS, ITERS, VAL_ITERS = 4, 6, 2
CHECKPOINT, FT_STATE = "checkpoint.json", "ft_state.json"


def main() -> int:
    dist = Dist()
    restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    progress = {"epoch_idx": 0, "iter_idx": 0}
    ft_client = fault_tolerance.RankMonitorClient()
    ft_client.init_workload_monitoring()

    def update_ft_section_timeouts(selected_sections, calc_out_of_section):
        ft_client.calculate_and_set_section_timeouts(
            selected_sections=selected_sections, calc_out_of_section=calc_out_of_section)
        if dist.rank == 0:
            with open(FT_STATE, "w") as f:
                json.dump(ft_client.state_dict(), f)
        dist.barrier()

    ft_state = load(FT_STATE)
    if ft_state:
        ft_client.load_state_dict(ft_state)
        print(f"rank {dist.rank}: loaded {ft_client.section_timeouts}", flush=True)
    ft_client.start_section("init")
    checkpoint = load(CHECKPOINT)
    is_checkpoint_loaded = checkpoint is not None
    if is_checkpoint_loaded:
        progress.update(checkpoint["progress"])
    if progress["epoch_idx"] == EPOCHS:
        ft_client.end_section("init")
        ft_client.shutdown_workload_monitoring()
        dist.destroy()
        return 0
    work()
    ft_client.end_section("init")
    if is_checkpoint_loaded:
        update_ft_section_timeouts(["init"], False)
    for epoch_idx in range(progress["epoch_idx"], EPOCHS):
        iters = 0
        for iter_idx in range(progress["iter_idx"], ITERS):
            ft_client.start_section("step")
            if restart == 0 and dist.rank == 1 and epoch_idx == 2 and iter_idx == 2:
                hang(dist.rank, f"in step, epoch {epoch_idx} iteration {iter_idx}")
            dist.all_reduce_max(work())
            ft_client.end_section("step")
            iters += 1
        if iters > 0:
            update_ft_section_timeouts(["step"], False)
        progress["epoch_idx"] = epoch_idx + 1
        progress["iter_idx"] = 0
        for _ in range(VAL_ITERS):
            ft_client.start_section("step")
            work()
            ft_client.end_section("step")
        ft_client.start_section("checkpoint")
        save(dist, CHECKPOINT, {"progress": progress})
        ft_client.end_section("checkpoint")
        update_ft_section_timeouts(["checkpoint"], False)
    update_ft_section_timeouts([], True)
    ft_client.shutdown_workload_monitoring()
    with open(f"done-{dist.rank}", "w") as f:
        f.write(str(restart))
    dist.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
