"""nvidia-resiliency-ext's `train_ddp_heartbeats_api.py`, torch replaced by
a plain loop: a rank monitor client, a heartbeat per iteration, a
checkpoint of the iteration at each epoch. In the first round, rank 1
hangs at iteration 5 (as the example's `--simulated_fault` does); the
monitor must kill it and the launcher restart the job, which then ends.

Run by test_ft_launcher.py under `nodeipc launch` given ft_launcher's
command line; writes `done-<rank>` when it completes."""

import os
import sys
import time

from nodeipc.monitor import RankMonitorClient


def main() -> int:
    rank = int(os.environ["RANK"])
    restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    iterations = int(sys.argv[1])
    client = RankMonitorClient()
    client.init_workload_monitoring()
    for iteration in range(iterations):
        if restart == 0 and rank == 1 and iteration == 5:
            print(f"rank {rank}: simulated hang at iteration {iteration}", flush=True)
            time.sleep(3600)
        time.sleep(0.02)
        client.send_heartbeat()
    with open(f"checkpoint-{rank}", "w") as f:
        f.write(str(iterations))
    with open(f"done-{rank}", "w") as f:
        f.write(str(restart))
    client.shutdown_workload_monitoring()
    return 0


if __name__ == "__main__":
    sys.exit(main())
