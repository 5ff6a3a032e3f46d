"""The execute channel from Python: Python worker processes logging on to
a coordinator's handshake, protobuf requests through execute_pb2, per-call
timeouts, a closed channel, bad arguments."""

import hashlib
import os
import threading

import pytest

import nodeipc
from conftest import ours_in_dev_shm, python_child
from nodeipc.channel import Coordinator, Worker
from nodeipc.proto import execute_pb2


def test_python_worker_processes_answer_the_coordinator_through_the_handshake(
    unique_name, private_dir
):
    name = unique_name("chan")
    socket = str(private_dir / "exec.sock")
    with Coordinator(name, 2, request_capacity=1 << 20, depth=2, timeout=20) as coordinator:
        coordinator.serve(socket)
        workers = [python_child("channel_worker_py.py", socket, str(r)) for r in range(2)]
        coordinator.wait_for_workers(timeout=30)
        coordinator.stop_serving()
        for i in range(30):
            request = bytes((i * 7 + k) % 256 for k in range(1 + i * 3001))
            assert coordinator.send(request) == i
            answers = coordinator.recv_all()
            assert answers == [hashlib.sha256(request).digest() + bytes([r]) for r in range(2)]
        coordinator.send(b"first")
        rank, answer = coordinator.recv_first()
        assert answer == hashlib.sha256(b"first").digest() + bytes([rank])
        assert coordinator.drain() == 1
    for r, proc in enumerate(workers):
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, f"worker {r}: {out}\n{err}"
        assert f"worker {r} answered 31" in out, out
    assert ours_in_dev_shm(name) == []


def test_execute_pb2_requests_to_a_worker_thread(unique_name, private_dir):
    socket = str(private_dir / "exec.sock")
    coordinator = Coordinator(unique_name("pb"), 1, timeout=20)
    coordinator.serve(socket)

    def work() -> None:
        with Worker.connect(socket, 0) as worker:
            for _ in range(5):
                request = execute_pb2.ExecuteRequest.FromString(worker.recv())
                response = execute_pb2.ExecuteResponse(
                    msg_type=request.execute_type, sequence=request.sequence
                )
                response.forward.output = request.forward.input[::-1]
                worker.respond(response.SerializeToString())

    thread = threading.Thread(target=work)
    thread.start()
    coordinator.wait_for_workers(timeout=20)
    for sequence in range(5):
        request = execute_pb2.ExecuteRequest(
            execute_type=execute_pb2.EXECUTE_TYPE_EXECUTE, sequence=sequence
        )
        request.forward.input = b"prompt %d" % sequence
        coordinator.send(request.SerializeToString())
        (answer,) = coordinator.recv_all()
        response = execute_pb2.ExecuteResponse.FromString(answer)
        assert response.sequence == sequence
        assert response.forward.output == (b"prompt %d" % sequence)[::-1]
    thread.join(timeout=30)
    assert not thread.is_alive()
    coordinator.close()


def test_timeouts_a_closed_channel_and_bad_arguments(unique_name, private_dir):
    with pytest.raises(nodeipc.InvalidArgumentError):
        Coordinator(unique_name("bad"), -1)
    with pytest.raises(nodeipc.InvalidArgumentError):
        Coordinator(unique_name("bad"), 1, depth=0)
    with pytest.raises(TypeError):
        Coordinator(unique_name("bad"), "two")  # type: ignore[arg-type]
    socket = str(private_dir / "exec.sock")
    coordinator = Coordinator(unique_name("to"), 1, timeout=20)
    with pytest.raises(nodeipc.InvalidArgumentError):
        coordinator.recv_all()  # nothing was sent
    coordinator.serve(socket)
    worker = Worker.connect(socket, 0)
    coordinator.wait_for_workers(timeout=20)
    with pytest.raises(nodeipc.TimeoutError):
        worker.recv(timeout=0.1)  # nothing sent: the wait ends, takes nothing
    coordinator.send(b"x")
    with pytest.raises(nodeipc.TimeoutError):
        coordinator.recv_all(timeout=0.1)  # the worker has not answered
    assert worker.recv(timeout=5) == b"x"
    worker.respond(b"y")
    assert coordinator.recv_all(timeout=5) == [b"y"]  # resumed where it stopped
    with pytest.raises(nodeipc.RefusedError):
        Worker.connect(socket, 0, timeout=5)  # the rank is taken
    coordinator.close()
    with pytest.raises(nodeipc.PeerDiedError):
        worker.recv(timeout=5)
    with pytest.raises(nodeipc.NodeipcError):
        coordinator.send(b"after close")
    worker.close()


def test_serving_a_second_time_is_refused_and_the_first_socket_stays(unique_name, private_dir):
    first, second = str(private_dir / "exec.sock"), str(private_dir / "other.sock")
    with Coordinator(unique_name("twice"), 1, timeout=20) as coordinator:
        coordinator.serve(first)
        for path in (first, second):
            with pytest.raises(nodeipc.AlreadyExistsError) as caught:
                coordinator.serve(path)
            assert "already serving at " + first in str(caught.value), str(caught.value)
            assert "stop_serving()" in str(caught.value)
        assert os.path.exists(first) and not os.path.exists(second)
        with Worker.connect(first, 0, timeout=10) as worker:
            coordinator.wait_for_workers(timeout=10)
            coordinator.send(b"still served")
            assert worker.recv(timeout=10) == b"still served"
        coordinator.stop_serving()
        assert not os.path.exists(first)
        coordinator.serve(second)
        assert os.path.exists(second)
