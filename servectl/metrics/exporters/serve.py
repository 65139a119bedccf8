"""Serve a registry's ``/metrics`` over HTTP, the way the exporters and tests need it.

``start`` binds (port 0 picks a free port), serves from a background thread and returns the
server and its URL; ``stop`` shuts it down. ``serve_until_signalled`` is the CLI's loop: serve
until SIGTERM or SIGINT, then stop cleanly. Only ``/metrics`` serves metrics (with the
content negotiation, ``name[]`` filtering and gzip of prometheus_client's WSGI app); ``/``
says where to look; anything else is 404.
"""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from types import FrameType
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, generate_latest, make_wsgi_app

StartResponse = Callable[..., Any]
Environ = dict[str, Any]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class MetricsServer(ThreadingMixIn, WSGIServer):
    """A threaded WSGI server that knows the thread serving it."""

    daemon_threads = True
    thread: threading.Thread | None = None


class _MetricsServer6(MetricsServer):
    address_family = socket.AF_INET6


def _app(registry: CollectorRegistry) -> Callable[[Environ, StartResponse], Iterable[bytes]]:
    metrics = make_wsgi_app(registry)

    def app(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            return metrics(environ, start_response)  # type: ignore[no-any-return]
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"servectl exporter: metrics are at /metrics\n"]
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found; metrics are at /metrics\n"]

    return app


def start(
    registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 0
) -> tuple[MetricsServer, str]:
    """Serve ``registry`` at ``http://host:port/metrics`` from a daemon thread.

    Returns the server and the metrics URL with the bound port (useful with ``port=0``).
    Raises OSError when the address cannot be bound.
    """
    server_class = _MetricsServer6 if ":" in host else MetricsServer
    server = make_server(
        host, port, _app(registry), server_class=server_class, handler_class=_QuietHandler
    )
    assert isinstance(server, MetricsServer)
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.1},  # how soon stop() returns
        name=f"metrics-{server.server_port}",
        daemon=True,
    )
    server.thread = thread
    thread.start()
    shown = f"[{host}]" if ":" in host else host
    return server, f"http://{shown}:{server.server_port}/metrics"


def stop(server: MetricsServer, timeout: float = 5.0) -> None:
    """Stop serving, close the socket and wait for the serving thread."""
    server.shutdown()
    server.server_close()
    if server.thread is not None:
        server.thread.join(timeout)


def exposition(registry: CollectorRegistry) -> str:
    """One scrape of ``registry`` in the Prometheus text format (``--once``)."""
    return generate_latest(registry).decode("utf-8")


def serve_until_signalled(
    registry: CollectorRegistry,
    host: str,
    port: int,
    on_ready: Callable[[str], None],
    stopped: threading.Event | None = None,
) -> None:
    """Serve until SIGTERM or SIGINT (or ``stopped`` is set), then stop; main thread only.

    ``on_ready`` receives the URL once the socket is bound.
    """
    stopped = stopped or threading.Event()

    def handle(signum: int, frame: FrameType | None) -> None:
        stopped.set()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server, url = start(registry, host, port)
        try:
            on_ready(url)
            while not stopped.wait(0.5):
                pass
        finally:
            stop(server)
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
