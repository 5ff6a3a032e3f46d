"""Forks while a coordinator serves; the child ends with sys.exit(0), which
finalizes the interpreter (dropping its copy of the coordinator). Then the
parent's server must still serve a worker, and nothing may reach stderr
(no Rust panic from the child). Usage: fork_exit_py.py SOCKET"""

import os
import sys
import warnings

from nodeipc.channel import Coordinator, Worker

# Python 3.12+ warns about forking a process with threads: the very case.
warnings.simplefilter("ignore", DeprecationWarning)

socket = sys.argv[1]
coordinator = Coordinator(f"/nodeipc-test-py-fork-exit-{os.getpid()}", 1, timeout=20)
coordinator.serve(socket)
pid = os.fork()
if pid == 0:
    sys.exit(0)
_, status = os.waitpid(pid, 0)
assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
with Worker.connect(socket, 0, timeout=10) as worker:
    coordinator.wait_for_workers(timeout=10)
    coordinator.send(b"ping")
    assert worker.recv(timeout=10) == b"ping"
coordinator.close()
print("served after the child exited", flush=True)
