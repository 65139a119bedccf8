"""The router's split accuracy at low and high request rates, and its latency overhead.

    python tests/bench/router_split.py [--weights 90,10] [--slow-duration 10]
        [--fast-rate 500] [--fast-duration 5] [--latency-requests 2000]

Starts HAProxy (servectl.backends.local.router) in a temporary directory in front of fake
replicas (servectl.testing.replicas: threaded http.server answering its name), one revision
per weight, two replicas each, then:

1. ~1 request/s for ``--slow-duration`` seconds (the split must hold at a trickle, where
   ``balance leastconn`` with weights degenerates to 50/50);
2. ~``--fast-rate`` requests/s for ``--fast-duration`` seconds, paced from 8 threads on
   kept-alive connections;
3. sequential requests on one kept-alive connection, straight to a replica and through
   HAProxy: median and p99 latency, and the difference (the router's overhead).

Prints the requests each revision got against the exact expectation (weight × requests
/ 100, which the counter-and-map split meets for any whole number of 100-request cycles).
Pin it away from HAProxy's cores for steadier latencies (``taskset -c 1 python ...``).
"""

from __future__ import annotations

import argparse
import http.client
import socket
import statistics
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from servectl.backends.local.router import RevisionRoute, Router, ServiceRoute, haproxy_version
from servectl.testing.replicas import FakeReplica


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class _Client:
    """One kept-alive connection; reconnects when the server closes it."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn: http.client.HTTPConnection | None = None

    def get(self) -> tuple[int, str | None]:
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            self.conn.request("GET", "/")
            response = self.conn.getresponse()
            response.read()
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = None
            raise
        if response.will_close:
            self.conn.close()
            self.conn = None
        return response.status, response.getheader("x-servectl-revision")


def _paced(port: int, rate: float, duration_s: float, threads: int) -> tuple[Counter[str], int]:
    """Send ``rate`` requests/s for ``duration_s`` from ``threads`` paced threads."""
    revisions: Counter[str] = Counter()
    errors = [0]
    lock = threading.Lock()
    total = round(rate * duration_s)
    start = time.perf_counter() + 0.05

    def run(offset: int) -> None:
        client = _Client(port)
        for index in range(offset, total, threads):
            delay = start + index / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            try:
                status, revision = client.get()
            except (OSError, http.client.HTTPException):
                status, revision = 0, None
            with lock:
                if status == 200 and revision is not None:
                    revisions[revision] += 1
                else:
                    errors[0] += 1

    workers = [threading.Thread(target=run, args=(i,)) for i in range(min(threads, total))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return revisions, errors[0]


def _latencies(port: int, n: int) -> list[float]:
    client = _Client(port)
    for _ in range(50):  # warm up
        client.get()
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        client.get()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def _p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100)[98]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--weights", default="90,10", help="percents, summing to 100")
    parser.add_argument("--slow-duration", type=float, default=10.0, help="seconds at ~1 req/s")
    parser.add_argument("--fast-rate", type=float, default=500.0, help="requests/s")
    parser.add_argument("--fast-duration", type=float, default=5.0, help="seconds")
    parser.add_argument("--latency-requests", type=int, default=2000)
    args = parser.parse_args()
    weights = [int(w) for w in args.weights.split(",")]

    with tempfile.TemporaryDirectory(prefix="router-bench-") as tmp:
        replicas = [
            FakeReplica(f"r{i}-{j}", grpc=False).start()
            for i in range(len(weights))
            for j in range(2)
        ]
        revisions = tuple(
            RevisionRoute(
                f"rev-{i}", weight, tuple(r.endpoint() for r in replicas[2 * i : 2 * i + 2])
            )
            for i, weight in enumerate(weights)
        )
        route = ServiceRoute("bench", "split", _free_port(), _free_port(), revisions)
        router = Router(Path(tmp) / "router", stats_port=_free_port())
        router.start()
        try:
            router.apply([route])
            print(f"HAProxy {haproxy_version()}, weights {args.weights}, two replicas each\n")
            names = [r.name for r in revisions]
            head = f"{'phase':<24}{'requests':>9}{'req/s':>8}  " + "".join(
                f"{n + ' got/exp':>16}" for n in names
            )
            print(head + f"{'errors':>8}")
            phases = [
                (f"~1 req/s, {args.slow_duration:g} s", 1.0, args.slow_duration, 1),
                (
                    f"~{args.fast_rate:g} req/s, {args.fast_duration:g} s",
                    args.fast_rate,
                    args.fast_duration,
                    8,
                ),
            ]
            for label, rate, duration, threads in phases:
                started = time.perf_counter()
                got, errors = _paced(route.rest_port, rate, duration, threads)
                elapsed = time.perf_counter() - started
                n = sum(got.values()) + errors
                cells = "".join(
                    f"{f'{got.get(name, 0)}/{weight * n / 100:g}':>16}"
                    for name, weight in zip(names, weights, strict=True)
                )
                print(f"{label:<24}{n:>9}{n / elapsed:>8.1f}  {cells}{errors:>8}")

            direct = _latencies(replicas[0].rest_port, args.latency_requests)
            routed = _latencies(route.rest_port, args.latency_requests)
            print(
                f"\nlatency, {args.latency_requests} sequential requests on one kept-alive "
                "connection (ms)"
            )
            print(f"{'':<24}{'median':>9}{'p99':>9}")
            for label, samples in (("direct to a replica", direct), ("through HAProxy", routed)):
                print(f"{label:<24}{statistics.median(samples):>9.3f}{_p99(samples):>9.3f}")
            print(
                f"{'overhead':<24}"
                f"{statistics.median(routed) - statistics.median(direct):>9.3f}"
                f"{_p99(routed) - _p99(direct):>9.3f}"
            )
        finally:
            router.stop(timeout_s=2.0)
            for replica in replicas:
                replica.stop()


if __name__ == "__main__":
    main()
