"""The oracle: perfect foresight of load and cold start, the floor for replica-seconds.

``needed(t)`` is the fewest ready replicas that keep the p99 latency within the SLO at
the trace's rate for second ``t``. A replica that must be ready at ``s`` has to exist
from ``s - cold_start`` on, and it is billed from creation, so whatever a policy does it
must hold at time ``t`` at least every replica needed at any ``s`` in
``[t, t + cold_start]``:

    provisioned(t) = max(needed(s) for s in [t, t + ceil(cold_start)])

The oracle holds exactly that (plus ``period_s - 1`` seconds of look-ahead when it ticks
less often than every second), so no policy that keeps enough capacity for the SLO at
every second can spend fewer replica-seconds. The two-point form
``max(needed(t), needed(t + cold_start))`` would miss a peak strictly inside the window
(a burst shorter than the cold start): it releases replicas it needs again before new
ones could be ready.

Two ways to size ``needed`` (``Sizing``):

* ``SIMULATED`` (default): measured on the simulator's own queue: the highest rate per
  replica at which one replica, fed the way the router feeds it (every n-th request of a
  Poisson stream under round robin, a Poisson stream under random routing), keeps its
  steady-state latency p99 (wait + service) within the SLO. The floor of *this*
  simulator.
* ``ERLANG_C``: ``queueing.replicas_for_latency`` with the wait budget ``slo - p99 of
  one service time``: the M/M/c sizing rule of the autoscaling core. It assumes Poisson
  arrivals at every replica and exponential service and adds two p99s, so under round
  robin it over-provisions (~14 replicas at 800 rps where 9 meet the SLO) and a fixed
  policy can beat it; see docs/simulator.md.
"""

from __future__ import annotations

import enum
import functools
import math

import numpy as np
import numpy.typing as npt

from servectl.autoscaling import decision, policy, queueing, snapshot
from servectl.sim import model, traces

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

CALIBRATION_REQUESTS = 100_000
"""Requests per calibration run (the first fifth is warm-up)."""
_CALIBRATION_STEPS = 14  # bisection steps: capacity / 2**14 ~ 0.006 rps


class Sizing(enum.StrEnum):
    SIMULATED = "simulated"
    ERLANG_C = "erlang_c"


def _latency_quantile_at(
    unit_arrivals: FloatArray,
    service_s: FloatArray,
    work_before: FloatArray,
    rate: float,
    rank: int,
    warm_up: int,
) -> float:
    # Lindley in closed form over the whole run, from an empty queue.
    offered = work_before - unit_arrivals / rate
    wait = offered - np.minimum(np.minimum.accumulate(offered), 0.0)
    latency = (wait + service_s)[warm_up:]
    return float(np.partition(latency, rank)[rank])


@functools.lru_cache(maxsize=256)
def replica_rate_limit(
    service: model.ServiceModel,
    routing: model.Routing,
    replicas: int,
    quantile: float = 0.99,
    seed: int = 0,
) -> float:
    """The highest arrival rate per replica at which ``replicas`` replicas keep the
    steady-state latency ``quantile`` within the SLO (0 if even an idle replica can't).

    Deterministic (fixed seed, common random numbers across rates, so the measured
    quantile is monotone in the rate and bisection is exact for these draws).
    """
    shape = replicas if routing is model.Routing.ROUND_ROBIN else 1
    count = CALIBRATION_REQUESTS
    gaps_rng = np.random.default_rng([seed, 0x0AC1E, shape])
    # Round robin hands each replica every n-th request: Erlang-n gaps (mean 1 here).
    gaps = gaps_rng.gamma(shape, 1.0 / shape, size=count)
    service_s = service.sample_service_s(np.random.default_rng([seed, 0x5E871CE]), count)
    work_before = np.concatenate(([0.0], np.cumsum(service_s / service.threads_per_replica)[:-1]))
    unit_arrivals = np.cumsum(gaps)
    warm_up = count // 5
    rank = max(math.ceil(quantile * (count - warm_up)) - 1, 0)
    slo_s = service.slo_ms / 1000.0
    low, high = 0.0, service.capacity_rps
    for _ in range(_CALIBRATION_STEPS):
        middle = (low + high) / 2.0
        if (
            _latency_quantile_at(unit_arrivals, service_s, work_before, middle, rank, warm_up)
            <= slo_s
        ):
            low = middle
        else:
            high = middle
    return low


def _needed_simulated(
    rps: FloatArray,
    service: model.ServiceModel,
    routing: model.Routing,
    max_replicas: int,
    quantile: float,
) -> IntArray:
    peak = float(rps.max(initial=0.0))
    supported: list[float] = []  # supported[n - 1]: the most load n replicas carry
    for n in range(1, max_replicas + 1):
        supported.append(n * replica_rate_limit(service, routing, n, quantile))
        if supported[-1] >= peak:
            break
    limits = np.maximum.accumulate(np.array(supported))
    needed = np.searchsorted(limits, rps, side="left") + 1
    result: IntArray = np.where(rps > 0, np.minimum(needed, max_replicas), 0).astype(np.int64)
    return result


def _needed_erlang_c(
    rps: FloatArray, service: model.ServiceModel, max_replicas: int, quantile: float
) -> IntArray:
    budget_s = service.slo_ms / 1000.0 - service.service_quantile_s(quantile)
    rates, inverse = np.unique(rps, return_inverse=True)
    per_rate = np.array(
        [
            0
            if rate <= 0
            else queueing.replicas_for_latency(
                rate=float(rate),
                service_s=service.service_s,
                threads=service.threads_per_replica,
                quantile=quantile,
                wait_budget_s=budget_s,
                max_replicas=max_replicas,
            )
            for rate in rates.tolist()
        ],
        dtype=np.int64,
    )
    result: IntArray = per_rate[inverse.reshape(-1)]
    return result


def needed_replicas(
    rps: FloatArray,
    service: model.ServiceModel,
    max_replicas: int,
    quantile: float = 0.99,
    *,
    sizing: Sizing = Sizing.SIMULATED,
    routing: model.Routing = model.Routing.ROUND_ROBIN,
) -> IntArray:
    """Per second: the fewest ready replicas meeting the SLO at that second's mean rate."""
    rates = np.asarray(rps, dtype=np.float64)
    if sizing is Sizing.ERLANG_C:
        return _needed_erlang_c(rates, service, max_replicas, quantile)
    return _needed_simulated(rates, service, routing, max_replicas, quantile)


def _sliding_max(values: IntArray, ahead: int) -> IntArray:
    """``out[t] = max(values[t : t + ahead + 1])`` (the window shrinks at the end)."""
    if ahead <= 0:
        return values.copy()
    padded = np.concatenate((values, np.full(ahead, values.min(initial=0))))
    windows = np.lib.stride_tricks.sliding_window_view(padded, ahead + 1)
    out: IntArray = windows.max(axis=1)[: values.size]
    return out


class OraclePolicy:
    """Replays ``provisioned(t)`` computed from the whole trace (Reason.ORACLE)."""

    def __init__(
        self,
        trace: traces.Trace,
        service: model.ServiceModel,
        *,
        max_replicas: int = 100,
        period_s: float = 1.0,
        quantile: float = 0.99,
        sizing: Sizing = Sizing.SIMULATED,
        routing: model.Routing = model.Routing.ROUND_ROBIN,
    ) -> None:
        if not period_s >= 1:
            raise ValueError(f"period_s must be >= 1 (the simulator's resolution), got {period_s}")
        self._period_s = float(period_s)
        self.sizing = sizing
        self.needed = needed_replicas(
            trace.rps, service, max_replicas, quantile, sizing=sizing, routing=routing
        )
        ahead = math.ceil(service.cold_start_s) + math.ceil(period_s) - 1
        self.provisioned = _sliding_max(self.needed, ahead)

    @property
    def name(self) -> str:
        return "oracle"

    @property
    def period_s(self) -> float:
        return self._period_s

    def initial_state(self) -> policy.State:
        return {}

    def decide(
        self, snap: snapshot.Snapshot, state: policy.State
    ) -> tuple[decision.Decision, policy.State]:
        second = min(max(math.floor(snap.time), 0), self.provisioned.size - 1)
        replicas = int(self.provisioned[second])
        return (
            decision.Decision(
                replicas=replicas,
                reason=decision.Reason.ORACLE,
                signal=f"foresight/{self.sizing.value}",
                detail=f"needed now {int(self.needed[second])}, "
                f"max over the cold-start window {replicas}",
            ),
            state,
        )
