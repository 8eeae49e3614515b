"""The simulated API server's pod proxy words a failure to reach the pod as the real one does
(Go's net errors after "error trying to reach service: "), naming what failed: a refused
connection, a timeout, a reset, a closed connection."""

from __future__ import annotations

import http.client

import pytest

from k3sim.kubeapi import _dial_error


@pytest.mark.parametrize("exc,text", [
    (ConnectionRefusedError(111, "Connection refused"), "dial tcp 10.0.0.7:8000: connect: connection refused"),
    (TimeoutError("timed out"), "dial tcp 10.0.0.7:8000: i/o timeout"),
    (ConnectionResetError(104, "Connection reset by peer"), "read tcp 10.0.0.7:8000: read: connection reset by peer"),
    (http.client.RemoteDisconnected("Remote end closed connection without response"), "EOF"),
    (OSError(113, "No route to host"), "dial tcp 10.0.0.7:8000: No route to host"),
])
def test_each_failure_is_named_as_it_happened(exc, text):
    assert _dial_error(exc, "10.0.0.7", 8000) == text
