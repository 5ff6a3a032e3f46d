"""The execute channel over bytes: a coordinator broadcasts each request to
its workers through shared memory and gathers their answers; workers log on
through the coordinator's handshake socket.

Requests and responses are bytes of any encoding: serialize the channel's
own messages with :mod:`nodeipc.proto.execute_pb2`, or anything else::

    from nodeipc.channel import Coordinator, Worker

    coordinator = Coordinator("/nodeipc-job42-exec", workers=2)
    coordinator.serve("/run/user/1000/job42/exec.sock")   # a 0700 directory of ours
    # each worker process: Worker.connect("/run/user/1000/job42/exec.sock", rank)
    coordinator.wait_for_workers(timeout=30)
    coordinator.send(b"request")
    answers = coordinator.recv_all()          # one bytes per worker, rank order

A worker reads each request in place in a ring it maps read-only (one copy
into the returned ``bytes``) and answers with ``respond``. The coordinator is
the Rust one: a Rust or C++ worker can join the same channel. Timeouts are
seconds; ``None`` waits without limit (Ctrl-C still ends the wait).
"""

from ._native import Coordinator, Worker

__all__ = ["Coordinator", "Worker"]
