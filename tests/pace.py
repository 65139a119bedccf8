"""Load sized to the machine the tests run on.

The scaling tests drive one model (the demo's ``cost_model``, a fixed chain of matmuls per
request) at fixed request rates through a real front. How much CPU a request costs differs
between the machines CI runs on by more than twice (CPU model, vector units, neighbours), so
a rate that keeps one replica at a third of its CPU limit on one machine saturates it on
another: p99 passes the SLO on the base load, the latency signal scales out before the step,
and a test waiting for "one replica on the base load" times out (CI, 2026-11-28).

:func:`measure` times sequential requests to one replica through the front: with one
request in flight the replica works without queueing, so the median is its service time
under its CPU limit, and ``1 / median`` its capacity. :class:`Pace` scales the tests'
nominal rates down where the base load would keep the replica more than ``BUSY`` busy, and
raises the latency SLO where the service time alone would breach it. On a machine as fast as
the one the figures in docs/benchmarks.md come from the nominal rates stand (factor 1).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

BUSY = 0.35
"""The largest share of one replica's capacity the base load may take."""
SLO_PER_SERVICE_TIME = 4.0
"""A latency SLO is at least this many service times (queueing and CFS throttling at 30 %)."""


@dataclass(frozen=True)
class Pace:
    service_ms: float
    """Median latency of one request alone on one replica, through the front."""
    factor: float
    """The share of the nominal rates this machine's replica carries as designed (<= 1)."""

    def rps(self, nominal: float) -> float:
        return round(nominal * self.factor, 2)

    def slo_ms(self, nominal: float) -> float:
        return max(nominal, round(SLO_PER_SERVICE_TIME * self.service_ms))

    def __str__(self) -> str:
        return f"service time {self.service_ms:.0f} ms alone; rates x{self.factor:.2f}"


def measure(call: Callable[[], object], base_rps: float, samples: int = 15) -> Pace:
    """Time ``samples`` sequential ``call()``s (after 3 to warm up) and size ``base_rps``."""
    for _ in range(3):
        call()
    took = []
    for _ in range(samples):
        began = time.perf_counter()
        call()
        took.append(time.perf_counter() - began)
    service_s = statistics.median(took)
    factor = min(1.0, BUSY / (service_s * base_rps))
    return Pace(service_ms=service_s * 1000.0, factor=factor)
