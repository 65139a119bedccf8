"""What a simulation of one service reports, and the measures computed from timelines.

:class:`SimResult` is the single-revision view (``servectl simulate``, ``servectl bench``)
of a :class:`~servectl.sim.world.RolloutSimResult`; the measures (recovery after a load
step, direction reversals, the largest abrupt rise of a trace) are pure functions of the
per-second timelines, shared by both.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from servectl.sim import model, traces

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

WARM_AGE_S = 3600.0
"""Initial replicas were created this long before t = 0 (warm, past any init period)."""
PARKED_COST = 0.1
"""What a parked standby replica-second costs, as a share of a serving one: its CPU quota
is 20m of a 500m replica (4 %) and its memory stays (the model loaded); 10 % counts both.
A standby replica still loading costs a whole one (it burns CPU loading the model)."""
INITIAL_UTILIZATION = 0.7
RECOVERY_HOLD_S = 30
"""Recovery ends when the per-second p99 has stayed under the SLO this long."""


@dataclass(frozen=True)
class DecisionRecord:
    """One policy tick: ``replicas`` as applied (clamped), ``requested`` as returned."""

    time: float
    replicas: int
    requested: int
    reason: str
    signal: str | None


@dataclass(frozen=True, eq=False)
class SimResult:
    """Per-second timelines (index = second) and totals of one run."""

    trace: str
    policy: str
    seed: int
    service: model.ServiceModel
    t: IntArray
    offered_rps: FloatArray
    arrivals: IntArray
    ready: IntArray  # ready replicas taking requests
    desired: IntArray  # replica count last applied
    replicas: IntArray  # existing (starting + ready) replicas, as billed
    p99_ms: FloatArray  # of requests arriving that second (inf: some never served)
    slo_met: FloatArray  # fraction of that second's requests meeting the SLO (NaN: none)
    mean_ms: FloatArray  # mean latency of that second's served requests (NaN: none)
    cpu_cores: FloatArray  # mean cores busy
    decisions: tuple[DecisionRecord, ...]
    requests: int
    met_slo: int
    failed: int
    replica_seconds: float
    scale_actions: int
    direction_reversals: int
    recovery_s: float | None  # None: no step/spike in the trace; inf: never recovered
    change_at_s: int | None = None
    min_replicas: int = 1
    max_replicas: int = 100
    standby_seconds: float = 0.0  # standby replicas (loading + parked), apart from the above
    parked_seconds: float = 0.0  # of those, parked

    @property
    def duration_s(self) -> int:
        return int(self.t.size)

    @property
    def cost_replica_seconds(self) -> float:
        """Serving replica-seconds plus standby: loading ones whole, parked ones at
        :data:`PARKED_COST`."""
        return standby_cost(self.replica_seconds, self.standby_seconds, self.parked_seconds)

    @property
    def slo_attainment(self) -> float:
        return self.met_slo / self.requests if self.requests else 1.0

    @property
    def reversals_per_10min(self) -> float:
        return self.direction_reversals * 600.0 / self.duration_s if self.duration_s else 0.0

    def to_record(self) -> dict[str, Any]:
        """Totals and settings as JSON-compatible values (no timelines)."""
        recovery: float | None = self.recovery_s
        status = "none" if recovery is None else "recovered"
        if recovery is not None and math.isinf(recovery):
            recovery, status = None, "never"
        return {
            "trace": self.trace,
            "policy": self.policy,
            "seed": self.seed,
            "duration_s": self.duration_s,
            "requests": self.requests,
            "met_slo": self.met_slo,
            "failed": self.failed,
            "slo_attainment": self.slo_attainment,
            "replica_seconds": self.replica_seconds,
            "standby_seconds": self.standby_seconds,
            "parked_seconds": self.parked_seconds,
            "cost_replica_seconds": self.cost_replica_seconds,
            "scale_actions": self.scale_actions,
            "direction_reversals": self.direction_reversals,
            "reversals_per_10min": self.reversals_per_10min,
            "recovery_s": recovery,
            "recovery": status,
            "change_at_s": self.change_at_s,
            "min_replicas": self.min_replicas,
            "max_replicas": self.max_replicas,
            "service": {
                "service_time_ms": self.service.service_time_ms,
                "service_cv": self.service.service_cv,
                "threads_per_replica": self.service.threads_per_replica,
                "cold_start_s": self.service.cold_start_s,
                "timeout_s": self.service.timeout_s,
                "slo_ms": self.service.slo_ms,
                "distribution": self.service.distribution.value,
            },
        }


def initial_replicas_for(
    trace: traces.Trace, service: model.ServiceModel, min_replicas: int, max_replicas: int
) -> int:
    """Enough replicas for the first minute's mean load at 70 % utilization."""
    first_minute = float(trace.rps[:60].mean())
    needed = math.ceil(first_minute * service.service_s / (service.threads_per_replica * 0.7))
    return min(max(needed, min_replicas), max_replicas)


def nearest_rank(values: FloatArray, quantile: float) -> float:
    if values.size == 0:
        return math.nan
    k = max(math.ceil(quantile * values.size) - 1, 0)
    return float(np.partition(values, k)[k])


def reversals(directions: list[int]) -> int:
    """Changes of direction among the scale actions (holds are not actions)."""
    return sum(1 for a, b in itertools.pairwise(directions) if a != b)


def largest_rise(offered: FloatArray, window_s: int = 10, min_rise: float = 0.5) -> int | None:
    """The second where load rises most abruptly: the largest increase of the next
    ``window_s`` mean over the previous one, if it is at least ``min_rise`` (50 %) of the
    previous mean (a step or spike, not a ramp or a day)."""
    n = offered.size
    if n < 2 * window_s + 1:
        return None
    cumulative = np.concatenate(([0.0], np.cumsum(offered)))
    at = np.arange(window_s, n - window_s + 1)
    before = (cumulative[at] - cumulative[at - window_s]) / window_s
    after = (cumulative[at + window_s] - cumulative[at]) / window_s
    rise = after - before
    best = int(np.argmax(rise))
    if rise[best] <= 0 or rise[best] < min_rise * max(before[best], 1e-9):
        return None
    return int(at[best])


def recovery_s(p99_ms: FloatArray, slo_ms: float, change_at: int) -> float:
    """Seconds from ``change_at`` until the per-second p99 stays <= the SLO for
    ``RECOVERY_HOLD_S`` seconds (0 if it never left); inf if that never happens."""
    after = p99_ms[change_at:]
    bad = (after > slo_ms).astype(np.int64)  # NaN (no requests) counts as fine
    if after.size < RECOVERY_HOLD_S:
        return math.inf
    bad_in_window = np.convolve(bad, np.ones(RECOVERY_HOLD_S, dtype=np.int64), mode="valid")
    clean = np.flatnonzero(bad_in_window == 0)
    return float(clean[0]) if clean.size else math.inf


def standby_cost(replica_seconds: float, standby_seconds: float, parked_seconds: float) -> float:
    """Serving replica-seconds plus the standby pool's: loading whole, parked at
    :data:`PARKED_COST` of a serving replica."""
    loading = standby_seconds - parked_seconds
    return replica_seconds + loading + PARKED_COST * parked_seconds
