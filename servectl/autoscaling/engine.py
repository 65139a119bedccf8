"""servectl's default policy: signal proposals -> max -> panic -> custom policy -> rails.

One ``decide`` call per tick, a pure function of the snapshot and the persisted state
(docs/autoscaling.md has the formulas and a worked example):

1. Learn the load: request-rate history (trend), mean service time (CPU seconds per
   request, EWMA, unsaturated ticks only), the latency target's wait budget (Erlang C
   shape, scale learnt by feedback, never from transients), and while overloaded the
   arrival rate from the queue's growth.
2. One proposal per configured signal (``signals``), plus ``backlog`` while overloaded
   (load + draining the queue new capacity will find); the largest wins and is recorded.
3. Tolerance: a set point (a cpu, gpu, rps or concurrency target) holds within
   ``tolerance``; the latency signal sizes to an edge: up once the ask is
   ``up_tolerance`` above the running count, down only to a count that leaves
   ``tolerance`` headroom over the ask (a one-sided band each way).
4. Missing metrics never shrink anything (DESIGN §4 rule 8).
5. Panic: overloaded, a 2x burst or nothing ready -> straight to the proposal (no up rate
   limit) and no scale-down for ``panic_hold_s``, extended while requests stay queued.
6. Burst memory: repeated panics (for a load that did not hold for three cold starts:
   a step is no burst), surges (the rate up 1.5x within a cold start) or re-grows mean
   bursts shorter than a cold start: the trend projection is off (a burst's rise is
   over before capacity lands) and ``burst`` proposes standing capacity for the peak
   rate of the last 10 minutes. The ``forecast`` proposal (predictive
   pre-scaling) and ``burst`` only ever add to the reactive ask.
7. A custom CEL policy, if any, sees ``recommended``; its errors fall back to the
   recommendation with reason POLICY_ERROR.
8. The rails (``behavior``): stabilization windows, rate limits, min/max. A temporary
   drain overshoot or panic hold is kept out of the scale-down memory.
9. ``mode: recommend`` records the decision and keeps the current count.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from servectl.autoscaling import (
    behavior,
    cel_policy,
    config,
    forecast,
    queueing,
    signals,
    windows,
)
from servectl.autoscaling.decision import Decision, Reason
from servectl.autoscaling.policy import State
from servectl.autoscaling.snapshot import Snapshot

#: Signals older than this are stale: treated as missing.
STALE_AFTER_S = 60.0
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
#: While overloaded, size to drain the queue expected when new capacity lands within this.
DRAIN_S = 2.0
#: More queued requests than this per ready thread means overloaded, while the load is
#: above NEAR_CAPACITY of the ready cores.
QUEUED_PER_THREAD = 4.0
NEAR_CAPACITY = 0.5
#: Burst memory: this many panics, surges or re-grows (each kind counted alone) within
#: BURST_MEMORY_S mean bursts recur faster than capacity can follow.
BURST_PANICS = 2
BURST_MEMORY_S = 600.0
#: A panic counts towards burst memory unless the load it answered held for this many
#: cold starts (a step, not a burst: standing capacity for it would be for nothing once
#: the load steps down again).
BURST_LASTS_COLD_STARTS = 3.0
#: A surge: the rate above SURGE_FACTOR x its lowest over the last cold start (faster
#: than new capacity can follow); the next one counts only once the rate has come back
#: down to REARM_FACTOR x the level it surged from (a burst, not a step or a staged ramp).
SURGE_FACTOR = 1.5
REARM_FACTOR = 1.2
#: While bursting, standing capacity for the highest rate of the last PEAK_WINDOW_S
#: (the state keeps one maximum per PEAK_BUCKET_S).
PEAK_WINDOW_S = 600.0
PEAK_BUCKET_S = 10.0
#: While a rollout splits the traffic between revisions, replicas run at most this busy
#: (``_rollout_proposal``).
ROLLOUT_UTILIZATION = 0.75
#: Proposals that are set points (a target with room on both sides); the rest size to an
#: edge (``_tolerate``).
SET_POINTS = frozenset({"cpu", "gpu", "rps", "concurrency", "rollout"})
#: Windows for the load trend: both must rise for a trend to count (noise rejection).
TREND_SHORT_S = 30.0
TREND_LONG_S = 60.0
#: CPU usage above this share of the ready capacity means saturated replicas.
SATURATED = 0.9
#: Fewest requests in the latency window for an observed percentile to teach anything.
MIN_LATENCY_SAMPLES = 200.0
#: A proposal above this (or infinite: huge signals overflow a double) is this: it asks
#: for as many replicas as the rails allow either way, and stays printable.
MAX_PROPOSAL = 1e15
#: An overload is sized at most at the backlogged (ready) replicas plus this many times
#: the load's own need beside them: the first ticks of an overload see the arrival rate
#: through one scrape of queue growth and under-estimate it, and a cold start is too long
#: to order twice (docs/benchmarks.md: 1, 1.5, 2 and 3 compared).
DRAIN_HEADROOM = 2.0


def _usable(proposal: signals.Proposal | None) -> signals.Proposal | None:
    """A proposal the arithmetic below can use: NaN (inf - inf from extreme signals) is
    no proposal (a missing signal); anything else is clamped to [0, MAX_PROPOSAL]."""
    if proposal is None or math.isnan(proposal.replicas):
        return None
    if not 0.0 <= proposal.replicas <= MAX_PROPOSAL:
        clamped = min(max(proposal.replicas, 0.0), MAX_PROPOSAL)
        return dataclasses.replace(proposal, replicas=clamped)
    return proposal


def _load_peaks(raw: object, now: float) -> list[list[float]]:
    """The highest request rate per PEAK_BUCKET_S over the last PEAK_WINDOW_S, as kept
    in the state (malformed or expired entries dropped)."""
    peaks: list[list[float]] = []
    if isinstance(raw, list):
        for item in raw:
            try:
                t, v = float(item[0]), float(item[1])
            except (TypeError, ValueError, IndexError):
                continue
            if now - t < PEAK_WINDOW_S and math.isfinite(v) and t <= now:
                peaks.append([t, v])
    return peaks


def _with_peak(peaks: list[list[float]], now: float, rate: float | None) -> list[list[float]]:
    """``peaks`` with ``rate`` counted in the bucket of ``now`` (a new list)."""
    if rate is None or not math.isfinite(rate) or rate < 0:
        return list(peaks)
    bucket = math.floor(now / PEAK_BUCKET_S) * PEAK_BUCKET_S
    if peaks and peaks[-1][0] == bucket:
        return [*peaks[:-1], [bucket, max(peaks[-1][1], rate)]]
    return [*peaks, [bucket, rate]]


def _held(panic_t: float, peaks: list[list[float]], now: float, lasts_s: float) -> bool:
    """Whether the load a panic answered stayed: ``lasts_s`` have passed since it and the
    rate never fell below 1 / SURGE_FACTOR of its level then (the panic's 10 s bucket and
    the next). A rate that fell back sooner was a burst; until ``lasts_s`` have passed,
    or with no rate seen in between, the panic counts as one (burst memory errs on the
    side of capacity)."""
    start = math.floor(panic_t / PEAK_BUCKET_S) * PEAK_BUCKET_S
    level = max((v for t, v in peaks if start <= t <= start + PEAK_BUCKET_S), default=None)
    if level is None or now - panic_t < lasts_s:
        return False
    after = [v for t, v in peaks if start + PEAK_BUCKET_S < t <= panic_t + lasts_s]
    return bool(after) and min(after) >= level / SURGE_FACTOR


def _positive(value: float | None) -> float | None:
    """A learnt estimate that divides: finite and > 0, else unknown."""
    if value is None or not (math.isfinite(value) and value > 0):
        return None
    return value


@dataclass(frozen=True)
class CustomPolicy:
    """A compiled CEL policy with its parameters (inline or a ScalingPolicy document)."""

    name: str
    program: cel_policy.CompiledPolicy
    params: Mapping[str, float] = field(default_factory=dict)


class EnginePolicy:
    """The ``servectl`` policy. See the module docstring for the order of operations."""

    def __init__(self, cfg: config.AutoscalingConfig, custom: CustomPolicy | None = None):
        if cfg.min_replicas > cfg.max_replicas:
            raise ValueError(f"minReplicas ({cfg.min_replicas}) > maxReplicas ({cfg.max_replicas})")
        self.config = cfg
        self.custom = custom
        self._latency_target = next(
            (t for t in cfg.signals if t.type is config.SignalType.LATENCY), None
        )
        # The forecast history as stored in the state is plain JSON (its bucket means a
        # list), so a checkpoint round-trips to an equal state. Validating a loaded list
        # costs ~0.2 ms; these memos (by identity, of what this policy itself returned)
        # skip it tick to tick. A pure function's cache: same input, same output.
        self._history_memo: tuple[object, forecast.History] | None = None
        self._means_memo: tuple[object, list[float | None]] | None = None
        # A forecast depends on the closed buckets and on which buckets the horizon spans,
        # not on the tick within a bucket: one per bucket (150 ticks of 2 s at 5 minutes).
        self._forecast_memo: tuple[object, tuple[Any, ...], forecast.Forecast] | None = None

    @property
    def _pooled(self) -> bool:
        """Least request in front: the replicas' queues act as one (``queueing``)."""
        return self.config.routing is config.Routing.LEAST_REQUEST

    @property
    def name(self) -> str:
        return "servectl" if self.custom is None else f"servectl+{self.custom.name}"

    @property
    def period_s(self) -> float:
        return self.config.period_s

    def initial_state(self) -> State:
        return {}

    # ------------------------------------------------------------------ learning

    def _learn(
        self, snap: Snapshot, state: State, bursting: bool = False
    ) -> tuple[signals.Demand, State]:
        cfg = self.config
        now = snap.time
        sig = snap.signals
        last_time = state.get("last_time")
        # Never negative: a replayed or restored state may come from a later time.
        dt = max(0.0, now - last_time) if isinstance(last_time, int | float) else cfg.period_s
        rates: list[windows.Sample] = [(float(t), float(v)) for t, v in state.get("rates", [])]
        if sig.rps is not None:
            rates.append((now, sig.rps))
        rates = windows.prune(rates, now, TREND_LONG_S)

        request_cores = next(
            (p.cpu_request_cores for p in snap.pods if p.cpu_request_cores > 0),
            float(cfg.threads_per_replica),
        )
        service_s = state.get("service_s")
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

        budget_s = state.get("wait_budget_s")
        target = self._latency_target
        if target is not None and service_s is not None:
            budget_s = self._learn_budget(snap, state, target, service_s, budget_s, dt, saturated)
            budget_s = _positive(budget_s)

        rate = sig.rps
        overloaded_rate = self._overload_rate(snap, state, request_cores, service_s, saturated)
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
            pooled=self._pooled,
        )
        new_state: State = {
            **state,
            "inflight": None if sig.concurrency is None else [now, sig.concurrency],
            "last_time": now,
            "rates": [[t, v] for t, v in rates],
            "service_s": service_s,
            "wait_budget_s": budget_s,
        }
        if cfg.forecast is not None:
            history = self._load_history(state.get("forecast"), cfg.forecast)
            if sig.rps is not None:
                history = forecast.observe(history, cfg.forecast, now, sig.rps, dt)
            new_state["forecast"] = self._store_history(history)
        return demand, new_state

    def _load_history(self, raw: object, fcfg: forecast.ForecastConfig) -> forecast.History:
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

    def _forecast(
        self, history: forecast.History, fcfg: forecast.ForecastConfig, now: float, horizon: float
    ) -> forecast.Forecast:
        """``forecast.forecast``, computed once per (closed buckets, buckets spanned)."""
        bucket = history["bucket"]
        start = math.floor(now / fcfg.bucket_s)
        if bucket is not None:
            start = max(start, bucket)
        key = (bucket, start, math.floor((now + horizon) / fcfg.bucket_s) - start)
        memo = self._forecast_memo
        if memo is not None and memo[0] is history["means"] and memo[1] == key:
            return memo[2]
        seen = forecast.forecast(history, fcfg, now, horizon)
        self._forecast_memo = (history["means"], key, seen)
        return seen

    def _forecast_proposal(
        self, snap: Snapshot, demand: signals.Demand, state: State
    ) -> tuple[signals.Proposal | None, str | None]:
        """When the forecast expects more than the rate the signals already project: what
        they ask for at the high side of it (its estimate plus its recent error); and the
        forecaster's state in words (None when forecasting is off)."""
        cfg = self.config
        if cfg.forecast is None:
            return None, None
        horizon = cfg.cold_start_s + cfg.period_s
        stored = state.get("forecast")
        if stored is None:
            return None, "off: no request rate observed yet"
        history = self._load_history(stored, cfg.forecast)
        seen = self._forecast(history, cfg.forecast, snap.time, horizon)
        note = seen.reason
        expected = seen.rate_rps
        now_rate = demand.projected_rate
        if expected is None or now_rate is None or demand.rate is None:
            return None, note
        # Only a rise counts (a forecast of the rate the signals already see adds nothing);
        # its own recent error is its error bar: capacity is sized for the high side, as a
        # ramp a little steeper than the last one would need.
        error = seen.recent_error or 0.0
        window = horizon + cfg.forecast.timing_slack_buckets * cfg.forecast.bucket_s
        note = f"{expected:.0f} req/s expected within {window:.0f} s ({seen.reason})"
        if expected <= now_rate:
            return None, note
        high = expected * (1.0 + error)
        best = self._at_rate(snap, dataclasses.replace(demand, projected_rate=high))
        if best is None:
            return None, note
        return (
            signals.Proposal(
                "forecast",
                best.replicas,
                f"forecast: {note}; sized for {high:.0f} req/s (+ its recent error);"
                f" {best.signal} at that rate: {best.detail}",
            ),
            note,
        )

    def _at_rate(self, snap: Snapshot, demand: signals.Demand) -> signals.Proposal | None:
        """The largest proposal of the rate-driven signals at ``demand``'s rate (GPU duty
        cycle is not a function of the rate the engine models)."""
        best: signals.Proposal | None = None
        for target in self.config.signals:
            if target.type is config.SignalType.GPU:
                continue
            prop = _usable(signals.propose(target, snap, demand, self.config.max_replicas))
            if prop is not None and (best is None or prop.replicas > best.replicas):
                best = prop
        return best

    def _standing_proposal(
        self, snap: Snapshot, demand: signals.Demand, peaks: list[list[float]]
    ) -> signals.Proposal | None:
        """While bursting: what the signals ask for at the highest rate of the last
        PEAK_WINDOW_S. Bursts shorter than a cold start are over before capacity ordered
        for them is ready; only capacity already standing meets the next one."""
        if not peaks or demand.rate is None:
            return None
        peak = max(v for _, v in peaks)
        if peak <= (demand.projected_rate or 0.0):
            return None
        best = self._at_rate(snap, dataclasses.replace(demand, rate=peak, projected_rate=peak))
        if best is None:
            return None
        return signals.Proposal(
            "burst",
            best.replicas,
            f"burst memory: standing capacity for the peak {peak:.0f} req/s of the last "
            f"{PEAK_WINDOW_S:.0f} s; {best.signal} at that rate: {best.detail}",
        )

    def _rollout_proposal(self, snap: Snapshot, demand: signals.Demand) -> signals.Proposal | None:
        """While a rollout splits the traffic, at most ROLLOUT_UTILIZATION busy.

        The planner gives each revision its share of the replicas, so the canary runs on
        a small pool beside the stable's large one. At the same load per replica a small
        pool queues more (fewer replicas to spread bursts over), and the rollout's
        analysis would compare pool sizes instead of versions: run cooler until the
        traffic is one revision's again.
        """
        if not 0 < snap.rollout.canary_weight < 100:
            return None
        if demand.projected_rate is None or demand.service_s is None:
            return None
        cores = demand.projected_rate * demand.service_s
        replicas = cores / (demand.request_cores * ROLLOUT_UTILIZATION)
        return signals.Proposal(
            "rollout",
            replicas,
            f"rollout splits the traffic ({snap.rollout.canary_weight} % to the canary): "
            f"{cores:.1f} cores at most {ROLLOUT_UTILIZATION:.0%} busy = {replicas:.2f}",
        )

    def _overload_rate(
        self,
        snap: Snapshot,
        state: State,
        request_cores: float,
        service_s: float | None,
        saturated: bool,
    ) -> float | None:
        """Arrival rate of a saturated service: what it completes plus how fast its queue grows.

        A rate window (10 s) trails a sudden step by seconds, while every second of
        delay costs a second of queue; the queue's growth shows up in the next scrape.
        """
        previous = state.get("inflight")
        inflight = snap.signals.concurrency
        if service_s is None or inflight is None or not previous:
            return None
        capacity = snap.replicas.ready * request_cores
        usage = signals.usage_cores(snap.signals, snap.replicas.ready, request_cores)
        if usage is None:
            return None
        in_service = min((snap.signals.rps or 0.0) * service_s, capacity)
        queueing_up = inflight - in_service > QUEUED_PER_THREAD * max(capacity, 1.0)
        near_capacity = usage >= NEAR_CAPACITY * capacity
        then, before = float(previous[0]), float(previous[1])
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
            pooled=self._pooled,
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
        state: State,
        target: config.SignalTarget,
        service_s: float,
        budget_s: float | None,
        dt: float,
        saturated: bool,
    ) -> float:
        """Learn the queueing-wait budget that keeps the observed percentile on aim.

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
            and snap.time >= float(state.get("panic_until", -math.inf))
        )
        if not steady:
            state["unsteady_at"] = snap.time
        # The latency window still holds a transient for a while after it ends.
        settled = snap.time - float(state.get("unsteady_at", -math.inf)) >= SETTLE_S
        if observed_ms is None or not enough or not settled or snap.replicas.ready == 0:
            return budget_s
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
        return min(max(budget_s, 0.05 * target_s), BUDGET_MAX * target_s)

    # ------------------------------------------------------------------ deciding

    def decide(self, snap: Snapshot, state: State) -> tuple[Decision, State]:
        cfg = self.config
        now = snap.time
        current = snap.replicas.current
        ready = snap.replicas.ready
        if snap.signals.age_s > STALE_AFTER_S:
            stale = snap.signals.age_s
            snap = Snapshot(snap.time, snap.replicas, pods=snap.pods, rollout=snap.rollout)
            age = f"{stale:.0f} s old" if math.isfinite(stale) else "of unknown age"
            stale_note = f"signals are {age} (stale after {STALE_AFTER_S:.0f} s)"
        else:
            stale_note = ""
        state = dict(state)  # never mutate the caller's copy
        panics = [float(t) for t in state.get("panics", []) if now - float(t) < BURST_MEMORY_S]
        # A panic for a step the load then holds is no burst: only the others count.
        lasts_s = BURST_LASTS_COLD_STARTS * cfg.cold_start_s
        seen = _load_peaks(state.get("peaks"), now)
        burst_panics = [t for t in panics if not _held(t, seen, now, lasts_s)]
        regrets = [float(t) for t in state.get("regrets", []) if now - float(t) < BURST_MEMORY_S]
        surges = [float(t) for t in state.get("surges", []) if now - float(t) < BURST_MEMORY_S]
        bursting = max(len(burst_panics), len(surges), len(regrets)) >= BURST_PANICS
        before = [float(v) for t, v in state.get("rates", []) if now - float(t) <= cfg.cold_start_s]
        demand, state = self._learn(snap, state, bursting)
        if demand.rate is not None and before:
            lowest = max(min(before), 1.0)
            base = state.get("surge_base")
            if base is None and demand.rate > SURGE_FACTOR * lowest:
                surges.append(now)
                state["surge_base"] = lowest
            elif base is not None and demand.rate <= REARM_FACTOR * float(base):
                state.pop("surge_base")  # back down: the surge was a burst; re-armed
        state["surges"] = surges
        peaks = _with_peak(seen, now, demand.rate)
        state["peaks"] = peaks

        proposals: dict[str, signals.Proposal] = {}
        missing: list[str] = []
        for target in cfg.signals:
            prop = _usable(signals.propose(target, snap, demand, cfg.max_replicas))
            if prop is None:
                missing.append(signals.signal_name(target))
            else:
                proposals[prop.signal] = prop
        sustained = max((p.replicas for p in proposals.values()), default=None)
        backlog = _usable(self._backlog_proposal(snap, demand, state))
        if bursting and backlog is not None:
            # Bursts shorter than a cold start are over before a drain overshoot lands;
            # burst memory's standing capacity is what helps. Size on the load only.
            backlog = dataclasses.replace(
                backlog,
                replicas=min(backlog.replicas, sustained or 0.0),
                detail=f"{backlog.detail}; bursting: no drain overshoot",
            )
        if backlog is not None and proposals:
            proposals[backlog.signal] = backlog
        # The reactive ask (signals and backlog) decides panic; the forecast only ever adds
        # capacity on top of it, inside the rails (never a panic of its own).
        reactive = max((p.replicas for p in proposals.values()), default=None)
        ahead, forecast_note = self._forecast_proposal(snap, demand, state)
        if ahead is not None and proposals and reactive is not None and ahead.replicas > reactive:
            proposals[ahead.signal] = ahead
        # Standing capacity and the rollout floor, like the forecast, only ever add to
        # the reactive ask.
        for extra in (
            self._standing_proposal(snap, demand, peaks) if bursting else None,
            self._rollout_proposal(snap, demand),
        ):
            if (
                extra is not None
                and proposals
                and extra.replicas > max(p.replicas for p in proposals.values())
            ):
                proposals[extra.signal] = extra
        raw = {name: p.replicas for name, p in proposals.items()}
        panic_until = float(state.get("panic_until", -math.inf))

        if not proposals:
            detail = stale_note or f"no usable signal ({', '.join(missing)} missing)"
            desired, reason, winner = current, Reason.METRICS_MISSING, None
            detail = f"{detail}: holding {current}"
        else:
            best = max(proposals.values(), key=lambda p: p.replicas)
            winner = best.signal
            wanted = max(math.ceil(best.replicas - 1e-9), 0)
            desired, reason, detail = self._tolerate(best, wanted, current)
            overloaded = backlog is not None
            asked = max(math.ceil((reactive or 0.0) - 1e-9), 0)
            surge = ready > 0 and asked >= cfg.panic_threshold * ready
            if asked > current and (overloaded or surge or ready == 0):
                if now >= panic_until:
                    panics.append(now)
                panic_until = now + cfg.panic_hold_s
                desired, reason = wanted, Reason.PANIC
                detail = f"panic ({'overloaded' if overloaded else 'burst'}): {best.detail}"
            if missing and desired < current:
                desired, reason = current, Reason.METRICS_MISSING
                detail = f"{', '.join(missing)} missing: never shrink on partial metrics"

        if now < panic_until:
            # While requests are still queued, extra replicas keep new requests away
            # from the backlogged ones (round robin gives each 1/n): hold the panic.
            inflight = snap.signals.concurrency
            if inflight is not None and demand.rate is not None and demand.service_s:
                queued = inflight - demand.rate * demand.service_s
                if queued > QUEUED_PER_THREAD * max(ready * demand.request_cores, 1.0):
                    panic_until = max(panic_until, now + 2 * cfg.period_s)
        in_panic = now < panic_until  # the hold above only ever extends a panic
        recommended = desired
        new_state = state
        if self.custom is not None:
            desired, reason, detail, new_state = self._run_custom(
                snap, recommended, reason, detail, new_state
            )
        held_by_panic = in_panic and desired < current
        if held_by_panic:
            desired, reason = current, Reason.PANIC
            detail = f"in panic until t={panic_until:.0f}: no scale-down ({detail})"

        rails = cfg.behavior
        norm = behavior.normalize(
            desired,
            current,
            now,
            cfg.min_replicas,
            cfg.max_replicas,
            rails,
            behavior.BehaviorState.from_dict(new_state.get("behavior")),
            # A drain overshoot and a panic hold are temporary: remember the load's own
            # need instead, so the scale-down window does not keep them alive.
            remember=None
            if sustained is None or (winner != "backlog" and not held_by_panic)
            else min(desired, max(math.ceil(sustained - 1e-9), cfg.min_replicas)),
        )
        if bursting and norm.reason is Reason.STABILIZING:
            detail = (
                f"{detail}; burst memory ({len(burst_panics)} panics, {len(surges)} surges, "
                f"{len(regrets)} re-grows in {BURST_MEMORY_S:.0f} s)"
            )
        result = norm.replicas
        if in_panic and desired > result and result >= current:
            # Panic bypasses the scale-up rate limit (not max); record the real change.
            result = min(desired, cfg.max_replicas)
            events = norm.state.scale_events
            if norm.replicas != current:
                events = events[:-1]
            if result != current:
                events += ((now, result - current),)
            norm = behavior.Normalized(
                result, None, behavior.BehaviorState(norm.state.recommendations, events)
            )
        if norm.reason is not None and result != desired:
            reason = norm.reason
            detail = f"{detail}; {reason.value.lower()}: {desired} -> {result}"

        # A re-grow (up soon after a shrink) means the shrink let go of capacity the load
        # came back for: with BURST_PANICS of them in BURST_MEMORY_S, burst memory holds on.
        direction = int(state.get("direction", 0))
        if result != current and cfg.mode is config.Mode.ACTIVE:
            if result > current and direction < 0:
                regrets.append(now)
            direction = 1 if result > current else -1
        new_state = {
            **new_state,
            "behavior": norm.state.to_dict(),
            "panic_until": panic_until,
            "panics": panics,
            "regrets": regrets,
            "direction": direction,
        }
        if not math.isfinite(panic_until):
            new_state.pop("panic_until")
        applied = result
        if cfg.mode is config.Mode.RECOMMEND:
            applied = current
            detail = f"recommend mode: would set {result} ({reason.value}): {detail}"
            reason = Reason.RECOMMEND_ONLY
            # The rails' memory must not believe a scale happened.
            new_state["behavior"] = behavior.BehaviorState(
                norm.state.recommendations,
                tuple(e for e in norm.state.scale_events if e[0] != now),
            ).to_dict()
        return (
            Decision(
                replicas=applied,
                reason=reason,
                signal=winner,
                detail=detail,
                recommended=result,
                proposals=raw,
                forecast=forecast_note,
            ),
            new_state,
        )

    def _tolerate(
        self, best: signals.Proposal, wanted: int, current: int
    ) -> tuple[int, Reason, str]:
        """The tolerance band around the running count.

        A set point (a ``cpu``, ``gpu``, ``rps`` or ``concurrency`` target, the rollout's
        75 %) has room on both sides: within ``tolerance`` of the running count, hold.
        The latency signal (and what is sized by it: ``forecast``, ``backlog``) sizes to
        an edge, the most the SLO allows, with no room above it: one-sided each way.
        Up as soon as the ask is more than ``up_tolerance`` above what runs; down to the
        fewest replicas that still leave ``tolerance`` headroom over the ask, so the count
        only comes back up once the ask has grown by that much: a load wandering about a
        replica boundary does not flap the count.
        """
        cfg = self.config
        hold = f"{best.detail}; within tolerance of {current}: hold"
        if best.signal in SET_POINTS:
            # A target is a set point with room on both sides: +-tolerance, as HPA.
            if (
                current > 0
                and wanted != current
                and abs(best.replicas / current - 1.0) <= (cfg.tolerance)
            ):
                return current, Reason.WITHIN_TOLERANCE, hold
            return wanted, Reason.SIGNAL, best.detail
        if wanted > current:
            if current > 0 and best.replicas <= current * (1.0 + cfg.up_tolerance):
                return current, Reason.WITHIN_TOLERANCE, hold
            return wanted, Reason.SIGNAL, best.detail
        if wanted < current and best.signal != "burst":
            # Standing burst capacity is sized for a peak already: no headroom on top.
            roomy = max(math.ceil(best.replicas * (1.0 + cfg.tolerance) - 1e-9), wanted)
            if roomy >= current:
                return current, Reason.WITHIN_TOLERANCE, hold
            return (
                roomy,
                Reason.SIGNAL,
                (f"{best.detail}; {roomy} leaves {cfg.tolerance:.0%} headroom"),
            )
        return wanted, Reason.SIGNAL, best.detail

    def _backlog_proposal(
        self, snap: Snapshot, demand: signals.Demand, state: State
    ) -> signals.Proposal | None:
        """While overloaded, size for the load plus draining the queue new capacity will find.

        The queue (in-flight requests beyond what the load keeps in service) keeps growing
        at ``arrivals - capacity`` until the replicas ordered at the start of the overload
        are ready, one cold start later. Every queued request waits behind it (FIFO), so
        the queue expected then is drained within ``DRAIN_S``:
        ``cores = rate x s + (queued + excess x time_to_capacity) x s / DRAIN_S``.
        The overshoot lasts only until the queue is gone; panic hold then lets it go.
        """
        inflight = snap.signals.concurrency
        rate, service_s = demand.rate, demand.service_s
        capacity = snap.replicas.ready * demand.request_cores
        if inflight is None or rate is None or service_s is None:
            return None
        queued_now = max(0.0, inflight - rate * service_s)
        # Overloaded: the load needs more cores than are ready, or requests queue beyond
        # a few per thread while the load is near capacity (a rate window trails a step;
        # the queue shows it at once). A queue left behind once capacity is plentiful sits
        # on the replicas it was routed to: more replicas cannot drain it.
        load = rate * service_s
        queue_building = queued_now > QUEUED_PER_THREAD * max(capacity, 1.0)
        if load < capacity and not (queue_building and load >= NEAR_CAPACITY * capacity):
            state.pop("overload_since", None)
            return None
        since = float(state.setdefault("overload_since", snap.time))
        until_capacity = max(0.0, since + self.config.cold_start_s - snap.time)
        excess_rps = max(0.0, rate - capacity / service_s)
        queued = queued_now + excess_rps * until_capacity
        cores = rate * service_s + queued * service_s / DRAIN_S
        utilization = next(
            (t.target / 100.0 for t in self.config.signals if t.type is config.SignalType.CPU),
            0.7,
        )
        replicas = cores / (demand.request_cores * utilization)
        detail = (
            f"overloaded: {queued:.0f} requests queued when capacity lands in "
            f"{until_capacity:.0f} s; ({rate:.0f} req/s + drain in {DRAIN_S:.0f} s) x "
            f"{service_s * 1000:.1f} ms = {cores:.1f} cores = {replicas:.2f}"
        )
        # The queue sits on the replicas ready now and drains there. Least request sends
        # them no new requests until it has; round robin keeps sending each 1/n, so more
        # replicas speed its drain, but less and less: past the load's own need beside
        # them, capacity mostly arrives after the queue is gone.
        beside = snap.replicas.ready + DRAIN_HEADROOM * rate * service_s / (
            demand.request_cores * utilization
        )
        if beside < replicas:
            replicas = beside
            routed = (
                "least request routes new requests elsewhere"
                if self.config.routing is config.Routing.LEAST_REQUEST
                else "more replicas only shrink their share of new requests"
            )
            detail = (
                f"overloaded: {queued:.0f} requests queued on the {snap.replicas.ready} "
                f"ready replicas drain there ({routed}); {snap.replicas.ready} + "
                f"{DRAIN_HEADROOM:g} x {rate:.0f} req/s x {service_s * 1000:.1f} ms at "
                f"{utilization:.0%} = {replicas:.2f}"
            )
        return signals.Proposal("backlog", replicas, detail)

    def _run_custom(
        self,
        snap: Snapshot,
        recommended: int,
        reason: Reason,
        detail: str,
        state: State,
    ) -> tuple[int, Reason, str, State]:
        assert self.custom is not None
        policy_state: Mapping[str, Any] | None = state.get("policy")
        try:
            out = self.custom.program.evaluate(
                snap, recommended, params=self.custom.params, state=policy_state
            )
        except cel_policy.PolicyRuntimeError as err:
            return (
                recommended,
                Reason.POLICY_ERROR,
                f"policy {self.custom.name} failed ({err}); using the recommendation "
                f"{recommended} ({reason.value}: {detail})",
                state,
            )
        why = out.reason or f"policy {self.custom.name}"
        new_state = {**state, "policy": out.state}
        if out.replicas == recommended:
            return recommended, reason, f"{detail}; policy {self.custom.name} agreed", new_state
        return (
            out.replicas,
            Reason.POLICY,
            f"{why} (recommended {recommended}: {detail})",
            new_state,
        )
