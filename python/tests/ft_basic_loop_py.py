"""NVRx's examples/fault_tolerance/basic_ft_example.py (as in v0.2.0, its
0.2 names `timeouts` and `calculate_and_set_timeouts`) with torch replaced
by plain loops (ft_loop_common); the fault tolerance lines are the
example's, its import the only change. Every rank writes ft_state.json
after each epoch; rank 1 hangs in epoch 2 of the first round."""

import json
import os
import sys

import nodeipc.fault_tolerance as fault_tolerance
from ft_loop_common import Dist, hang, work

EPOCHS, BATCHES = 4, 8


def main() -> int:
    dist = Dist()
    restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    ft_client = fault_tolerance.RankMonitorClient()
    ft_client.init_workload_monitoring()
    print(f"rank {dist.rank}: ft timeouts {ft_client.timeouts}", flush=True)
    if os.path.exists("ft_state.json"):
        with open("ft_state.json") as f:
            ft_client.load_state_dict(json.load(f))
        print(f"rank {dist.rank}: loaded ft timeouts {ft_client.timeouts}", flush=True)
    for epoch in range(EPOCHS):
        for batch in range(BATCHES):
            if restart == 0 and dist.rank == 1 and epoch == 2 and batch == 4:
                hang(dist.rank, f"in epoch {epoch}")
            dist.all_reduce_max(work())
            ft_client.send_heartbeat()
        ft_client.calculate_and_set_timeouts()
        with open(f"ft_state.json.{dist.rank}", "w") as f:
            json.dump(ft_client.state_dict(), f)
        os.replace(f"ft_state.json.{dist.rank}", "ft_state.json")
        print(f"rank {dist.rank}: epoch {epoch} ft timeouts {ft_client.timeouts}", flush=True)
    ft_client.shutdown_workload_monitoring()
    with open(f"done-{dist.rank}", "w") as f:
        f.write(str(restart))
    dist.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
