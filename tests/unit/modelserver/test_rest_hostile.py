"""Hostile clients over real sockets: slow request heads and bodies, a full connection cap,
resets, bad Content-Length. Small configured limits keep each test short; the assertions
are on behaviour (who gets what answer), with generous bounds for a busy machine."""

from __future__ import annotations

import json
import logging
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("tensorflow")

from servectl.modelserver.models import ModelManager
from servectl.modelserver.rest import RestServer

from .conftest import MODEL

PREDICT = json.dumps({"instances": [1.0]}).encode()
PREDICT_REQUEST = (
    f"POST /v1/models/{MODEL}:predict HTTP/1.1\r\nHost: x\r\nContent-Length: {len(PREDICT)}\r\n\r\n"
).encode() + PREDICT


@pytest.fixture
def make_server(manager: ModelManager) -> Iterator[Callable[..., RestServer]]:
    servers: list[RestServer] = []

    def make(**kwargs: Any) -> RestServer:
        server = RestServer(manager, "127.0.0.1", 0, **kwargs)
        server.start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


def connect(server: RestServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=10)


def read_until_closed(sock: socket.socket) -> bytes:
    reply = b""
    while chunk := sock.recv(65536):
        reply += chunk
    return reply


def read_response(sock: socket.socket) -> bytes:
    """One whole response (head and Content-Length body) from a kept-alive connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(
        next(
            v
            for k, _, v in (ln.partition(b": ") for ln in head.split(b"\r\n"))
            if k.lower() == b"content-length"
        )
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, data
        body += chunk
    return head + b"\r\n\r\n" + body


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def trickle(sock: socket.socket, data: bytes, every_s: float, for_at_most_s: float) -> bytes:
    """Send ``data`` a byte at a time (repeating it) until the server answers or closes.

    Returns what the server sent (b"" if it never did within ``for_at_most_s``).
    """
    deadline = time.monotonic() + for_at_most_s
    i = 0
    while time.monotonic() < deadline:
        try:
            sock.send(data[i % len(data) : i % len(data) + 1])
        except OSError:  # closed by the server: read what it said
            break
        i += 1
        readable, _, _ = select.select([sock], [], [], every_s)
        if readable:
            break
    else:
        return b""
    try:
        return read_until_closed(sock)
    except ConnectionResetError:
        return b"<reset>"


def test_slow_request_head_is_cut_at_the_head_deadline(
    make_server: Callable[..., RestServer],
) -> None:
    # Each byte comes well within the 5 s socket timeout, so only a deadline for the whole
    # head can end this request.
    server = make_server(request_timeout_s=5.0, head_timeout_s=0.5)
    with connect(server) as sock:
        sock.sendall(b"GET /v1/models/half_plus_two HTTP/1.1\r\n")
        started = time.monotonic()
        reply = trickle(sock, b"X-Slow: abcdefgh\r\n", every_s=0.05, for_at_most_s=4.0)
        elapsed = time.monotonic() - started
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), reply
    assert b"Connection: close" in head
    assert json.loads(body) == {"error": "Request head not received within 0.5 s"}
    assert elapsed < 3.5


def test_slow_request_body_is_cut_at_the_body_deadline(
    make_server: Callable[..., RestServer],
) -> None:
    server = make_server(request_timeout_s=5.0, body_timeout_s=0.5)
    with connect(server) as sock:
        sock.sendall(
            f"POST /v1/models/{MODEL}:predict HTTP/1.1\r\nHost: x\r\n"
            "Content-Length: 100000\r\n\r\n".encode()
        )
        reply = trickle(sock, b"[1.0, ", every_s=0.05, for_at_most_s=4.0)
    assert reply.startswith(b"HTTP/1.1 408 "), reply
    assert reply.endswith(b'{"error": "Request body not received within 0.5 s"}')


def test_idle_keep_alive_is_not_cut_by_the_head_deadline_but_by_the_timeout(
    make_server: Callable[..., RestServer],
) -> None:
    server = make_server(request_timeout_s=1.5, head_timeout_s=0.2)
    with connect(server) as sock:
        time.sleep(0.6)  # idle, longer than the head deadline: the head has not started
        sock.sendall(PREDICT_REQUEST)
        reply = read_response(sock)
        assert reply.startswith(b"HTTP/1.1 200 "), reply
        assert reply.endswith(b'{"predictions":[2.5]}')
        started = time.monotonic()
        assert read_until_closed(sock) == b""  # then idle past the request timeout: closed
        assert 1.0 < time.monotonic() - started < 8.0


def test_connections_over_the_cap_get_503_and_are_closed(
    make_server: Callable[..., RestServer],
) -> None:
    server = make_server(max_connections=2, request_timeout_s=30.0, head_timeout_s=30.0)
    slow = [connect(server) for _ in range(2)]
    try:
        for sock in slow:
            sock.sendall(b"GET /v1/models/half_plus_two HTTP/1.1\r\n")  # and no more
        wait_for(lambda: server.active_connections == 2)
        with connect(server) as third:
            third.sendall(PREDICT_REQUEST)
            reply = read_until_closed(third)
        head, _, body = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503 Service Unavailable"), reply
        assert b"Connection: close" in head
        assert json.loads(body) == {
            "error": "The server is serving its maximum of 2 connections; try again later"
        }
        assert server.rejected_connections == 1
        assert server.active_connections == 2
        slow.pop().close()  # a slot frees up: the next client is served
        wait_for(lambda: server.active_connections == 1)
        with connect(server) as fourth:
            fourth.sendall(PREDICT_REQUEST)
            assert read_response(fourth).startswith(b"HTTP/1.1 200 ")
    finally:
        for sock in slow:
            sock.close()


def test_a_keep_alive_client_is_served_next_to_slow_connections(
    make_server: Callable[..., RestServer],
) -> None:
    server = make_server(max_connections=4, request_timeout_s=30.0, head_timeout_s=30.0)
    slow = [connect(server) for _ in range(3)]
    try:
        for sock in slow:
            sock.sendall(b"POST /v1/models/half_plus_two:predict HTTP/1.1\r\n")
        with connect(server) as client:
            for _ in range(5):
                client.sendall(PREDICT_REQUEST)
                assert read_response(client).endswith(b'{"predictions":[2.5]}')
        assert server.rejected_connections == 0
    finally:
        for sock in slow:
            sock.close()


def test_client_reset_is_one_log_line_without_traceback(
    make_server: Callable[..., RestServer],
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    server = make_server()
    caplog.set_level(logging.INFO, logger="servectl.modelserver.rest")
    sock = connect(server)
    sock.sendall(b"GET /v1/models/half_plus_two HTTP/1.1\r\n")  # the server waits for more
    wait_for(lambda: server.active_connections == 1)
    local = sock.getsockname()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()  # linger 0: a reset
    wait_for(lambda: server.active_connections == 0)
    ended = [r for r in caplog.records if "ended" in r.getMessage()]
    assert len(ended) == 1, [r.getMessage() for r in caplog.records]
    assert ended[0].getMessage() == (
        f"REST connection from 127.0.0.1:{local[1]} ended: "
        "ConnectionResetError(104, 'Connection reset by peer')"
    )
    assert ended[0].exc_info is None
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize("length", ["-1", "abc", "\u00b2", "1e3"])
def test_bad_content_length_is_400_and_closes(
    make_server: Callable[..., RestServer], length: str
) -> None:
    server = make_server()
    with connect(server) as sock:
        sock.sendall(
            f"POST /v1/models/{MODEL}:predict HTTP/1.1\r\nHost: x\r\n"
            f"Content-Length: {length}\r\n\r\n".encode("latin-1")
            + PREDICT_REQUEST  # must not be read as a second request
        )
        reply = read_until_closed(sock)
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), reply
    assert b"Connection: close" in head
    assert json.loads(body) == {"error": "Invalid Content-Length header"}


def test_protocol_errors_are_json(make_server: Callable[..., RestServer]) -> None:
    server = make_server()
    with connect(server) as sock:
        sock.sendall(b"GET /v1/models/half_plus_two\r\n\r\n")  # HTTP/0.9
        reply = read_until_closed(sock)
    assert reply.startswith(b"HTTP/1.1 400 "), reply
    assert json.loads(reply.partition(b"\r\n\r\n")[2]) == {
        "error": "HTTP/0.9 requests are not supported"
    }
    with connect(server) as sock:
        sock.sendall(b"BREW /v1/models/half_plus_two HTTP/1.1\r\n\r\n")
        reply = read_until_closed(sock)
    assert reply.startswith(b"HTTP/1.1 501 "), reply
    assert json.loads(reply.partition(b"\r\n\r\n")[2]) == {"error": "Unsupported method ('BREW')"}


def test_stop_finishes_a_request_whose_first_bytes_have_arrived(
    make_server: Callable[..., RestServer],
) -> None:
    server = make_server()
    with connect(server) as sock:
        sock.sendall(PREDICT_REQUEST[:20])  # part of the request line
        wait_for(lambda: False in server.connections._idle.values())  # busy, not idle
        stopping = threading.Thread(target=server.stop)
        stopping.start()
        wait_for(lambda: server.connections.draining)
        sock.sendall(PREDICT_REQUEST[20:])
        reply = read_until_closed(sock)
    stopping.join(10)
    assert not stopping.is_alive()
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), reply
    assert b"Connection: close" in head
    assert body == b'{"predictions":[2.5]}'
