#!/usr/bin/env python3
"""A rank for `nodeipc launch`, written in Python from monitor.proto alone.

Usage: launch_rank.py PROTO_DIR OUT_DIR

Reads its place from the environment the launcher sets (NODEIPC_* and
torchrun's names), writes them to OUT_DIR/py-<rank>-<restart>, registers
with its monitor at NODEIPC_MONITOR_SOCKET (pid 0: itself). On the first
round rank 0 then hangs without a heartbeat, so that its monitor fires and
the launcher restarts the round; otherwise it beats once and exits 0.
"""

import importlib
import os
import shutil
import socket
import struct
import sys
import tempfile
import time


def main():
    proto_dir, out_dir = sys.argv[1], sys.argv[2]
    from grpc_tools import protoc

    gen = tempfile.mkdtemp(prefix="nodeipc-launch-py-")
    try:
        rc = protoc.main(
            ["protoc", "-I" + proto_dir, "--python_out=" + gen,
             os.path.join(proto_dir, "monitor.proto")]
        )
        if rc != 0:
            raise SystemExit("protoc failed (exit %d)" % rc)
        sys.path.insert(0, gen)
        pb = importlib.import_module("monitor_pb2")
    finally:
        shutil.rmtree(gen, ignore_errors=True)

    rank = int(os.environ["RANK"])
    restart = int(os.environ["NODEIPC_RESTART_COUNT"])
    names = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
             "MASTER_PORT", "NODEIPC_GROUP", "NODEIPC_RESTART_COUNT"]
    path = os.path.join(out_dir, "py-%d-%d" % (rank, restart))
    with open(path + ".tmp", "w") as f:
        for n in names:
            f.write("%s=%s\n" % (n, os.environ[n]))
    os.rename(path + ".tmp", path)

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(os.environ["NODEIPC_MONITOR_SOCKET"])

    def call(msg):
        body = msg.SerializeToString()
        sock.sendall(struct.pack("<I", len(body)) + body)
        size = struct.unpack("<I", recv(4))[0]
        reply = pb.ServerMessage()
        reply.ParseFromString(recv(size))
        if reply.WhichOneof("msg") != "ok":
            raise SystemExit("monitor refused: %s" % reply)

    def recv(n):
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise SystemExit("the monitor closed the connection")
            data += chunk
        return data

    info = pb.RankInfo(global_rank=rank, local_rank=int(os.environ["LOCAL_RANK"]), pid=0)
    call(pb.ClientMessage(init=pb.Init(rank=info)))
    if rank == 0 and restart == 0:
        time.sleep(30)  # no heartbeat: the monitor fires
        raise SystemExit("not terminated by the monitor")
    call(pb.ClientMessage(heartbeat=pb.Heartbeat()))


if __name__ == "__main__":
    main()
