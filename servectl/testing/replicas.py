"""Fake model-server replicas on loopback ports: a REST and a gRPC port answering their name.

For tests and benches of the router (:mod:`servectl.backends.local.router`): a
:class:`FakeReplica` says who answered, can be slow on request (to hold a request in flight
while it is drained), counts what it served, and stops like a killed process (its open
connections are cut, not left to finish).

- REST (HTTP/1.1, keep-alive): any ``GET`` or ``POST`` answers ``200`` with the name as the
  body; ``?sleep=<seconds>`` delays the answer.
- gRPC (h2c): the unary method :data:`GRPC_METHOD`, raw bytes in and out (no protobuf): the
  answer is the name; a request body holding a number of seconds delays it. Needs
  ``grpcio`` (the ``serving`` extra); with ``grpc=False`` the gRPC port is a free port
  nobody answers on.

Example::

    with FakeReplica("cost-v1-a") as replica:
        endpoint = replica.endpoint()        # a router Endpoint on its ports
        assert get(f"http://127.0.0.1:{replica.rest_port}/") == "cost-v1-a"
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import urllib.parse
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

from servectl import processes
from servectl.backends.local.router_model import Endpoint

GRPC_SERVICE = "servectl.testing.Replica"
GRPC_METHOD = f"/{GRPC_SERVICE}/Name"


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Health checks connect and reset; a stop cuts connections: neither is news.
        pass


class FakeReplica:
    """One replica: REST and (optionally) gRPC servers named ``name`` (see module doc)."""

    def __init__(self, name: str, *, grpc: bool = True) -> None:
        self.name = name
        self.with_grpc = grpc
        self._lock = threading.Lock()
        self._served = 0
        self._inflight = 0
        self._connections: set[socket.socket] = set()
        self._accepted = 0
        self._http: ThreadingHTTPServer | None = None
        self._http_thread: threading.Thread | None = None
        self._grpc: Any = None
        self._rest_port = 0
        self._grpc_port = 0

    # --- counters

    @property
    def served(self) -> int:
        """Requests answered (REST and gRPC)."""
        with self._lock:
            return self._served

    @property
    def accepted(self) -> int:
        """REST connections accepted so far (a router that reuses them opens few)."""
        with self._lock:
            return self._accepted

    @property
    def inflight(self) -> int:
        """Requests being answered now."""
        with self._lock:
            return self._inflight

    def _begin(self) -> None:
        with self._lock:
            self._inflight += 1

    def _end(self) -> None:
        with self._lock:
            self._inflight -= 1
            self._served += 1

    # --- addresses

    @property
    def rest_port(self) -> int:
        return self._rest_port

    @property
    def grpc_port(self) -> int:
        return self._grpc_port

    def endpoint(self, *, draining: bool = False) -> Endpoint:
        """This replica as a router endpoint."""
        return Endpoint(self.name, self._rest_port, self._grpc_port, draining)

    @property
    def running(self) -> bool:
        return self._http is not None

    # --- lifecycle

    def start(self) -> Self:
        """Listen (on the same ports as before after a stop) and serve in daemon threads."""
        if self._http is not None:
            return self
        replica = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # Headers and body are two writes: without this, Nagle's algorithm holds
                # the body until the client's delayed ACK (40 ms).
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                with replica._lock:
                    replica._connections.add(self.connection)
                    replica._accepted += 1

            def finish(self) -> None:
                with replica._lock:
                    replica._connections.discard(self.connection)
                with contextlib.suppress(OSError):
                    super().finish()

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                replica._begin()
                try:
                    query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                    delay = float(query.get("sleep", ["0"])[0])
                    if delay > 0:
                        time.sleep(delay)
                    body = replica.name.encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                finally:
                    replica._end()

            do_GET = _answer
            do_POST = _answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = _QuietServer(("127.0.0.1", self._rest_port), Handler)
        self._rest_port = server.server_address[1]
        self._http = server
        self._http_thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._http_thread.start()
        if self.with_grpc:
            self._start_grpc()
        elif self._grpc_port == 0:
            # A port nobody answers on, so that the replica is still a valid endpoint.
            self._grpc_port = processes.free_port()
        return self

    def _start_grpc(self) -> None:
        import grpc

        def name(request: bytes, context: Any) -> bytes:
            self._begin()
            try:
                delay = float(request.decode() or 0)
                if delay > 0:
                    time.sleep(delay)
                return self.name.encode()
            finally:
                self._end()

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        handler = grpc.method_handlers_generic_handler(
            GRPC_SERVICE, {"Name": grpc.unary_unary_rpc_method_handler(name)}
        )
        server.add_generic_rpc_handlers((handler,))
        port = server.add_insecure_port(f"127.0.0.1:{self._grpc_port}")
        if port == 0:
            raise OSError(f"gRPC port {self._grpc_port} of replica {self.name} is taken")
        self._grpc_port = port
        server.start()
        self._grpc = server

    def stop(self) -> None:
        """Stop like a killed process: stop listening and cut open connections."""
        server, self._http = self._http, None
        if server is not None:
            server.shutdown()
            server.server_close()
            with self._lock:
                connections = list(self._connections)
            for connection in connections:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
            if self._http_thread is not None:
                self._http_thread.join(timeout=5)
                self._http_thread = None
        grpc_server, self._grpc = self._grpc, None
        if grpc_server is not None:
            grpc_server.stop(grace=None).wait(5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"REST {self._rest_port}, gRPC {self._grpc_port}" if self.running else "stopped"
        return f"FakeReplica({self.name!r}, {state})"
