"""Region: named and anonymous, the writable buffer protocol (memoryview,
numpy), descriptors, seals, and bad arguments refused clearly."""

import errno
import os
import threading
import time

import pytest

import nodeipc
from conftest import require_module


def test_a_named_region_is_seen_by_an_opener_and_removed_on_unlink(unique_name):
    name = unique_name("named")
    created = nodeipc.Region.create(name, 4096)
    assert created.name == name and created.size == 4096 and len(created) == 4096
    created.write(10, b"hello")
    opened = nodeipc.Region.open(name, min_size=4096)
    assert opened.read(10, 5) == b"hello"
    memoryview(opened)[10] = ord("j")
    assert created.read(10, 5) == b"jello"
    created.unlink()
    with pytest.raises(nodeipc.NotFoundError):
        nodeipc.Region.open(name)
    # The mappings live on after the name is gone.
    assert opened.read(10, 5) == b"jello"


def test_the_buffer_is_writable_shared_memory_without_copies():
    region = nodeipc.Region.anonymous(4096)
    view = memoryview(region)
    assert not view.readonly and view.nbytes == 4096 and view.format == "B"
    view[0:4] = b"\x01\x02\x03\x04"
    assert region.read(0, 4) == b"\x01\x02\x03\x04"
    region.write(8, b"\xff")
    assert view[8] == 0xFF
    view.release()


def test_numpy_sees_the_region_and_writes_through():
    numpy = require_module("numpy")
    region = nodeipc.Region.anonymous(4096)
    words = numpy.frombuffer(region, dtype=numpy.uint32)
    assert words.shape == (1024,) and words.flags.writeable
    words[3] = 0xDEADBEEF
    assert region.read(12, 4) == (0xDEADBEEF).to_bytes(4, "little")
    # A second view of the same memory, through a descriptor.
    other = nodeipc.Region.from_fd(region.fileno())
    assert numpy.frombuffer(other, dtype=numpy.uint32)[3] == 0xDEADBEEF
    # The array keeps the region alive after our last name for it goes.
    del region, other
    assert words[3] == 0xDEADBEEF


def test_from_fd_duplicates_and_the_caller_keeps_its_descriptor():
    region = nodeipc.Region.anonymous(8192)
    region.write(0, b"abc")
    fd = os.dup(region.fileno())
    copy = nodeipc.Region.from_fd(fd)
    os.close(fd)  # ours to close: the region holds its own duplicate
    assert copy.size == 8192 and copy.read(0, 3) == b"abc"


def test_a_sealed_region_says_so():
    region = nodeipc.Region.anonymous(4096)
    assert not region.sealed
    region.seal()
    assert region.sealed


def test_open_waits_for_the_creator_and_times_out_naming_the_object(unique_name):
    name = unique_name("later")
    made = []

    def create_later():
        time.sleep(0.2)
        made.append(nodeipc.Region.create(name, 4096))

    creator = threading.Thread(target=create_later)
    creator.start()
    start = time.monotonic()
    opened = nodeipc.Region.open(name, min_size=4096, timeout=10)
    assert 0.1 < time.monotonic() - start < 5
    creator.join()
    assert opened.size == 4096
    made[0].unlink()

    missing = unique_name("never")
    start = time.monotonic()
    with pytest.raises(nodeipc.TimeoutError) as caught:
        nodeipc.Region.open(missing, timeout=0.2)
    assert 0.15 < time.monotonic() - start < 3
    assert missing in str(caught.value)
    assert isinstance(caught.value, TimeoutError)


def test_a_region_in_a_with_block_is_unlinked_at_its_end(unique_name):
    name = unique_name("with")
    with nodeipc.Region.create(name, 64) as region:
        region.write(0, b"x")
        # An opener's block leaves the name to its creator.
        with nodeipc.Region.open(name) as opened:
            assert opened.read(0, 1) == b"x"
        assert nodeipc.Region.open(name).read(0, 1) == b"x"
    with pytest.raises(nodeipc.NotFoundError):
        nodeipc.Region.open(name)


@pytest.mark.parametrize("size", [-1, 0, -(2**70), 2**70])
def test_bad_sizes_are_refused_naming_the_value(size):
    with pytest.raises(nodeipc.InvalidArgumentError) as caught:
        nodeipc.Region.anonymous(size)
    assert str(size) in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_bad_arguments_are_refused_clearly(unique_name):
    with pytest.raises(TypeError):
        nodeipc.Region.anonymous("4096")
    with pytest.raises(TypeError):
        nodeipc.Region.create(unique_name("t"), 4.5)
    region = nodeipc.Region.anonymous(64)
    with pytest.raises(nodeipc.InvalidArgumentError):
        region.read(-1, 4)
    with pytest.raises(nodeipc.InvalidArgumentError) as caught:
        region.read(60, 8)
    assert "64" in str(caught.value)
    with pytest.raises(nodeipc.InvalidArgumentError):
        region.write(63, b"ab")
    with pytest.raises(nodeipc.InvalidArgumentError):
        nodeipc.Region.open(unique_name("t"), timeout=-1)
    with pytest.raises(nodeipc.InvalidArgumentError):
        nodeipc.Region.open(unique_name("t"), timeout=float("nan"))


def test_closed_and_negative_descriptors_are_refused():
    r, w = os.pipe()
    os.close(r)
    os.close(w)
    with pytest.raises(nodeipc.InvalidArgumentError) as caught:
        nodeipc.Region.from_fd(r)
    assert str(r) in str(caught.value)
    assert caught.value.errno == errno.EBADF
    with pytest.raises(nodeipc.InvalidArgumentError):
        nodeipc.Region.from_fd(-1)
    # An open descriptor that is not a region: refused by the Rust check.
    r, w = os.pipe()
    try:
        with pytest.raises(nodeipc.NotPermittedError):
            nodeipc.Region.from_fd(r)
    finally:
        os.close(r)
        os.close(w)
