"""A rank that asks the launcher for a workload action and then fails, as
NVRx's docs show (the request is applied when the round ends): rank 1
sends `sys.argv[1]` (a WorkloadAction name) in the first round and exits
1; every rank of a later round completes. Run by test_ft_loops.py."""

import os
import sys

import nodeipc.fault_tolerance as fault_tolerance


def main() -> int:
    rank = int(os.environ["RANK"])
    restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    ft_client = fault_tolerance.RankMonitorClient()
    ft_client.init_workload_monitoring()
    ft_client.send_heartbeat()
    if restart == 0 and rank == 1:
        action = fault_tolerance.WorkloadAction[sys.argv[1]]
        ft_client.send_workload_control_request(
            fault_tolerance.WorkloadControlRequest(action, f"test asks {action.name}"))
        print(f"rank {rank}: sent {action.name}", flush=True)
        return 1
    ft_client.shutdown_workload_monitoring()
    with open(f"done-{rank}-{restart}", "w") as f:
        f.write("1")
    return 0


if __name__ == "__main__":
    sys.exit(main())
