"""Load sized to the machine the tests run on.

The scaling tests drive one model (the demo's ``cost_model``, a fixed chain of matmuls per
request) at fixed request rates through a real front. How much CPU a request costs differs
between the machines CI runs on by more than twice (CPU model, vector units, neighbours), so
a rate that keeps one replica a third busy on one machine saturates it on another: the
service scales out before the step, p99 passes the SLO on the base load, and a test waiting
for "one replica on the base load" times out (CI, 2026-11-28).

:func:`measure` finds one replica's capacity: on a Kubernetes pod (a CPU request, no limit)
its request over the CPU a request costs, from its cgroup (a request's time alone is no
measure there: TensorFlow runs it on two threads, 32 ms alone for 54 ms of CPU); under the
local runtime's CPU limit, one over a request's time alone. :class:`Pace` scales
the tests' nominal rates down where the base load would keep the replica more than ``BUSY``
busy, and raises the latency SLO where the service time alone would breach it. On a machine
as fast as the one the figures in docs/benchmarks.md come from the nominal rates stand.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

BUSY = 0.35
"""The largest share of one replica's capacity the base load may take."""
SLO_PER_SERVICE_TIME = 4.0
"""A latency SLO is at least this many service times (queueing and CFS throttling at 35 %)."""


@dataclass(frozen=True)
class Pace:
    service_ms: float
    """Median latency of one request alone on one replica, through the front."""
    capacity_rps: float
    """Requests per second one replica serves within its CPU limit or request."""
    factor: float
    """The share of the nominal rates this machine's replica carries as designed (<= 1)."""

    def rps(self, nominal: float) -> float:
        return round(nominal * self.factor, 2)

    def slo_ms(self, nominal: float) -> float:
        return max(nominal, round(SLO_PER_SERVICE_TIME * self.service_ms))

    def __str__(self) -> str:
        return (
            f"a request alone {self.service_ms:.0f} ms, one replica's capacity "
            f"{self.capacity_rps:.1f} requests/s; rates x{self.factor:.2f}"
        )


def measure(
    call: Callable[[], object],
    base_rps: float,
    samples: int = 15,
    cpu_s: Callable[[], float] | None = None,
    cores: float = 0.0,
) -> Pace:
    """Time ``samples`` sequential ``call()``s (after 3 to warm up) and size ``base_rps``
    to one replica's capacity: one over a request's time alone where a CPU limit caps it (the
    local runtime);
    ``cores`` over the CPU a request costs where it has no limit and may use the node's idle
    cores, as a Kubernetes pod with only a CPU request does (``cpu_s``: the replica's CPU
    seconds so far, from its cgroup). servectl sizes such a replica by its request (load
    past it reads as overload), so that is its capacity here too."""
    for _ in range(3):
        call()
    took = []
    used = cpu_s() if cpu_s is not None else 0.0
    for _ in range(samples):
        began = time.perf_counter()
        call()
        took.append(time.perf_counter() - began)
    if cpu_s is not None:
        capacity = cores / ((cpu_s() - used) / samples)
    else:  # under a CPU limit, a request alone (saturating would scale the service out)
        capacity = 1.0 / statistics.median(took)
    factor = min(1.0, BUSY * capacity / base_rps)
    return Pace(service_ms=statistics.median(took) * 1000.0, capacity_rps=capacity, factor=factor)
