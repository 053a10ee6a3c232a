"""Frames travel on any descriptor: a host with a thousand live states has sockets numbered past 1023."""
from __future__ import annotations

import os
import resource
import socket
import time

import pytest

from sandbox.runtime import protocol


@pytest.fixture()
def high_descriptors():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 2048
    if hard != resource.RLIM_INFINITY and hard < want:
        pytest.skip(f"the descriptor limit here is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    null = os.open(os.devnull, os.O_RDONLY)
    filler = [os.dup(null) for _ in range(1100)]
    try:
        yield
    finally:
        for fd in (null, *filler):
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_frame_arrives_on_a_socket_numbered_past_1023(high_descriptors):
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        assert left.fileno() > 1023 and right.fileno() > 1023
        protocol.send_frame(left, {"op": "ping", "n": 1})
        message, _, _ = protocol.recv_frame(right, time.monotonic() + 5)
        assert message == {"op": "ping", "n": 1}
        with pytest.raises(protocol.FrameTimeout):
            protocol.recv_frame(right, time.monotonic() + 0.05)
        assert not protocol.readable(right, time.monotonic() + 0.01)
    finally:
        left.close()
        right.close()
