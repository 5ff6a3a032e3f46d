"""NamedSemaphore and ShmSemaphore: counts, timeouts, another process."""

import subprocess
import sys
import time

import pytest

import nodeipc


def test_a_named_semaphore_counts_and_times_out(unique_name):
    name = unique_name("sem")
    sem = nodeipc.NamedSemaphore.create(name, 1)
    assert sem.name == name and sem.value == 1
    assert sem.try_wait() and not sem.try_wait()
    sem.post()
    sem.wait(timeout=1)
    start = time.monotonic()
    with pytest.raises(nodeipc.TimeoutError) as caught:
        sem.wait(timeout=0.2)
    assert 0.15 < time.monotonic() - start < 3
    assert name in str(caught.value)
    other = nodeipc.NamedSemaphore.open(name)
    other.post()
    assert sem.value == 1
    sem.unlink()
    with pytest.raises(nodeipc.NotFoundError):
        nodeipc.NamedSemaphore.open(name)


def test_a_shm_semaphore_is_posted_by_another_process(unique_name):
    name = unique_name("shmsem")
    region = nodeipc.Region.create(name, 4096)
    sem = nodeipc.ShmSemaphore(region, offset=64, initial=0)
    assert sem.value == 0 and nodeipc.ShmSemaphore.SIZE == 8
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time, nodeipc\n"
            f"region = nodeipc.Region.open({name!r}, min_size=4096, timeout=5)\n"
            "time.sleep(0.2)\n"
            "nodeipc.ShmSemaphore(region, offset=64).post()\n",
        ],
    )
    start = time.monotonic()
    sem.wait(timeout=10)
    assert time.monotonic() - start < 8
    assert proc.wait(timeout=30) == 0
    region.unlink()


def test_bad_semaphore_arguments_are_refused(unique_name):
    region = nodeipc.Region.anonymous(64)
    with pytest.raises(nodeipc.InvalidArgumentError):
        nodeipc.ShmSemaphore(region, offset=62)  # past the end
    with pytest.raises(nodeipc.InvalidArgumentError):
        nodeipc.ShmSemaphore(region, offset=2)  # misaligned
    with pytest.raises(nodeipc.InvalidArgumentError):
        nodeipc.ShmSemaphore(region, offset=-8)
    with pytest.raises(nodeipc.InvalidArgumentError):
        nodeipc.ShmSemaphore(region, initial=-1)
    with pytest.raises(nodeipc.InvalidArgumentError):
        nodeipc.NamedSemaphore.create(unique_name("s"), -1)
    with pytest.raises(TypeError):
        nodeipc.ShmSemaphore(b"not a region")
    sem = nodeipc.ShmSemaphore(region, initial=0)
    with pytest.raises(nodeipc.InvalidArgumentError):
        sem.wait(timeout=-0.5)
