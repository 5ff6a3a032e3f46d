"""A channel worker process for test_channel.py: logs on as RANK through
the handshake at SOCKET, answers each request with the SHA-256 of its bytes
followed by its rank, until the coordinator closes the channel."""

import hashlib
import sys

import nodeipc
from nodeipc.channel import Worker


def main() -> int:
    socket_path, rank = sys.argv[1], int(sys.argv[2])
    answered = 0
    with Worker.connect(socket_path, rank, timeout=20) as worker:
        assert worker.rank == rank
        while True:
            try:
                request = worker.recv(timeout=20)
            except nodeipc.PeerDiedError:
                break  # the coordinator closed the channel
            worker.respond(hashlib.sha256(request).digest() + bytes([rank]))
            answered += 1
    print(f"worker {rank} answered {answered}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
