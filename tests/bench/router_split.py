"""The router's split accuracy at low and high request rates, and its latency overhead.

    python tests/bench/router_split.py [--weights 90,10] [--slow-duration 10]
        [--fast-rate 500] [--fast-duration 5] [--latency-requests 2000]

The router part of ``servectl bench --local`` (servectl/backends/local/bench.py) with its
knobs exposed: HAProxy in front of fake replicas (servectl.testing.replicas), one revision
per weight, two replicas each; ~1 request/s for ``--slow-duration`` seconds (where
``balance leastconn`` with weights degenerates to 50/50), ~``--fast-rate`` requests/s for
``--fast-duration`` seconds from 8 paced threads, then sequential requests on one
kept-alive connection straight to a replica and through HAProxy. The split is exact for
whole 100-request cycles. Pin it away from HAProxy's cores for steadier latencies
(``taskset -c 1 python ...``).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from servectl.backends.local import bench
from servectl.backends.local.router import haproxy_version


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--weights", default="90,10", help="percents, summing to 100")
    parser.add_argument("--slow-duration", type=float, default=10.0, help="seconds at ~1 req/s")
    parser.add_argument("--fast-rate", type=float, default=500.0, help="requests/s")
    parser.add_argument("--fast-duration", type=float, default=5.0, help="seconds")
    parser.add_argument("--latency-requests", type=int, default=2000)
    args = parser.parse_args()
    print(f"HAProxy {haproxy_version()}, weights {args.weights}, two replicas each\n")
    with tempfile.TemporaryDirectory(prefix="router-bench-") as tmp:
        figures = bench.router_figures(
            Path(tmp),
            slow_s=args.slow_duration,
            fast_rate=args.fast_rate,
            fast_s=args.fast_duration,
            latency_requests=args.latency_requests,
            split=[int(w) for w in args.weights.split(",")],
            progress=print,
        )
    print()
    for figure in figures:
        print(f"{figure.name:<40}{figure.shown():>16}  {figure.detail}")


if __name__ == "__main__":
    main()
