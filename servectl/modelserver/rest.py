"""The model server's REST transport: an HTTP/1.1 server with keep-alive, deadlines and a
connection cap, in front of :class:`~servectl.modelserver.rest_api.RestApi` (TF Serving's
REST API: routing, and JSON <-> arrays through :mod:`~servectl.modelserver.rest_codec`).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import queue
import re
import select
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from servectl.modelserver import errors, rest_api
from servectl.modelserver.models import ModelManager
from servectl.modelserver.monitoring import (
    CONTENT_TYPE,
    ServingMetrics,
)

log = logging.getLogger(__name__)

# Largest request body accepted (--max_request_bytes; TF Serving's gRPC limit): a larger
# Content-Length is answered 413 before a byte of the body is read.
MAX_BODY_BYTES = errors.DEFAULT_MAX_REQUEST_BYTES

# The whole request head (request line and headers) must arrive within this many seconds
# of its first byte (or within the request timeout, if that is smaller).
HEAD_TIMEOUT_S = 10.0

# Connections served at once (one thread each); the next ones get 503 and are closed.
DEFAULT_MAX_CONNECTIONS = 256

# Listen backlog: connections the kernel queues before the server accepts them.
LISTEN_BACKLOG = 1024


# --------------------------------------------------------------------------- HTTP server


class _DeadlineExceeded(Exception):
    """A request head or body did not arrive in time (not a TimeoutError on purpose: the
    standard handler would swallow that and close without an answer; this one gets 408)."""


class _DeadlineReader(io.RawIOBase):
    """The connection's socket as a raw stream whose reads respect the handler's deadline.

    Each read waits at most the request timeout (an idle keep-alive connection is closed
    after it, as before) and never past the current deadline, so a client trickling a byte
    at a time cannot keep a request head (or body) open longer than the deadline: the
    socket timeout is per read, the deadline is for the whole head.
    """

    def __init__(self, handler: _Handler) -> None:
        super().__init__()
        self._handler = handler

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        handler = self._handler
        idle_timeout = handler.server.request_timeout_s
        deadline = handler.deadline
        timeout = idle_timeout
        limited = False
        if deadline is not None:
            remaining = deadline - handler.server.clock()
            if remaining <= 0:
                raise _DeadlineExceeded(handler.deadline_message)
            if idle_timeout is None or remaining <= idle_timeout:
                timeout, limited = remaining, True
        handler.connection.settimeout(timeout)
        try:
            return int(handler.connection.recv_into(buffer))
        except TimeoutError:
            if limited:
                raise _DeadlineExceeded(handler.deadline_message) from None
            raise


def _raw_response(status: int, message: str) -> bytes:
    """A complete ``Connection: close`` JSON error response, for a connection being cut."""
    body = json.dumps({"error": message}).encode("utf-8")
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def _peer(client_address: Any) -> str:
    if isinstance(client_address, tuple) and len(client_address) >= 2:
        return f"{client_address[0]}:{client_address[1]}"
    return str(client_address)


class _Handler(BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive, as TF Serving's REST server (and load generators) use it.

    Every response carries Content-Length. A response that leaves the request body unread
    (411, 413, a bad Content-Length) closes the connection, so the next request on it
    cannot be read from the middle of a body.

    Deadlines: between requests a connection may stay idle for the request timeout; once
    the first byte of a request arrives, the whole head must arrive within the head
    timeout, and then the body within the body timeout. A request that misses its
    deadline is answered 408 and the connection is closed.
    """

    server: RestServer
    protocol_version = "HTTP/1.1"
    server_version = "servectl-model-server"
    deadline: float | None = None  # server.clock() time by which the current read must end
    deadline_message = ""

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.request_timeout_s)
        # Headers and body go out in two writes; with Nagle on, a keep-alive client's
        # delayed ACK would hold the body back ~40 ms per response.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rfile.close()  # the buffered socket file from StreamRequestHandler
        self._reader = io.BufferedReader(_DeadlineReader(self))
        self.rfile = self._reader
        self.server.connections.opened(self)

    def finish(self) -> None:
        self.server.connections.closed(self)
        super().finish()

    def handle_one_request(self) -> None:
        self.server.connections.idle(self)  # waiting for the next request line
        self._set_deadline(None, "")
        try:
            # Wait (up to the request timeout) for the first byte of the next request.
            if not self._reader.peek(1):
                self.close_connection = True  # the client closed, or a drain shut reads
                return
            self.server.connections.busy(self)  # a request has begun: a drain lets it finish
            timeout = self.server.head_timeout_s
            self._set_deadline(timeout, f"Request head not received within {timeout:g} s")
            super().handle_one_request()
        except TimeoutError as exc:  # idle for the request timeout: close quietly
            self.log_error("Closing idle connection: %r", exc)
            self.close_connection = True
        except _DeadlineExceeded as exc:
            self.log_error("%s", exc)
            self.close_connection = True
            self.connection.settimeout(1.0)  # do not wait on a client that does not read
            with contextlib.suppress(OSError):
                self.connection.sendall(_raw_response(408, str(exc)))
        finally:
            self._set_deadline(None, "")

    def _set_deadline(self, seconds: float | None, message: str) -> None:
        self.deadline = None if seconds is None else self.server.clock() + seconds
        self.deadline_message = message
        # Writes use the socket timeout too: give them the full request timeout back.
        self.connection.settimeout(self.server.request_timeout_s)

    def parse_request(self) -> bool:
        self.server.connections.busy(self)
        if not super().parse_request():
            return False
        if self.request_version == "HTTP/0.9":
            self.send_error(400, "HTTP/0.9 requests are not supported")
            return False
        timeout = self.server.body_timeout_s
        self._set_deadline(timeout, f"Request body not received within {timeout:g} s")
        return True

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's protocol errors (400, 414, 431, 501...) as JSON."""
        self.log_error("code %d, message %s", code, message)
        if self.request_version == "HTTP/0.9":  # answer with a status line and headers
            self.request_version = "HTTP/1.0"
        self._send(code, {"error": message or HTTPStatus(code).phrase}, close=True)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _read_body(self) -> bytes | None:
        """The request body, or None after answering an error (and closing)."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            self._send(
                411,
                {"error": "Chunked request bodies are not supported; send Content-Length"},
                close=True,
            )
            return None
        text = self.headers.get("Content-Length", "0").strip()
        if not (text.isascii() and text.isdigit()) or len(text) > 20:
            self._send(400, {"error": "Invalid Content-Length header"}, close=True)
            return None
        length = int(text)
        if length > self.server.max_body_bytes:
            limit = self.server.max_body_bytes
            self._send(413, {"error": errors.request_too_large(length, limit)}, close=True)
            return None
        body = self.rfile.read(length) if length > 0 else b""
        self._set_deadline(None, "")
        if len(body) < length:  # the client closed in the middle of the body
            self.close_connection = True
            return None
        return body

    def _serve(self, method: str) -> None:
        body = self._read_body()
        if body is None:
            return
        if method != "POST":
            body = b""  # as before: only POST bodies are read as requests
        path = self.path
        metrics_path = self.server.metrics_path
        if metrics_path is not None and path.split("?", 1)[0] == metrics_path:
            self._send_metrics(method)
            return
        if not re.match(r"(?i)/v1/", path):
            self._send(404, {"error": f"Not found: {method} {path}"})
            return
        status, payload = self.server.api.handle(method, path, body)
        self._send(status, payload)

    def _send_metrics(self, method: str) -> None:
        if method != "GET" or self.server.api.metrics is None:
            self._send(405, {"error": f"Method not allowed: {method} {self.path}"})
            return
        data = self.server.api.metrics.exposition().encode("utf-8")
        self.send_response(200, HTTPStatus.OK.phrase)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        self._end_headers(close=False)
        self.wfile.write(data)

    def _send(self, status: int, payload: Any, *, close: bool = False) -> None:
        data = json.dumps(payload, separators=(",", ":")).encode("utf-8")
        self.send_response(status, HTTPStatus(status).phrase)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self._end_headers(close=close)
        if self.command != "HEAD":  # the answer to HEAD (501) has no body
            self.wfile.write(data)

    def _end_headers(self, *, close: bool) -> None:
        if close or self.server.connections.draining:  # the last response on this connection
            self.send_header("Connection", "close")  # also sets self.close_connection
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s - %s", self.address_string(), format % args)


class _Connections:
    """Open keep-alive connections, idle or busy, so a stop can close the idle ones.

    A connection is busy from the first byte of a request to its answer. On :meth:`drain`,
    idle connections (waiting for a next request, nothing received) are shut for reading,
    which ends their handler threads; busy ones finish their request and answer it with
    ``Connection: close``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[Any, bool] = {}  # handler -> idle?
        self.draining = False

    def opened(self, handler: Any) -> None:
        with self._lock:
            self._idle[handler] = True

    def closed(self, handler: Any) -> None:
        with self._lock:
            self._idle.pop(handler, None)

    def idle(self, handler: Any) -> None:
        with self._lock:
            if handler in self._idle:
                self._idle[handler] = True
            if self.draining:
                handler.close_connection = True
                _shut_reads(handler.connection)

    def busy(self, handler: Any) -> None:
        with self._lock:
            if handler in self._idle:
                self._idle[handler] = False

    def drain(self) -> None:
        with self._lock:
            self.draining = True
            for handler, idle in self._idle.items():
                # A request that has arrived but is not parsed yet is served (its
                # handler shuts reads itself after answering, in idle()).
                if idle and not _has_input(handler.connection):
                    _shut_reads(handler.connection)


def _has_input(sock: socket.socket) -> bool:
    """Whether bytes (or the peer's close) wait to be read on ``sock``, without blocking."""
    poller = select.poll()
    try:
        poller.register(sock, select.POLLIN)
    except (OSError, ValueError):  # closed meanwhile
        return False
    return bool(poller.poll(0))


def _shut_reads(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed by the peer
        sock.shutdown(socket.SHUT_RD)


class _Rejecter:
    """Answers connections over the cap with 503 on one thread, not a thread each.

    The 503 is sent (it fits the socket buffer, so the send never blocks) and the write
    side shut at once; the socket is then kept for up to ``LINGER_S``, reading and
    dropping what the client sends, until the client closes. Closing at once with the
    client's request unread would send a reset, which can destroy the 503 before the
    client reads it.
    """

    LINGER_S = 2.0
    MAX_LINGERING = 1024  # beyond this, close at once

    def __init__(self, message: str, clock: Callable[[], float]) -> None:
        self.response = _raw_response(503, message)
        self._clock = clock
        self.rejected = 0
        self._queue: queue.SimpleQueue[socket.socket] = queue.SimpleQueue()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="rest-reject", daemon=True)
        self._thread.start()

    def reject(self, sock: socket.socket) -> None:
        """Send the 503 and hand the socket to the lingering thread (never blocks)."""
        self.rejected += 1
        try:
            sock.setblocking(False)
            sock.send(self.response)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            sock.close()
            return
        self._queue.put(sock)
        with contextlib.suppress(OSError):  # the wake-up pipe is full: it is awake anyway
            self._wake_w.send(b"x")

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._thread.join(5)
        self._wake_r.close()
        self._wake_w.close()

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._wake_r, selectors.EVENT_READ)
        lingering: dict[socket.socket, float] = {}
        while not self._closed:
            now = self._clock()
            for sock, until in list(lingering.items()):
                if until <= now:
                    del lingering[sock]
                    sel.unregister(sock)
                    sock.close()
            timeout = min(lingering.values(), default=now + 3600) - now
            for key, _ in sel.select(max(timeout, 0.0)):
                sock = key.fileobj  # type: ignore[assignment]
                if sock is self._wake_r:
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(4096)
                    continue
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                if not data:  # the client closed (or reset): done
                    del lingering[sock]
                    sel.unregister(sock)
                    sock.close()
            while True:
                try:
                    sock = self._queue.get_nowait()
                except queue.Empty:
                    break
                if len(lingering) >= self.MAX_LINGERING:
                    sock.close()
                    continue
                lingering[sock] = self._clock() + self.LINGER_S
                sel.register(sock, selectors.EVENT_READ)
        for sock in lingering:
            sock.close()
        sel.close()


class RestServer(ThreadingHTTPServer):
    """A thread per connection, up to ``max_connections``; :meth:`stop` waits for in-flight
    requests.

    Connections over the cap are answered ``503`` with ``Connection: close`` from one
    shared thread. ``head_timeout_s`` bounds the time from a request's first byte to the
    end of its headers (default: ``HEAD_TIMEOUT_S``, or ``request_timeout_s`` if smaller);
    ``body_timeout_s`` bounds reading the body (default: ``request_timeout_s``).
    """

    daemon_threads = False
    block_on_close = True
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(
        self,
        manager: ModelManager,
        host: str = "0.0.0.0",
        port: int = 8501,
        *,
        request_timeout_s: float | None = 30.0,
        head_timeout_s: float | None = None,
        body_timeout_s: float | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        max_body_bytes: int = MAX_BODY_BYTES,
        metrics: ServingMetrics | None = None,
        metrics_path: str | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        """``metrics`` records every request; ``metrics_path`` (with ``metrics``) serves
        the Prometheus page at that path, as TF Serving's ``prometheus_config`` does.
        ``clock`` (monotonic seconds) times the head and body deadlines."""
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        if max_body_bytes < 0:
            raise ValueError("max_body_bytes must be 0 or more")
        self.api = rest_api.RestApi(manager, metrics)
        self.metrics_path = metrics_path if metrics is not None else None
        self.request_timeout_s = request_timeout_s
        if head_timeout_s is None:
            head_timeout_s = min(HEAD_TIMEOUT_S, request_timeout_s or HEAD_TIMEOUT_S)
        self.head_timeout_s = head_timeout_s
        self.body_timeout_s = body_timeout_s if body_timeout_s is not None else request_timeout_s
        self.max_connections = max_connections
        self.max_body_bytes = max_body_bytes
        self.connections = _Connections()
        self.clock = clock
        self._active = 0
        self._active_lock = threading.Lock()
        self._rejecter = _Rejecter(
            f"The server is serving its maximum of {max_connections} connections; try again later",
            clock,
        )
        super().__init__((host, port), _Handler)  # on a failed bind, calls server_close

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def active_connections(self) -> int:
        """Connections with a handler thread (at most ``max_connections``)."""
        return self._active

    @property
    def rejected_connections(self) -> int:
        """Connections answered 503 because the cap was reached."""
        return self._rejecter.rejected

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._active_lock:
            full = self._active >= self.max_connections
            if not full:
                self._active += 1
        if full:
            log.debug("Connection from %s over the cap: 503", _peer(client_address))
            self._rejecter.reject(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release()

    def _release(self) -> None:
        with self._active_lock:
            self._active -= 1

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that resets or goes away is one log line; anything else is a bug."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            log.info("REST connection from %s ended: %r", _peer(client_address), exc)
            return
        log.error("Error on the REST connection from %s", _peer(client_address), exc_info=True)

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="rest-api", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        """Stop accepting, close idle keep-alive connections, finish requests in flight."""
        self.shutdown()
        self.connections.drain()
        self.server_close()

    def server_close(self) -> None:
        super().server_close()
        self._rejecter.close()


def serve_rest(manager: ModelManager, host: str, port: int, **kwargs: Any) -> RestServer:
    """Bind and start a REST server in a background thread."""
    server = RestServer(manager, host, port, **kwargs)
    server.start()
    return server


__all__: Sequence[str] = [
    "DEFAULT_MAX_CONNECTIONS",
    "HEAD_TIMEOUT_S",
    "MAX_BODY_BYTES",
    "RestServer",
    "serve_rest",
]
