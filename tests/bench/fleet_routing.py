"""Cost of ``Fleet.step`` under each routing: one simulated hour at a flat 1000 rps.

    python tests/bench/fleet_routing.py [--seconds 3600] [--rps 1000] [--repeats 3]

The requests (``RequestStream``, routing draws included) are drawn once, before any
timing, so only ``Fleet.step`` is timed. The fleet is the speed check's: the default
``ServiceModel`` (20 ms, cv 0.5, 2 threads) on ``ceil(rps * 0.02 / (2 * 0.7))`` warm
replicas (15 at 1000 rps, 70 % utilization). Routings are interleaved repeat by repeat so
machine noise hits them alike. Prints each routing's median wall time, its ratio to round
robin's median, and the mean and p99 wait it produced.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np

from servectl.sim import model


def _run(
    routing: model.Routing,
    service: model.ServiceModel,
    replicas: int,
    seconds: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]],
) -> tuple[float, np.ndarray]:
    fleet = model.Fleet(service, routing)
    fleet.add(replicas, created=-60.0, ready_at=-60.0)
    fleet.update(0.0)
    waits = []
    started = time.perf_counter()
    for t, (offsets, service_s, route_u) in enumerate(seconds):
        waits.append(fleet.step(t, offsets, service_s, route_u).wait_s)
    return time.perf_counter() - started, np.concatenate(waits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=3600)
    parser.add_argument("--rps", type=float, default=1000.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    service = model.ServiceModel()
    replicas = max(1, math.ceil(args.rps * service.service_s / (service.threads_per_replica * 0.7)))
    stream = model.RequestStream(
        np.full(args.seconds, args.rps), service, args.seed, with_routing=True
    )
    seconds = []
    for t in range(args.seconds):
        offsets, service_s, route_u = stream.second(t)
        seconds.append(
            (offsets.copy(), service_s.copy(), None if route_u is None else route_u.copy())
        )
    total = int(stream.counts.sum())
    print(f"{args.seconds} s at {args.rps:g} rps: {total:,} requests, {replicas} replicas")

    times: dict[model.Routing, list[float]] = {routing: [] for routing in model.Routing}
    waits: dict[model.Routing, np.ndarray] = {}
    for _ in range(args.repeats):
        for routing in model.Routing:
            wall, waits[routing] = _run(routing, service, replicas, seconds)
            times[routing].append(wall)
    base = statistics.median(times[model.Routing.ROUND_ROBIN])
    for routing in model.Routing:
        median = statistics.median(times[routing])
        runs = ", ".join(f"{wall:.2f}" for wall in times[routing])
        wait = waits[routing]
        print(
            f"{routing.value:>14}: median {median:.2f} s ({runs}), "
            f"x{median / base:.1f} round robin, {median / total * 1e9:.0f} ns/request; "
            f"wait mean {wait.mean() * 1e3:.2f} ms, p99 {np.quantile(wait, 0.99) * 1e3:.1f} ms"
        )


if __name__ == "__main__":
    main()
