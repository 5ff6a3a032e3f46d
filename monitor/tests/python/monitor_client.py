#!/usr/bin/env python3
"""A rank monitor client written from monitor.proto alone.

Usage: monitor_client.py PROTO_DIR SOCKET

Compiles PROTO_DIR/monitor.proto with grpc_tools.protoc (pip package
grpcio-tools, which brings protobuf) into a temporary directory, imports the
generated module, then speaks to the monitor listening on SOCKET: frames are a
4-byte little-endian length and the encoded message; every ClientMessage gets
one ServerMessage. Exits 0 and prints "python client: all checks passed" when
every exchange went as the .proto says.
"""

import importlib
import os
import shutil
import socket
import struct
import sys
import tempfile


def compile_proto(proto_dir):
    from grpc_tools import protoc

    out = tempfile.mkdtemp(prefix="nodeipc-monitor-py-")
    rc = protoc.main(
        [
            "protoc",
            "-I" + proto_dir,
            "--python_out=" + out,
            os.path.join(proto_dir, "monitor.proto"),
        ]
    )
    if rc != 0:
        shutil.rmtree(out, ignore_errors=True)
        raise SystemExit("protoc failed on monitor.proto (exit %d)" % rc)
    sys.path.insert(0, out)
    return importlib.import_module("monitor_pb2"), out


def recv_exactly(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise SystemExit("the monitor closed the connection")
        data += chunk
    return data


class Client:
    def __init__(self, pb, path):
        self.pb = pb
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(path)

    def send_raw(self, frame):
        self.sock.sendall(frame)

    def send(self, msg):
        body = msg.SerializeToString()
        self.send_raw(struct.pack("<I", len(body)) + body)

    def recv(self):
        (size,) = struct.unpack("<I", recv_exactly(self.sock, 4))
        reply = self.pb.ServerMessage()
        reply.ParseFromString(recv_exactly(self.sock, size))
        return reply

    def call(self, msg):
        self.send(msg)
        return self.recv()


def expect(reply, kind, fragment=None):
    got = reply.WhichOneof("msg")
    if got != kind:
        raise SystemExit("expected %s, got %s: %s" % (kind, got, reply))
    if fragment is not None and fragment not in reply.error.cause:
        raise SystemExit("error cause %r lacks %r" % (reply.error.cause, fragment))
    return getattr(reply, kind)


def main():
    proto_dir, path = sys.argv[1], sys.argv[2]
    pb, out = compile_proto(proto_dir)
    try:
        run(pb, path)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    print("python client: all checks passed")


def run(pb, path):
    c = Client(pb, path)
    CM = pb.ClientMessage

    # Before Init: a heartbeat is refused, a status query answered.
    expect(c.call(CM(heartbeat=pb.Heartbeat())), "error", "before Init")
    status = expect(c.call(CM(status_query=pb.StatusQuery())), "status")
    assert status.state == pb.MONITOR_STATE_WAITING, status

    # Someone else's pid is refused: only ourselves or our descendants.
    spoofed = pb.RankInfo(global_rank=5, local_rank=1, pid=1, host="x")
    expect(c.call(CM(init=pb.Init(rank=spoofed))), "error", "SO_PEERCRED")

    rank = pb.RankInfo(global_rank=5, local_rank=1, pid=os.getpid(), host=socket.gethostname())
    ok = expect(c.call(CM(init=pb.Init(rank=rank))), "ok")
    assert ok.HasField("config"), ok
    assert not ok.heartbeat_region_attached, ok
    assert ok.config.timeouts.heartbeat_ms == 60000, ok.config
    print("init ok, termination signal %d" % ok.config.termination_signal)

    for i in range(3):
        expect(c.call(CM(heartbeat=pb.Heartbeat(state=b"step %d" % i))), "ok")

    opened = CM(section=pb.Section(name="step", action=pb.SECTION_ACTION_OPEN))
    expect(c.call(opened), "ok")
    expect(c.call(opened), "error", "already open")
    expect(
        c.call(CM(section=pb.Section(name="save", action=pb.SECTION_ACTION_CLOSE))),
        "error",
        "is not open",
    )
    expect(c.call(CM(section=pb.Section(action=pb.SECTION_ACTION_UNSPECIFIED))), "error")

    # Unset keeps, 0 removes, a value replaces.
    update = pb.Timeouts(heartbeat_ms=30000, initial_heartbeat_ms=0)
    update.section_timeouts_ms["step"] = 5000
    ok = expect(c.call(CM(update_config=pb.UpdateConfig(timeouts=update))), "ok")
    t = ok.config.timeouts
    assert t.heartbeat_ms == 30000, t
    assert not t.HasField("initial_heartbeat_ms"), t
    assert dict(t.section_timeouts_ms) == {"step": 5000}, t

    status = expect(c.call(CM(status_query=pb.StatusQuery())), "status")
    assert status.state == pb.MONITOR_STATE_RUNNING, status
    assert status.heartbeats == 3, status
    assert status.last_state == b"step 2", status
    assert [s.name for s in status.open_sections] == ["step"], status
    assert status.open_sections[0].timeout_ms == 5000, status
    assert status.rank.pid == os.getpid(), status

    # A malformed frame is answered with Error; the connection keeps working.
    c.send_raw(struct.pack("<I", 3) + b"\x00\xff\xff")
    expect(c.recv(), "error", "holds no valid message")
    expect(
        c.call(CM(section=pb.Section(action=pb.SECTION_ACTION_CLOSE_ALL))),
        "ok",
    )

    # The launcher's control socket answers beside the rank.
    ctl = Client(pb, path + ".control")
    status = expect(ctl.call(pb.ControlRequest(status=pb.StatusQuery())), "status")
    assert status.state == pb.MONITOR_STATE_RUNNING and not status.open_sections, status
    expect(ctl.call(pb.ControlRequest(close_connection=pb.CloseConnection())), "ok")
    status = expect(ctl.call(pb.ControlRequest(status=pb.StatusQuery())), "status")
    assert status.state == pb.MONITOR_STATE_RESTARTING, status
    print("status and control ok")


if __name__ == "__main__":
    main()
