"""A Python rank for `nodeipc launch`: joins the group the launcher names
in NODEIPC_GROUP, as it is, as rank LOCAL_RANK of LOCAL_WORLD_SIZE, and
all-gathers "python rank <r> pid <pid>" in 32 bytes (NUL-padded, as the C,
C++ and Rust ranks beside it pass theirs). Prints "rank <r> pid <pid> in
<group> gathered: <each rank's>|..."."""

import os
import sys

import nodeipc

SLOT = 32


def main():
    name = os.environ["NODEIPC_GROUP"]
    rank, world = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    pid = os.getpid()
    with nodeipc.Group(name, rank, world, timeout=30) as group:
        mine = f"python rank {rank} pid {pid}".encode().ljust(SLOT, b"\0")
        gathered = [theirs.split(b"\0")[0].decode() for theirs in group.all_gather(mine)]
    # One write(2) for the line: the ranks share the launcher's stdout, and
    # print() writes the line and its end apart when unbuffered.
    line = f"rank {rank} pid {pid} in {name} gathered: {'|'.join(gathered)}\n"
    os.write(sys.stdout.fileno(), line.encode())


if __name__ == "__main__":
    main()
