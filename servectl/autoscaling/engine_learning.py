"""Step 1 of servectl's engine: learn the load from a snapshot and the persisted state.

``Learner.learn`` turns one snapshot into the ``signals.Demand`` every proposal sizes
for, and the :class:`~servectl.autoscaling.engine_state.EngineState` with what the tick
taught (docs/autoscaling.md has the formulas):

- the request-rate history and its trend (both windows must rise);
- the mean service time (CPU seconds per request, EWMA, unsaturated ticks only);
- the latency target's wait budget (Erlang C shape, scale learnt by feedback, never
  from transients);
- while overloaded, the arrival rate from the queue's growth;
- the forecaster's history (one bucket mean per ``bucket_s``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from servectl.autoscaling import config, forecast, queueing, signals, windows
from servectl.autoscaling.engine_state import EngineState, Pair
from servectl.autoscaling.snapshot import Snapshot

#: Half-life of the learnt mean service time.
SERVICE_HALF_LIFE_S = 30.0
#: The latency signal aims its percentile at this share of the target (noise margin).
LATENCY_AIM = 0.8
#: Wait-budget feedback: over aim, the budget shrinks by aim/observed every this many
#: seconds; comfortably under (below 0.9 x aim), it grows by the room left under that
#: line every BUDGET_LEARN_S (at least BUDGET_INCREASE_PER_S of the target per second),
#: but only while the model's wait at the running count is at least BUDGET_EVIDENCE of
#: the budget: a low latency at a low modelled wait says nothing about a larger budget.
BUDGET_DECREASE_S = 20.0
BUDGET_INCREASE_PER_S = 0.002
BUDGET_LEARN_S = 30.0
BUDGET_EVIDENCE = 0.3
#: The budget stays within [0.05, BUDGET_MAX] x the target.
BUDGET_MAX = 3.5
#: Seconds of steady service before observed latency teaches anything again.
SETTLE_S = 45.0
#: More queued requests than this per ready thread means overloaded, while the load is
#: above NEAR_CAPACITY of the ready cores.
QUEUED_PER_THREAD = 4.0
NEAR_CAPACITY = 0.5
#: Windows for the load trend: both must rise for a trend to count (noise rejection).
TREND_SHORT_S = 30.0
TREND_LONG_S = 60.0
#: CPU usage above this share of the ready capacity means saturated replicas.
SATURATED = 0.9
#: Fewest requests in the latency window for an observed percentile to teach anything.
MIN_LATENCY_SAMPLES = 200.0


def _positive(value: float | None) -> float | None:
    """A learnt estimate that divides: finite and > 0, else unknown."""
    if value is None or not (math.isfinite(value) and value > 0):
        return None
    return value


@dataclass(frozen=True)
class Learnt:
    """What one tick taught: the next state's fields of the same names."""

    last_time: float
    rates: tuple[Pair, ...]
    service_s: float | None
    wait_budget_s: float | None
    inflight: Pair | None
    unsteady_at: float | None
    forecast: object


class Learner:
    """What the engine learns each tick (a pure function of snapshot and state, with
    memos of what it returned itself)."""

    def __init__(self, cfg: config.AutoscalingConfig):
        self.config = cfg
        self._latency_target = next(
            (t for t in cfg.signals if t.type is config.SignalType.LATENCY), None
        )
        # The forecast history as stored in the state is plain JSON (its bucket means a
        # list), so a checkpoint round-trips to an equal state. Validating a loaded list
        # costs ~0.2 ms; these memos (by identity, of what this learner itself returned)
        # skip it tick to tick. A pure function's cache: same input, same output.
        self._history_memo: tuple[object, forecast.History] | None = None
        self._means_memo: tuple[object, list[float | None]] | None = None

    @property
    def pooled(self) -> bool:
        """Least request in front: the replicas' queues act as one (``queueing``)."""
        return self.config.routing is config.Routing.LEAST_REQUEST

    def learn(
        self, snap: Snapshot, state: EngineState, bursting: bool = False
    ) -> tuple[signals.Demand, Learnt]:
        """The load this snapshot shows (``bursting``: no trend projection; burst memory
        meets the bursts instead), and what the tick taught."""
        cfg = self.config
        now = snap.time
        sig = snap.signals
        # Never negative: a replayed or restored state may come from a later time.
        dt = cfg.period_s if state.last_time is None else max(0.0, now - state.last_time)
        rates: list[windows.Sample] = list(state.rates)
        if sig.rps is not None:
            rates.append((now, sig.rps))
        rates = windows.prune(rates, now, TREND_LONG_S)

        request_cores = next(
            (p.cpu_request_cores for p in snap.pods if p.cpu_request_cores > 0),
            float(cfg.threads_per_replica),
        )
        service_s = state.service_s
        usage = (
            signals.usage_cores(sig, snap.replicas.ready, request_cores)
            if sig.cpu_usage_cores is not None or snap.replicas.ready > 0
            else None
        )
        capacity = snap.replicas.ready * request_cores
        saturated = usage is not None and usage >= SATURATED * capacity
        if usage is not None and sig.rps is not None and sig.rps > 1.0 and not saturated:
            # Saturated replicas cap CPU at capacity while requests keep arriving: usage per
            # request would then under-state the cost, so only learn from unsaturated ticks.
            service_s = windows.ewma(service_s, usage / sig.rps, dt, SERVICE_HALF_LIFE_S)
        elif service_s is None and sig.concurrency is not None and sig.rps and sig.rps > 1.0:
            # Little's law (includes queueing: an over-estimate, replaced once CPU shows up).
            service_s = sig.concurrency / sig.rps
        # Service time divides capacities: zero CPU per request (a broken metric) or an
        # overflow of extreme signals teaches nothing.
        service_s = _positive(service_s)

        budget_s = state.wait_budget_s
        unsteady_at = state.unsteady_at
        target = self._latency_target
        if target is not None and service_s is not None:
            budget_s, unsteady_at = self._learn_budget(
                snap, state, target, service_s, budget_s, dt, saturated
            )
            budget_s = _positive(budget_s)

        rate = sig.rps
        overloaded_rate = self._overload_rate(
            snap, state.inflight, request_cores, service_s, saturated
        )
        if overloaded_rate is not None and (rate is None or overloaded_rate > rate):
            rate = overloaded_rate
        projected = rate
        if rate is not None:
            short = windows.slope(rates, now, TREND_SHORT_S)
            long = windows.slope(rates, now, TREND_LONG_S)
            # While bursting a rise is a burst's, over before capacity ordered for its
            # trend lands: standing capacity for the recent peak meets bursts instead.
            if not bursting and short is not None and long is not None and short > 0 < long:
                projected = rate + min(short, long) * (cfg.cold_start_s + cfg.period_s)
                if math.isnan(projected):  # inf - inf: extreme rates overflow
                    projected = rate

        demand = signals.Demand(
            rate=rate,
            projected_rate=projected,
            service_s=service_s,
            wait_budget_s=budget_s,
            request_cores=request_cores,
            threads=cfg.threads_per_replica,
            pooled=self.pooled,
        )
        stored_forecast = state.forecast
        if cfg.forecast is not None:
            history = self.load_history(state.forecast, cfg.forecast)
            if sig.rps is not None:
                history = forecast.observe(history, cfg.forecast, now, sig.rps, dt)
            stored_forecast = self._store_history(history)
        learnt = Learnt(
            last_time=now,
            rates=tuple(rates),
            service_s=service_s,
            wait_budget_s=budget_s,
            inflight=None if sig.concurrency is None else (now, sig.concurrency),
            unsteady_at=unsteady_at,
            forecast=stored_forecast,
        )
        return demand, learnt

    def load_history(self, raw: object, fcfg: forecast.ForecastConfig) -> forecast.History:
        memo = self._history_memo
        if memo is not None and raw is memo[0]:
            return memo[1]
        return forecast.from_state(raw, fcfg)

    def _store_history(self, history: forecast.History) -> dict[str, Any]:
        """The history as JSON-shaped state (a list of means, shared while unchanged)."""
        means = history["means"]
        memo = self._means_memo
        if memo is not None and memo[0] is means:
            as_list = memo[1]
        else:
            as_list = list(means)
            self._means_memo = (means, as_list)
        doc: dict[str, Any] = {**history, "means": as_list}
        self._history_memo = (doc, history)
        return doc

    def _overload_rate(
        self,
        snap: Snapshot,
        previous: Pair | None,
        request_cores: float,
        service_s: float | None,
        saturated: bool,
    ) -> float | None:
        """Arrival rate of a saturated service: what it completes plus how fast its queue grows.

        A rate window (10 s) trails a sudden step by seconds, while every second of
        delay costs a second of queue; the queue's growth shows up in the next scrape.
        """
        inflight = snap.signals.concurrency
        if service_s is None or inflight is None or previous is None:
            return None
        capacity = snap.replicas.ready * request_cores
        usage = signals.usage_cores(snap.signals, snap.replicas.ready, request_cores)
        if usage is None:
            return None
        in_service = min((snap.signals.rps or 0.0) * service_s, capacity)
        queueing_up = inflight - in_service > QUEUED_PER_THREAD * max(capacity, 1.0)
        near_capacity = usage >= NEAR_CAPACITY * capacity
        then, before = previous
        if not (saturated or (queueing_up and near_capacity)) or snap.time <= then:
            return None
        # What the replicas complete is what their CPU shows (a queue stuck on a few
        # replicas leaves the rest idle), plus how fast the queue grows.
        completing = usage / service_s
        return completing + max(0.0, (inflight - before) / (snap.time - then))

    def _model_wait(self, rate: float, replicas: int, service_s: float, q: float) -> float:
        """The queueing model's ``q`` wait at ``rate`` over ``replicas``, for the routing."""
        return queueing.replica_wait_quantile_s(
            rate,
            replicas,
            service_s,
            self.config.threads_per_replica,
            q,
            pooled=self.pooled,
        )

    def _budget_prior(
        self,
        snap: Snapshot,
        target: config.SignalTarget,
        service_s: float,
        observed_ms: float | None,
    ) -> float:
        """The first wait budget: calibrated on the first observation if there is one.

        With an observed percentile ``L`` at the current load, whose modelled wait is
        ``W``, the service may take ``aim - L`` more queueing: budget ``W + aim - L``.
        Without one: the target minus an exponential service time's quantile.
        """
        target_s = target.target / 1000.0
        q = target.percentile / 100.0
        rps = snap.signals.rps
        if observed_ms is not None and rps and snap.replicas.ready > 0:
            wait = self._model_wait(rps, snap.replicas.ready, service_s, q)
            if math.isfinite(wait):
                calibrated = wait + LATENCY_AIM * target_s - observed_ms / 1000.0
                return min(max(calibrated, 0.1 * target_s), BUDGET_MAX * target_s)
        return max(target_s - service_s * -math.log(1.0 - q), 0.1 * target_s)

    def _learn_budget(
        self,
        snap: Snapshot,
        state: EngineState,
        target: config.SignalTarget,
        service_s: float,
        budget_s: float | None,
        dt: float,
        saturated: bool,
    ) -> tuple[float, float | None]:
        """Learn the queueing-wait budget that keeps the observed percentile on aim; and
        the last time the service was unsteady (``unsteady_at``).

        Erlang C gives the shape (how the wait grows with load per replica, and how
        threads and replicas pool); real services differ from M/M/c in scale (service
        times vary less than exponential ones, round-robin arrivals are smoother than
        Poisson, the service tail adds to the wait). So the budget handed to Erlang C is
        learnt by feedback: cut multiplicatively while the observed percentile is above
        ``LATENCY_AIM`` x target; raised in proportion to the room left under the aim while
        it sits comfortably below and the model's wait at the running count is a real
        share of the budget (otherwise the low latency only shows spare capacity, which
        says nothing about a larger budget).
        """
        sig = snap.signals
        target_s = target.target / 1000.0
        q = target.percentile / 100.0
        observed_ms = sig.latency(target.percentile)
        if budget_s is None:
            budget_s = self._budget_prior(snap, target, service_s, observed_ms)
        enough = sig.rps is not None and sig.rps * 30.0 >= MIN_LATENCY_SAMPLES
        # Only a steady service teaches: while replicas start, CPU is saturated or a panic
        # drains a backlog, the observed latency is a transient the budget must not learn.
        steady = (
            not saturated
            and snap.replicas.ready == snap.replicas.current
            and snap.time >= state.panic_until
        )
        unsteady_at = state.unsteady_at if steady else snap.time
        # The latency window still holds a transient for a while after it ends.
        settled = unsteady_at is None or snap.time - unsteady_at >= SETTLE_S
        if observed_ms is None or not enough or not settled or snap.replicas.ready == 0:
            return budget_s, unsteady_at
        assert sig.rps is not None
        aim_s = LATENCY_AIM * target_s
        observed_s = min(observed_ms / 1000.0, 2.0 * aim_s)
        if observed_s > aim_s:
            budget_s *= (aim_s / observed_s) ** (dt / BUDGET_DECREASE_S)
        elif observed_s < 0.9 * aim_s:
            wait = self._model_wait(sig.rps, snap.replicas.ready, service_s, q)
            if wait >= BUDGET_EVIDENCE * budget_s:
                room = (0.9 * aim_s - observed_s) / BUDGET_LEARN_S
                budget_s += max(BUDGET_INCREASE_PER_S * target_s, room) * dt
        return min(max(budget_s, 0.05 * target_s), BUDGET_MAX * target_s), unsteady_at
