"""A training rank for the monitor tests: ``train_py.py MODE [ARGS]``, with
the monitor's socket in NODEIPC_MONITOR_SOCKET. Prints one line per fact.

Modes:
  hang            20 steps (sections and heartbeats), calculates the
                  heartbeat and section timeouts, prints them, then hangs:
                  the monitor must kill it.
  save FILE       20 steps, calculates, writes state_dict() as JSON to FILE.
  restore FILE    loads FILE before Init and prints the monitor's timeouts.
  socket          5 heartbeats; prints whether they took shared memory.
  sections        20 steps of sections and no heartbeat; calculates the
                  section timeouts and prints them.
  rank            prints the rank the monitor registered.
  group NAME RANK PAUSE
                  rank RANK of a group of 2 named NAME: steps PAUSE s long,
                  then timeouts agreed over the group (max over ranks).
"""

import json
import sys
import time

from nodeipc.monitor import RankMonitorClient


def steps(client, n=20, pause=0.01):
    for _ in range(n):
        client.start_section("step")
        time.sleep(pause)
        client.end_section("step")
        client.send_heartbeat()


def main():
    mode, *args = sys.argv[1:]
    group = None
    if mode == "group":
        import nodeipc

        group = nodeipc.Group(args[0], int(args[1]), 2, timeout=30, slot_size=4096)
    # The group given to the constructor serves the heartbeat timeout; the
    # section timeouts take it as an argument (both forms are supported).
    client = RankMonitorClient(check_interval=0.1, group=group)
    client.init_workload_monitoring()
    print(f"shared memory {client.uses_shared_memory_heartbeats}", flush=True)
    if mode == "hang":
        steps(client)
        assert client.calculate_and_set_hb_timeouts()
        assert client.calculate_and_set_section_timeouts()
        print(f"hb {client.hb_timeouts.subsequent}", flush=True)
        print(f"step {client.section_timeouts.section['step']}", flush=True)
        print(f"out {client.section_timeouts.out_of_section}", flush=True)
        print("hanging", flush=True)
        time.sleep(60)
        print("still alive", flush=True)
        return 1
    if mode == "save":
        steps(client)
        assert client.calculate_and_set_hb_timeouts()
        assert client.calculate_and_set_section_timeouts(selected_sections=["step"])
        with open(args[0], "w") as f:
            json.dump(client.state_dict(), f)
        print(f"hb {client.hb_timeouts.subsequent}", flush=True)
    elif mode == "restore":
        print(f"before hb {client._connection().status()['heartbeat']}", flush=True)
        client.shutdown_workload_monitoring()
        client = RankMonitorClient(check_interval=0.1)
        with open(args[0]) as f:
            client.load_state_dict(json.load(f))
        client.init_workload_monitoring()
        status = client._connection().status()
        print(f"hb {status['heartbeat']}", flush=True)
        print(f"step {status['sections'].get('step')}", flush=True)
        print(f"calculated {client.hb_timeouts.were_calculated}", flush=True)
    elif mode == "socket":
        for _ in range(5):
            client.send_heartbeat()
        print(f"heartbeats {client._connection().status()['heartbeats']}", flush=True)
    elif mode == "group":
        steps(client, n=6, pause=float(args[2]))
        assert client.calculate_and_set_hb_timeouts()
        client._group = None
        assert client.calculate_and_set_section_timeouts(group=group)
        status = client._connection().status()
        print(f"hb {status['heartbeat']:.1f}", flush=True)
        print(f"step {status['sections']['step']:.1f}", flush=True)
        # Unwatched before waiting for the other rank to leave: that wait
        # is no step, and on a loaded machine it can outlast the timeouts
        # just agreed.
        client.shutdown_workload_monitoring()
        group.leave()
        print("ok", flush=True)
        return 0
    elif mode == "sections":
        for _ in range(20):
            client.start_section("step")
            time.sleep(0.01)
            client.end_section("step")
        assert not client.calculate_and_set_hb_timeouts(skip_if_not_ready=True)
        assert client.calculate_and_set_section_timeouts()
        status = client._connection().status()
        print(f"step {status['sections']['step']} out {status['out_of_section']}", flush=True)
        print(f"hb {status['heartbeat']}", flush=True)
    elif mode == "rank":
        status = client._connection().status()
        print(f"rank {status['global_rank']} local {status['local_rank']}", flush=True)
    client.shutdown_workload_monitoring()
    print("ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
