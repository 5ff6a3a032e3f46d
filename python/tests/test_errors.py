"""The exception hierarchy: one base, built-in meanings kept."""

import builtins
import errno
import re

import pytest

import nodeipc
from nodeipc.monitor import RankMonitorClientError


def test_every_error_derives_from_the_base_and_its_builtin_meaning():
    assert nodeipc.Error is nodeipc.NodeipcError
    pairs = [
        (nodeipc.TimeoutError, builtins.TimeoutError),
        (nodeipc.PeerDiedError, ConnectionError),
        (nodeipc.NotPermittedError, PermissionError),
        (nodeipc.NotFoundError, FileNotFoundError),
        (nodeipc.AlreadyExistsError, FileExistsError),
        (nodeipc.InvalidArgumentError, ValueError),
    ]
    for ours, builtin in pairs:
        assert issubclass(ours, nodeipc.NodeipcError)
        assert issubclass(ours, builtin), ours
    assert issubclass(nodeipc.RefusedError, nodeipc.NodeipcError)
    assert RankMonitorClientError is nodeipc.RankMonitorClientError
    assert issubclass(RankMonitorClientError, nodeipc.NodeipcError)
    assert issubclass(nodeipc.MonitorRefusedError, RankMonitorClientError)
    assert issubclass(nodeipc.MonitorRefusedError, nodeipc.RefusedError)
    assert issubclass(nodeipc.MonitorTimeoutError, RankMonitorClientError)
    assert issubclass(nodeipc.MonitorTimeoutError, builtins.TimeoutError)


def test_a_rust_error_keeps_its_message_and_errno(unique_name):
    name = unique_name("missing")
    with pytest.raises(nodeipc.NotFoundError) as caught:
        nodeipc.Region.open(name)
    assert name in str(caught.value)
    assert caught.value.errno == errno.ENOENT
    with pytest.raises(nodeipc.InvalidArgumentError) as caught:
        nodeipc.Region.create("no-leading-slash", 64)
    assert "no-leading-slash" in str(caught.value)
    assert caught.value.errno is None


def test_the_errno_behind_every_layers_error_reaches_python(unique_name, private_dir):
    # A name taken (EEXIST), a name missing (ENOENT), a socket directory
    # missing (ENOENT, through the channel's error).
    name = unique_name("sem")
    first = nodeipc.NamedSemaphore.create(name, 0)
    with pytest.raises(nodeipc.AlreadyExistsError) as caught:
        nodeipc.NamedSemaphore.create(name, 0)
    assert caught.value.errno == errno.EEXIST
    first.unlink()
    with pytest.raises(nodeipc.NotFoundError) as caught:
        nodeipc.NamedSemaphore.open(name)
    assert caught.value.errno == errno.ENOENT
    from nodeipc.channel import Coordinator

    with Coordinator(unique_name("chan"), 1) as coordinator:
        with pytest.raises(nodeipc.NodeipcError) as caught:
            coordinator.serve(str(private_dir / "missing" / "exec.sock"))
    assert caught.value.errno == errno.ENOENT, caught.value


def test_a_timeout_says_its_duration_in_words(unique_name):
    # "timed out after 20 ms", never Rust's Debug form "20.093828ms".
    name = unique_name("late")
    with pytest.raises(nodeipc.TimeoutError) as caught:
        nodeipc.Region.open(name, timeout=0.02)
    message = str(caught.value)
    assert re.search(r"timed out after \d+ ms waiting", message), message
    region = nodeipc.Region.anonymous(64)
    semaphore = nodeipc.ShmSemaphore(region, 0, initial=0)
    with pytest.raises(nodeipc.TimeoutError) as caught:
        semaphore.wait(timeout=0.01)
    message = str(caught.value)
    assert re.search(r"timed out after \d+ ms waiting for semaphore", message), message
