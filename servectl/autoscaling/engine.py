"""servectl's default policy: signal proposals -> max -> panic -> custom policy -> rails.

One ``decide`` call per tick, a pure function of the snapshot and the persisted state
(docs/autoscaling.md has the formulas and a worked example). The state is an
``engine_state.EngineState``, an immutable value: ``decide`` reads the Policy protocol's
JSON form of it on entry and writes it on exit, ``step`` does the work on the value, one
named step after the other (in brackets below):

1. Learn the load (``engine_learning.Learner.learn``): request-rate history (trend), mean
   service time (CPU seconds per request, EWMA, unsaturated ticks only), the latency
   target's wait budget (Erlang C shape, scale learnt by feedback, never from
   transients), and while overloaded the arrival rate from the queue's growth.
2. One proposal per configured signal (``signals``), plus ``backlog`` while overloaded
   (load + draining the queue new capacity will find); the largest wins and is recorded
   (``_propose``, then ``_choose`` for steps 3 to 5).
3. Tolerance: a set point (a cpu, gpu, rps or concurrency target) holds within
   ``tolerance``; the latency signal sizes to an edge: up once the ask is
   ``up_tolerance`` above the running count, down only to a count that leaves
   ``tolerance`` headroom over the ask (a one-sided band each way).
4. Missing metrics never shrink anything (DESIGN §4 rule 8).
5. Panic: overloaded, a 2x burst or nothing ready -> straight to the proposal (no up rate
   limit, ``_bypass_rate_limit``) and no scale-down for ``panic_hold_s``, extended while
   requests stay queued (``_hold_panic``).
6. Burst memory (``_recall``, ``_watch_surges``, ``_with_peak``): repeated panics (for
   a load that did not hold for three cold starts: a step is no burst), surges (the rate
   up 1.5x within a cold start) or re-grows mean bursts shorter than a cold start: the
   trend projection is off (a burst's rise is over before capacity lands) and ``burst``
   proposes standing capacity for the peak rate of the last 10 minutes. The ``forecast``
   proposal (predictive pre-scaling) and ``burst`` only ever add to the reactive ask.
7. A custom CEL policy, if any, sees ``recommended``; its errors fall back to the
   recommendation with reason POLICY_ERROR (``_run_custom``).
8. The rails (``behavior``): stabilization windows, rate limits, min/max. A temporary
   drain overshoot or panic hold is kept out of the scale-down memory.
9. ``mode: recommend`` records the decision and keeps the current count.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from servectl.autoscaling import (
    behavior,
    cel_policy,
    config,
    engine_learning,
    engine_state,
    forecast,
    signals,
)
from servectl.autoscaling.decision import Decision, Reason, instant
from servectl.autoscaling.engine_state import EngineState, Pair
from servectl.autoscaling.policy import State
from servectl.autoscaling.snapshot import Snapshot

#: Signals older than this are stale: treated as missing.
STALE_AFTER_S = 60.0
#: While overloaded, size to drain the queue expected when new capacity lands within this.
DRAIN_S = 2.0
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


def _load_peaks(peaks: Sequence[Pair], now: float) -> tuple[Pair, ...]:
    """The highest request rate per PEAK_BUCKET_S over the last PEAK_WINDOW_S, as kept
    in the state (expired entries dropped)."""
    return tuple(
        (t, v) for t, v in peaks if now - t < PEAK_WINDOW_S and math.isfinite(v) and t <= now
    )


def _with_peak(peaks: tuple[Pair, ...], now: float, rate: float | None) -> tuple[Pair, ...]:
    """``peaks`` with ``rate`` counted in the bucket of ``now``."""
    if rate is None or not math.isfinite(rate) or rate < 0:
        return peaks
    bucket = math.floor(now / PEAK_BUCKET_S) * PEAK_BUCKET_S
    if peaks and peaks[-1][0] == bucket:
        return (*peaks[:-1], (bucket, max(peaks[-1][1], rate)))
    return (*peaks, (bucket, rate))


def _held(panic_t: float, peaks: Sequence[Sequence[float]], now: float, lasts_s: float) -> bool:
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


@dataclass(frozen=True)
class _BurstMemory:
    """The burst memory as this tick finds it (events older than BURST_MEMORY_S, peaks
    older than PEAK_WINDOW_S forgotten)."""

    panics: tuple[float, ...]
    regrets: tuple[float, ...]
    surges: tuple[float, ...]
    peaks: tuple[Pair, ...]
    #: The panics whose load did not hold (a step the load then holds is no burst).
    burst_panics: int

    @property
    def bursting(self) -> bool:
        return max(self.burst_panics, len(self.surges), len(self.regrets)) >= BURST_PANICS


def _recall(state: EngineState, now: float, cold_start_s: float) -> _BurstMemory:
    """The burst memory ``state`` holds, as of ``now``."""

    def recent(times: tuple[float, ...]) -> tuple[float, ...]:
        return tuple(t for t in times if now - t < BURST_MEMORY_S)

    panics = recent(state.panics)
    peaks = _load_peaks(state.peaks, now)
    lasts_s = BURST_LASTS_COLD_STARTS * cold_start_s
    held = sum(1 for t in panics if _held(t, peaks, now, lasts_s))
    return _BurstMemory(
        panics, recent(state.regrets), recent(state.surges), peaks, len(panics) - held
    )


def _watch_surges(
    surges: tuple[float, ...],
    base: float | None,
    rate: float | None,
    before: list[float],
    now: float,
) -> tuple[tuple[float, ...], float | None]:
    """A surge: the rate above SURGE_FACTOR x its lowest over the last cold start
    (``before``); the next one counts once the rate is back down to REARM_FACTOR x the
    level this one surged from. The surges and that level (None: re-armed)."""
    if rate is None or not before:
        return surges, base
    lowest = max(min(before), 1.0)
    if base is None and rate > SURGE_FACTOR * lowest:
        return (*surges, now), lowest
    if base is not None and rate <= REARM_FACTOR * base:
        return surges, None  # back down: the surge was a burst; re-armed
    return surges, base


def _without_stale_signals(snap: Snapshot) -> tuple[Snapshot, str]:
    """Signals older than STALE_AFTER_S are missing ones; and a note saying so."""
    if not snap.signals.age_s > STALE_AFTER_S:
        return snap, ""
    stale = snap.signals.age_s
    age = f"{stale:.0f} s old" if math.isfinite(stale) else "of unknown age"
    return (
        Snapshot(snap.time, snap.replicas, pods=snap.pods, rollout=snap.rollout),
        f"signals are {age} (stale after {STALE_AFTER_S:.0f} s)",
    )


def _bypass_rate_limit(
    norm: behavior.Normalized, desired: int, current: int, now: float, max_replicas: int
) -> behavior.Normalized:
    """In panic, up to ``desired`` past the scale-up rate limit (not past max), with the
    real change recorded as the scale event."""
    result = norm.replicas
    if not desired > result >= current:
        return norm
    result = min(desired, max_replicas)
    events = norm.state.scale_events
    if norm.replicas != current:
        events = events[:-1]
    if result != current:
        events += ((now, result - current),)
    return behavior.Normalized(
        result, None, behavior.BehaviorState(norm.state.recommendations, events)
    )


@dataclass(frozen=True)
class _Asks:
    """One tick's proposals (by signal) and what they mean for panic and the rails."""

    proposals: dict[str, signals.Proposal]
    missing: list[str]
    #: The configured signals' own largest ask (the load's need, no drain or extras).
    sustained: float | None
    #: The signals' and backlog's largest ask: what decides panic.
    reactive: float | None
    overloaded: bool
    forecast_note: str | None


@dataclass(frozen=True)
class _Choice:
    """The count chosen before the custom policy and the rails, and the panic it set."""

    desired: int
    reason: Reason
    detail: str
    winner: str | None
    panic_until: float
    panics: tuple[float, ...]


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
        self._learner = engine_learning.Learner(cfg)
        # The document this policy returned last, its items then, and the state it
        # encodes: a loop hands the document back unchanged (the backends keep the loop
        # state in memory between cycles), so it is not read again (~20 us a tick). By
        # identity, like the forecast memos, and only while its keys still hold the same
        # values (a caller that set a key gets it read).
        self._state_memo: tuple[State, list[tuple[str, Any]], EngineState] | None = None
        # A forecast depends on the closed buckets and on which buckets the horizon spans,
        # not on the tick within a bucket: one per bucket (150 ticks of 2 s at 5 minutes).
        self._forecast_memo: tuple[object, tuple[Any, ...], forecast.Forecast] | None = None

    @property
    def name(self) -> str:
        return "servectl" if self.custom is None else f"servectl+{self.custom.name}"

    @property
    def period_s(self) -> float:
        return self.config.period_s

    def initial_state(self) -> State:
        return {}

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
        self, snap: Snapshot, demand: signals.Demand, stored: object
    ) -> tuple[signals.Proposal | None, str | None]:
        """When the forecast expects more than the rate the signals already project: what
        they ask for at the high side of it (its estimate plus its recent error); and the
        forecaster's state in words (None when forecasting is off)."""
        cfg = self.config
        if cfg.forecast is None:
            return None, None
        horizon = cfg.cold_start_s + cfg.period_s
        if stored is None:
            return None, "off: no request rate observed yet"
        history = self._learner.load_history(stored, cfg.forecast)
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
        self, snap: Snapshot, demand: signals.Demand, peaks: tuple[Pair, ...]
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

    # ------------------------------------------------------------------ deciding

    def decide(self, snap: Snapshot, state: State) -> tuple[Decision, State]:
        """The Policy protocol's ``decide``: :meth:`step` on the state as JSON, read with
        ``engine_state.from_dict`` (a malformed field is a ``StateError`` naming it) and
        written back as the engine always wrote it."""
        memo = self._state_memo
        if memo is not None and state is memo[0] and list(state.items()) == memo[1]:
            typed = memo[2]
        else:
            typed = engine_state.from_dict(state)
        decision, new_state = self.step(snap, typed)
        doc = engine_state.to_dict(new_state)
        self._state_memo = (doc, list(doc.items()), new_state)
        return decision, doc

    def step(self, snap: Snapshot, state: EngineState) -> tuple[Decision, EngineState]:
        """One tick on the typed state: the module docstring's steps, in order."""
        cfg = self.config
        now = snap.time
        current = snap.replicas.current
        snap, stale_note = _without_stale_signals(snap)
        memory = _recall(state, now, cfg.cold_start_s)
        before = [v for t, v in state.rates if now - t <= cfg.cold_start_s]
        demand, learnt = self._learner.learn(snap, state, memory.bursting)
        surges, surge_base = _watch_surges(
            memory.surges, state.surge_base, demand.rate, before, now
        )
        peaks = _with_peak(memory.peaks, now, demand.rate)
        asks, overload_since = self._propose(
            snap, demand, state.overload_since, learnt.forecast, memory.bursting, peaks
        )
        choice = self._choose(snap, asks, stale_note, state.panic_until, memory.panics)
        panic_until = self._hold_panic(snap, demand, choice.panic_until)
        in_panic = now < panic_until  # the hold only ever extends a panic
        desired, reason, detail = choice.desired, choice.reason, choice.detail
        recommended = desired
        policy_state = state.policy
        policy_error: str | None = None
        if self.custom is not None:
            desired, reason, detail, policy_state, policy_error = self._run_custom(
                snap, recommended, reason, detail, policy_state
            )
        held_by_panic = in_panic and desired < current
        if held_by_panic:
            desired, reason = current, Reason.PANIC
            detail = f"in panic until {instant(panic_until)}: no scale-down ({detail})"

        norm = behavior.normalize(
            desired,
            current,
            now,
            cfg.min_replicas,
            cfg.max_replicas,
            cfg.behavior,
            state.behavior,
            # A drain overshoot and a panic hold are temporary: remember the load's own
            # need instead, so the scale-down window does not keep them alive.
            remember=None
            if asks.sustained is None or (choice.winner != "backlog" and not held_by_panic)
            else min(desired, max(math.ceil(asks.sustained - 1e-9), cfg.min_replicas)),
        )
        if memory.bursting and norm.reason is Reason.STABILIZING:
            detail = (
                f"{detail}; burst memory ({memory.burst_panics} panics, {len(surges)} surges, "
                f"{len(memory.regrets)} re-grows in {BURST_MEMORY_S:.0f} s)"
            )
        if in_panic:
            norm = _bypass_rate_limit(norm, desired, current, now, cfg.max_replicas)
        result = norm.replicas
        if norm.reason is not None and result != desired:
            reason = norm.reason
            detail = f"{detail}; {reason.value.lower()}: {desired} -> {result}"

        # A re-grow (up soon after a shrink) means the shrink let go of capacity the load
        # came back for: with BURST_PANICS of them in BURST_MEMORY_S, burst memory holds on.
        direction, regrets = state.direction, memory.regrets
        if result != current and cfg.mode is config.Mode.ACTIVE:
            if result > current and direction < 0:
                regrets = (*regrets, now)
            direction = 1 if result > current else -1
        new_state = EngineState(
            last_time=learnt.last_time,
            rates=learnt.rates,
            service_s=learnt.service_s,
            wait_budget_s=learnt.wait_budget_s,
            inflight=learnt.inflight,
            forecast=learnt.forecast,
            surges=surges,
            peaks=peaks,
            panics=choice.panics,
            regrets=regrets,
            behavior=norm.state,
            direction=direction,
            panic_until=panic_until,
            unsteady_at=learnt.unsteady_at,
            surge_base=surge_base,
            overload_since=overload_since,
            policy=policy_state,
        )
        applied = result
        if cfg.mode is config.Mode.RECOMMEND:
            applied = current
            detail = f"recommend mode: would set {result} ({reason.value}): {detail}"
            reason = Reason.RECOMMEND_ONLY
            # The rails' memory must not believe a scale happened.
            new_state = dataclasses.replace(
                new_state,
                behavior=behavior.BehaviorState(
                    norm.state.recommendations,
                    tuple(e for e in norm.state.scale_events if e[0] != now),
                ),
            )
        return (
            Decision(
                replicas=applied,
                reason=reason,
                signal=choice.winner,
                detail=detail,
                recommended=result,
                proposals={name: p.replicas for name, p in asks.proposals.items()},
                forecast=asks.forecast_note,
                policy_error=policy_error,
            ),
            new_state,
        )

    def _propose(
        self,
        snap: Snapshot,
        demand: signals.Demand,
        overload_since: float | None,
        stored_forecast: object,
        bursting: bool,
        peaks: tuple[Pair, ...],
    ) -> tuple[_Asks, float | None]:
        """Every proposal of this tick (the module docstring's step 2, with the forecast,
        burst memory and rollout floor on top); and when the overload began (None: none)."""
        cfg = self.config
        proposals: dict[str, signals.Proposal] = {}
        missing: list[str] = []
        for target in cfg.signals:
            prop = _usable(signals.propose(target, snap, demand, cfg.max_replicas))
            if prop is None:
                missing.append(f"{signals.signal_name(target)} missing")
            else:
                proposals[prop.signal] = prop
                if prop.partial:
                    missing.append(prop.partial)  # a lower bound: never shrink on it
        sustained = max((p.replicas for p in proposals.values()), default=None)
        backlog, overload_since = self._backlog_proposal(snap, demand, overload_since)
        backlog = _usable(backlog)
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
        ahead, forecast_note = self._forecast_proposal(snap, demand, stored_forecast)
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
        asks = _Asks(proposals, missing, sustained, reactive, backlog is not None, forecast_note)
        return asks, overload_since

    def _choose(
        self,
        snap: Snapshot,
        asks: _Asks,
        stale_note: str,
        panic_until: float,
        panics: tuple[float, ...],
    ) -> _Choice:
        """The largest proposal within the tolerance band, panic, and the missing-metrics
        rule (steps 3 to 5, before the panic hold and the rails)."""
        cfg = self.config
        now, current, ready = snap.time, snap.replicas.current, snap.replicas.ready
        if not asks.proposals:
            detail = stale_note or f"no usable signal ({', '.join(asks.missing)})"
            detail = f"{detail}: holding {current}"
            return _Choice(current, Reason.METRICS_MISSING, detail, None, panic_until, panics)
        best = max(asks.proposals.values(), key=lambda p: p.replicas)
        wanted = max(math.ceil(best.replicas - 1e-9), 0)
        desired, reason, detail = self._tolerate(best, wanted, current)
        asked = max(math.ceil((asks.reactive or 0.0) - 1e-9), 0)
        surge = ready > 0 and asked >= cfg.panic_threshold * ready
        if asked > current and (asks.overloaded or surge or ready == 0):
            if now >= panic_until:
                panics = (*panics, now)
            panic_until = now + cfg.panic_hold_s
            desired, reason = wanted, Reason.PANIC
            detail = f"panic ({'overloaded' if asks.overloaded else 'burst'}): {best.detail}"
        if asks.missing and desired < current:
            desired, reason = current, Reason.METRICS_MISSING
            detail = f"{', '.join(asks.missing)}: never shrink on partial metrics"
        return _Choice(desired, reason, detail, best.signal, panic_until, panics)

    def _hold_panic(self, snap: Snapshot, demand: signals.Demand, panic_until: float) -> float:
        """While requests are still queued, extra replicas keep new requests away from
        the backlogged ones (round robin gives each 1/n): the panic holds on."""
        now, inflight = snap.time, snap.signals.concurrency
        rate, service_s = demand.rate, demand.service_s
        if now >= panic_until or inflight is None or rate is None or not service_s:
            return panic_until
        queued = inflight - rate * service_s
        capacity = snap.replicas.ready * demand.request_cores
        if queued > engine_learning.QUEUED_PER_THREAD * max(capacity, 1.0):
            return max(panic_until, now + 2 * self.config.period_s)
        return panic_until

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
        self, snap: Snapshot, demand: signals.Demand, overload_since: float | None
    ) -> tuple[signals.Proposal | None, float | None]:
        """While overloaded, size for the load plus draining the queue new capacity will find;
        and when the overload began (``overload_since``: None once it is over).

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
            return None, overload_since
        queued_now = max(0.0, inflight - rate * service_s)
        # Overloaded: the load needs more cores than are ready, or requests queue beyond
        # a few per thread while the load is near capacity (a rate window trails a step;
        # the queue shows it at once). A queue left behind once capacity is plentiful sits
        # on the replicas it was routed to: more replicas cannot drain it.
        load = rate * service_s
        queue_building = queued_now > engine_learning.QUEUED_PER_THREAD * max(capacity, 1.0)
        if load < capacity and not (
            queue_building and load >= engine_learning.NEAR_CAPACITY * capacity
        ):
            return None, None
        since = snap.time if overload_since is None else overload_since
        excess_rps = max(0.0, rate - capacity / service_s)
        utilization = next(
            (t.target / 100.0 for t in self.config.signals if t.type is config.SignalType.CPU),
            0.7,
        )

        def sized(start_s: float) -> tuple[float, float, float, float]:
            until = max(0.0, since + start_s - snap.time)
            queued = queued_now + excess_rps * until
            cores = rate * service_s + queued * service_s / DRAIN_S
            return until, queued, cores, cores / (demand.request_cores * utilization)

        # Capacity the standby pool covers lands one activation later, the rest one cold
        # start later (a bigger queue by then: more replicas to drain it).
        until_capacity, queued, cores, replicas = sized(self.config.cold_start_s)
        if self.config.standby > 0:
            fast = sized(min(self.config.activation_s, self.config.cold_start_s))
            if fast[3] - snap.replicas.current <= self.config.standby:
                until_capacity, queued, cores, replicas = fast
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
        return signals.Proposal("backlog", replicas, detail), since

    def _run_custom(
        self,
        snap: Snapshot,
        recommended: int,
        reason: Reason,
        detail: str,
        policy_state: Mapping[str, Any] | None,
    ) -> tuple[int, Reason, str, Mapping[str, Any] | None, str | None]:
        """The custom policy's replicas, reason and detail, its new state, and why it
        failed (None: it did not)."""
        assert self.custom is not None
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
                policy_state,
                f"policy {self.custom.name} failed: {err}",
            )
        why = out.reason or f"policy {self.custom.name}"
        if out.replicas == recommended:
            return (
                recommended,
                reason,
                f"{detail}; policy {self.custom.name} agreed",
                out.state,
                None,
            )
        return (
            out.replicas,
            Reason.POLICY,
            f"{why} (recommended {recommended}: {detail})",
            out.state,
            None,
        )
