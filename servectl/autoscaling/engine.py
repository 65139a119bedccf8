"""servectl's default policy: signal proposals -> max -> panic -> custom policy -> rails.

One ``decide`` call per tick, a pure function of the snapshot and the persisted state:

1. Learn the load: request rate history (for the trend), mean service time
   (CPU seconds per request, EWMA) and the service-time quantile behind the latency
   target (observed latency minus the modelled queueing wait, EWMA).
2. One proposal per configured signal (``signals``); the largest wins and is recorded
   with its reason, like HPA's multi-metric max.
3. Tolerance: a proposal within ``tolerance`` of the current count is ignored.
4. Missing metrics never shrink anything (DESIGN §4 rule 8): with no usable signal the
   count holds; with some signals missing it may only grow.
5. Panic: when the ready replicas face at least their whole capacity, or the winner
   asks for ``panic_threshold`` x the ready count, scale straight to the proposal
   (no up rate limit) and forbid scale-down for ``panic_hold_s``.
6. A custom CEL policy, if any, sees ``recommended`` and returns the count; its errors
   fall back to the recommendation with reason POLICY_ERROR.
7. The rails (``behavior``): stabilization windows, rate limits, min/max.
8. ``mode: recommend`` records the decision and keeps the current count.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from servectl.autoscaling import behavior, cel_policy, config, queueing, signals, windows
from servectl.autoscaling.decision import Decision, Reason
from servectl.autoscaling.policy import State
from servectl.autoscaling.snapshot import Snapshot

#: Signals older than this are stale: treated as missing.
STALE_AFTER_S = 60.0
#: Half-lives of the learnt service-time estimates.
SERVICE_HALF_LIFE_S = 30.0
QUANTILE_HALF_LIFE_S = 60.0
#: Windows for the load trend: both must rise for a trend to count (noise rejection).
TREND_SHORT_S = 30.0
TREND_LONG_S = 60.0
#: CPU usage above this share of the ready capacity means saturated replicas.
SATURATED = 0.9
#: Fewest requests in the latency window for an observed percentile to teach anything.
MIN_LATENCY_SAMPLES = 200.0


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

    @property
    def name(self) -> str:
        return "servectl" if self.custom is None else f"servectl+{self.custom.name}"

    @property
    def period_s(self) -> float:
        return self.config.period_s

    def initial_state(self) -> State:
        return {}

    # ------------------------------------------------------------------ learning

    def _learn(self, snap: Snapshot, state: State) -> tuple[signals.Demand, State]:
        cfg = self.config
        now = snap.time
        sig = snap.signals
        last_time = state.get("last_time")
        dt = now - last_time if isinstance(last_time, int | float) else cfg.period_s
        rates: list[windows.Sample] = [(float(t), float(v)) for t, v in state.get("rates", [])]
        if sig.rps is not None:
            rates.append((now, sig.rps))
        rates = windows.prune(rates, now, TREND_LONG_S)

        request_cores = next(
            (p.cpu_request_cores for p in snap.pods if p.cpu_request_cores > 0),
            float(cfg.threads_per_replica),
        )
        service_s = state.get("service_s")
        usage = sig.cpu_usage_cores
        if usage is None and sig.cpu_utilization is not None and snap.replicas.ready > 0:
            usage = sig.cpu_utilization / 100.0 * snap.replicas.ready * request_cores
        capacity = snap.replicas.ready * request_cores
        saturated = usage is not None and usage >= SATURATED * capacity
        if usage is not None and sig.rps is not None and sig.rps > 1.0 and not saturated:
            # Saturated replicas cap CPU at capacity while requests keep arriving: usage per
            # request would then under-state the cost, so only learn from unsaturated ticks.
            service_s = windows.ewma(service_s, usage / sig.rps, dt, SERVICE_HALF_LIFE_S)
        elif service_s is None and sig.concurrency is not None and sig.rps and sig.rps > 1.0:
            # Little's law (includes queueing: an over-estimate, replaced once CPU shows up).
            service_s = sig.concurrency / sig.rps

        quantile_s = state.get("service_quantile_s")
        target = self._latency_target
        if target is not None and service_s is not None:
            q = target.percentile / 100.0
            observed_ms = sig.latency(target.percentile)
            if quantile_s is None:
                # Before any observation: an exponential service time's quantile.
                quantile_s = service_s * -math.log(1.0 - q)
            enough = sig.rps is not None and sig.rps * 30.0 >= MIN_LATENCY_SAMPLES
            # Only a steady service teaches its tail: while replicas start, while CPU is
            # saturated or a panic drains a backlog, the observed latency is queueing the
            # model does not see, and learning it would inflate every later decision.
            steady = (
                not saturated
                and snap.replicas.ready == snap.replicas.current
                and now >= float(state.get("panic_until", -math.inf))
            )
            if observed_ms is not None and enough and steady and snap.replicas.ready > 0:
                assert sig.rps is not None
                wait = queueing.wait_quantile_s(
                    sig.rps / snap.replicas.ready, service_s, cfg.threads_per_replica, q
                )
                observed = observed_ms / 1000.0
                if math.isfinite(wait):
                    # Whatever the M/M/c wait misses (the service tail) or over-states
                    # (real service times vary less than exponential ones) is learnt as
                    # one offset; it may go negative, within half the target.
                    target_s = target.target / 1000.0
                    sample = min(max(observed - wait, -0.5 * target_s), target_s)
                    quantile_s = windows.ewma(quantile_s, sample, dt, QUANTILE_HALF_LIFE_S)

        rate = sig.rps
        projected = rate
        if rate is not None:
            short = windows.slope(rates, now, TREND_SHORT_S)
            long = windows.slope(rates, now, TREND_LONG_S)
            if short is not None and long is not None and short > 0 and long > 0:
                projected = rate + min(short, long) * (cfg.cold_start_s + cfg.period_s)

        demand = signals.Demand(
            rate=rate,
            projected_rate=projected,
            service_s=service_s,
            service_quantile_s=quantile_s,
            request_cores=request_cores,
            threads=cfg.threads_per_replica,
        )
        new_state: State = {
            **state,
            "last_time": now,
            "rates": [[t, v] for t, v in rates],
            "service_s": service_s,
            "service_quantile_s": quantile_s,
        }
        return demand, new_state

    # ------------------------------------------------------------------ deciding

    def decide(self, snap: Snapshot, state: State) -> tuple[Decision, State]:
        cfg = self.config
        now = snap.time
        current = snap.replicas.current
        ready = snap.replicas.ready
        if snap.signals.age_s > STALE_AFTER_S:
            stale = snap.signals.age_s
            snap = Snapshot(snap.time, snap.replicas, pods=snap.pods, rollout=snap.rollout)
            stale_note = f"signals are {stale:.0f} s old (stale after {STALE_AFTER_S:.0f} s)"
        else:
            stale_note = ""
        demand, state = self._learn(snap, state)

        proposals: dict[str, signals.Proposal] = {}
        missing: list[str] = []
        for target in cfg.signals:
            prop = signals.propose(target, snap, demand, cfg.max_replicas)
            if prop is None:
                missing.append(signals.signal_name(target))
            else:
                proposals[prop.signal] = prop
        backlog = self._backlog_proposal(snap, demand)
        if backlog is not None and proposals:
            proposals[backlog.signal] = backlog
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
            desired, reason, detail = wanted, Reason.SIGNAL, best.detail
            if current > 0 and abs(best.replicas / current - 1.0) <= cfg.tolerance:
                desired, reason = current, Reason.WITHIN_TOLERANCE
                detail = f"{best.detail}; within {cfg.tolerance:.0%} of {current}: hold"
            overloaded = (
                demand.rate is not None
                and demand.service_s is not None
                and demand.rate * demand.service_s >= max(ready, 0) * demand.request_cores
                and demand.rate > 0
            )
            surge = ready > 0 and wanted >= cfg.panic_threshold * ready
            if wanted > current and (overloaded or surge or ready == 0):
                panic_until = now + cfg.panic_hold_s
                desired, reason = wanted, Reason.PANIC
                detail = f"panic ({'overloaded' if overloaded else 'burst'}): {best.detail}"
            if missing and desired < current:
                desired, reason = current, Reason.METRICS_MISSING
                detail = f"{', '.join(missing)} missing: never shrink on partial metrics"

        in_panic = now < panic_until
        recommended = desired
        new_state = state
        if self.custom is not None:
            desired, reason, detail, new_state = self._run_custom(
                snap, recommended, reason, detail, new_state
            )
        if in_panic and desired < current:
            desired, reason = current, Reason.PANIC
            detail = f"in panic until t={panic_until:.0f}: no scale-down ({detail})"

        norm = behavior.normalize(
            desired,
            current,
            now,
            cfg.min_replicas,
            cfg.max_replicas,
            cfg.behavior,
            behavior.BehaviorState.from_dict(new_state.get("behavior")),
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

        new_state = {**new_state, "behavior": norm.state.to_dict(), "panic_until": panic_until}
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
            ),
            new_state,
        )

    def _backlog_proposal(self, snap: Snapshot, demand: signals.Demand) -> signals.Proposal | None:
        """While overloaded, size for the load plus draining the queue within one cold start.

        Requests that piled up while capacity was short are in ``concurrency`` beyond what
        the load keeps in service (``rate x service time``); draining them within
        ``cold_start_s`` takes ``queued x service time / cold_start_s`` more cores.
        """
        inflight = snap.signals.concurrency
        rate, service_s = demand.projected_rate, demand.service_s
        if inflight is None or rate is None or service_s is None or rate <= 0:
            return None
        capacity = snap.replicas.ready * demand.request_cores
        if rate * service_s < capacity:
            return None
        queued = max(0.0, inflight - rate * service_s)
        drain_s = max(self.config.cold_start_s, self.config.period_s)
        cores = rate * service_s + queued * service_s / drain_s
        utilization = next(
            (t.target / 100.0 for t in self.config.signals if t.type is config.SignalType.CPU),
            0.7,
        )
        replicas = cores / (demand.request_cores * utilization)
        return signals.Proposal(
            "backlog",
            replicas,
            f"overloaded with {queued:.0f} queued: ({rate:.0f} req/s + drain over "
            f"{drain_s:.0f} s) x {service_s * 1000:.1f} ms = {cores:.1f} cores = {replicas:.2f}",
        )

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
