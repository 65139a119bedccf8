"""Knative's Pod Autoscaler (KPA), reproduced exactly: a reference baseline.

What it reproduces (read from knative/serving, rewritten here):

- Collection (``pkg/autoscaler/metrics/collector.go``, ``aggregation/bucketing.go``):
  the total in-flight concurrency is recorded once a second into two ring buffers of
  1-second buckets, a stable window (60 s) and a panic window (10 % of it: 6 s). The
  default aggregation is the *plain* window average (``TimedFloat64Buckets``; the
  weighted-exponential one is opt-in by annotation): sum of the buckets over the number
  of buckets since the first write (a partial window until the window has filled, and
  only up to the last write when data stopped), floored to 6 decimals.
- Decision (``pkg/autoscaler/scaling/autoscaler.go``, ``Scale``), every 2 s::

      ready      = max(1, ready pods)
      max up     = ceil(max-scale-up-rate x ready)          # 1000 x
      max down   = floor(ready / max-scale-down-rate)       # / 2
      stable     = clamp(ceil(stable concurrency / target), max down, max up)
      panic      = clamp(ceil(panic concurrency  / target), max down, max up)
      panicking  starts when ceil(panic concurrency / target) / ready >= 2.0 and lasts
                 until a full stable window (60 s) passes without that condition;
      desired    = stable, or while panicking max(stable, panic, highest so far)

  where target = max(0.01, per-pod target x target utilization 0.7)
  (``resources.ResolveMetricTarget``). Then an optional scale-down delay (max over the
  delay window, reachable or not) and the min/max bounds (``kpa/scaler.go``,
  ``applyBounds``; min-scale only while the revision is reachable, ``ScaleBounds``).
  No data for a whole stable window: no decision (the scale stays where it is).

Worked example: target 10 (effective 7), 4 ready pods, 60 s at 28 in flight then a
burst to 84 for 6 s: stable = ceil((54 x 28 + 6 x 84) / 60 / 7) = ceil(4.8) = 5,
panic = ceil(84 / 7) = 12 and 12 / 4 = 3 >= 2 -> panic mode -> 12 pods, held until a
stable window after the last tick over the threshold.

Approximations (ticks instead of a 1-second scraper, no scale-to-zero): docs/baselines.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from servectl.autoscaling import config
from servectl.autoscaling.decision import Decision, Reason
from servectl.autoscaling.policy import State
from servectl.autoscaling.snapshot import Snapshot

TICK_S = 2.0  # scaling.tickInterval: how often the decider runs
BUCKET_S = 1  # config.BucketSize: one bucket per scrape (scrapeTickInterval)
TARGET_MIN = 0.01  # autoscaling.TargetMin
PRECISION = 6  # WindowAverage floors to 6 decimals
# Not a Knative setting: concurrency is recorded at most this, so a window's sum (60
# buckets) and its average floored to 6 decimals stay finite doubles. No service has
# 1e300 requests in flight; a larger reading is a broken metric, not a load.
MAX_RECORDED = 1e300


@dataclass(frozen=True)
class KPAConfig:
    """One revision's KPA settings; defaults are ``config-autoscaler``'s.

    ``target`` is the per-pod concurrency target (``autoscaling.knative.dev/target``, a
    soft target); the decider aims at ``target x target_utilization``.
    ``container_concurrency`` (0: unlimited) caps ``target`` like Knative does.
    Scale-to-zero is not modelled: ``min_scale`` below 1 behaves as 1.
    ``reachable=False`` is a revision that no route sends traffic to
    (``Reachability: Unreachable``): the decider drops the max-scale-down-rate floor
    (``Scale``) and the reconciler ignores ``min_scale`` (``PodAutoscaler.ScaleBounds``);
    the scale-down delay still applies, as upstream.
    """

    target: float
    target_utilization: float = 0.7  # container-concurrency-target-percentage: 70
    container_concurrency: int = 0
    stable_window_s: int = 60  # stable-window
    panic_window_percentage: float = 10.0  # panic-window-percentage
    panic_threshold_percentage: float = 200.0  # panic-threshold-percentage
    max_scale_up_rate: float = 1000.0  # max-scale-up-rate
    max_scale_down_rate: float = 2.0  # max-scale-down-rate
    scale_down_delay_s: int = 0  # scale-down-delay
    min_scale: int = 1
    max_scale: int = 0  # max-scale: 0 means unbounded
    activation_scale: int = 1  # autoscaling.knative.dev/activation-scale
    reachable: bool = True  # a revision receiving traffic (Reachability)
    tick_s: float = TICK_S

    def __post_init__(self) -> None:
        if not self.target > 0:
            raise ValueError(f"KPAConfig.target must be > 0, got {self.target}")
        if not 0 < self.target_utilization <= 1:
            raise ValueError(
                f"KPAConfig.target_utilization must be in (0, 1], got {self.target_utilization}"
            )
        if self.max_scale_up_rate <= 1 or self.max_scale_down_rate <= 1:
            raise ValueError("KPAConfig: max_scale_up_rate and max_scale_down_rate must be > 1")
        if self.stable_window_s < 6 or self.stable_window_s > 3600:
            raise ValueError(
                f"KPAConfig.stable_window_s must be in [6, 3600], got {self.stable_window_s}"
            )
        if self.max_scale and self.max_scale < max(self.min_scale, 1):
            raise ValueError(f"KPAConfig: max_scale {self.max_scale} < min_scale {self.min_scale}")

    @property
    def target_value(self) -> float:
        """``ResolveMetricTarget``: the concurrency per pod the decider aims at."""
        total = self.target
        if self.container_concurrency:
            total = min(total, float(self.container_concurrency))
        return max(TARGET_MIN, total * self.target_utilization)

    @property
    def panic_window_s(self) -> int:
        """``MakeMetric``: stable window x percentage, rounded to a second, at least 1 s."""
        # Duration.Round rounds halves away from zero (Python's round would go to even).
        return max(1, math.floor(self.stable_window_s * self.panic_window_percentage / 100.0 + 0.5))

    @property
    def panic_threshold(self) -> float:
        return self.panic_threshold_percentage / 100.0


class _Buckets:
    """``TimedFloat64Buckets`` with 1-second buckets: a ring over one window."""

    def __init__(self, window_s: int, doc: Mapping[str, Any] | None) -> None:
        self.window = window_s
        doc = doc or {}
        self.buckets: list[float] = [float(v) for v in doc.get("buckets", [0.0] * window_s)]
        if len(self.buckets) != window_s:
            self.buckets, doc = [0.0] * window_s, {}
        self.total = float(doc.get("total", 0.0))
        self.first: int | None = doc.get("first")
        self.last: int | None = doc.get("last")

    def to_dict(self) -> dict[str, Any]:
        return {
            "buckets": self.buckets,
            "total": self.total,
            "first": self.first,
            "last": self.last,
        }

    def record(self, second: int, value: float) -> None:
        n = self.window
        if self.last != second:
            if self.first is None:
                self.first = second
            if self.last is None or second - self.last > self.window:
                # No write for a whole window: start over (firstWrite resets too).
                self.first = second
                self.buckets = [0.0] * n
                self.total = 0.0
            else:
                # Zero the buckets skipped since the last write (gaps count as 0).
                for i in range(self.last + 1, second + 1):
                    self.total -= self.buckets[i % n]
                    self.buckets[i % n] = 0.0
            self.last = second
        self.buckets[second % n] += value
        self.total += value

    def is_empty(self, now: int) -> bool:
        return self.last is None or now - self.last > self.window

    def window_average(self, now: int) -> float:
        if self.last is None or self.first is None:
            return 0.0
        n = self.window
        since_last = now - self.last
        valid = self.last - self.first + 1
        if since_last <= 0:
            return _floor_digits(self.total / min(valid, n))
        if since_last < self.window:
            # Data stopped: drop the buckets after the last write, average the rest.
            total = self.total
            for i in range(self.last + 1, now + 1):
                total -= self.buckets[i % n]
            return _floor_digits(total / min(valid, n - since_last))
        return 0.0


def _floor_digits(value: float) -> float:
    scale = 10.0**PRECISION
    return math.floor(value * scale) / scale


class KPAPolicy:
    """The KPA decider for one revision; state holds the collector's buckets."""

    def __init__(self, cfg: KPAConfig) -> None:
        self.config = cfg

    @property
    def name(self) -> str:
        return "kpa"

    @property
    def period_s(self) -> float:
        return self.config.tick_s

    def initial_state(self) -> State:
        return {"started": False}

    def decide(self, snap: Snapshot, state: State) -> tuple[Decision, State]:
        cfg = self.config
        now = math.floor(snap.time)
        stable = _Buckets(cfg.stable_window_s, state.get("stable"))
        panic = _Buckets(cfg.panic_window_s, state.get("panic"))
        delays: list[list[float]] = [list(e) for e in state.get("delay", [])]
        original_ready = max(snap.replicas.ready, 0)
        if state.get("started"):
            panic_time: float | None = state.get("panic_time")
            max_panic_pods = int(state.get("max_panic_pods", 0))
        else:
            # newAutoscaler: start in panic mode when more than one pod is ready, so a
            # restart without metric history never scales down at once.
            panic_time = snap.time if original_ready > 1 else None
            max_panic_pods = original_ready

        value = snap.signals.concurrency
        if value is not None:
            value = min(value, MAX_RECORDED)
            # The scraper records once a second; a tick stands for the seconds since
            # the previous tick (never before the last write).
            first = now - math.ceil(cfg.tick_s) + 1
            if stable.last is not None:
                first = max(first, stable.last + 1)
            for second in range(first, now + 1):
                stable.record(second, value)
                panic.record(second, value)

        def new_state() -> State:
            return {
                "started": True,
                "stable": stable.to_dict(),
                "panic": panic.to_dict(),
                "panic_time": panic_time,
                "max_panic_pods": max_panic_pods,
                "delay": delays,
            }

        current = snap.replicas.current
        if stable.is_empty(now):
            detail = f"no concurrency data in the last {cfg.stable_window_s} s: holding {current}"
            return Decision(current, Reason.METRICS_MISSING, None, detail, current), new_state()

        observed_stable = stable.window_average(now)
        observed_panic = panic.window_average(now)
        ready = max(1.0, float(original_ready))
        target = cfg.target_value
        max_up = math.ceil(cfg.max_scale_up_rate * ready)
        max_down = math.floor(ready / cfg.max_scale_down_rate) if cfg.reachable else 0
        dspc = math.ceil(observed_stable / target)
        dppc = math.ceil(observed_panic / target)
        desired_stable = int(min(max(dspc, max_down), max_up))
        desired_panic = int(min(max(dppc, max_down), max_up))
        if cfg.activation_scale > 1:
            if dspc > 0 and cfg.activation_scale > desired_stable:
                desired_stable = cfg.activation_scale
            if dppc > 0 and cfg.activation_scale > desired_panic:
                desired_panic = cfg.activation_scale

        over_threshold = dppc / ready >= cfg.panic_threshold
        if over_threshold:
            panic_time = snap.time  # enter, or extend
        elif panic_time is not None and panic_time + cfg.stable_window_s < snap.time:
            panic_time, max_panic_pods = None, 0  # the surge is in the stable window now

        windows = (
            f"concurrency {observed_stable:g} over {cfg.stable_window_s} s, "
            f"{observed_panic:g} over {cfg.panic_window_s} s, target {target:g}/pod, "
            f"{original_ready} ready"
        )
        proposals = {
            "concurrency": observed_stable / target,
            "concurrency_panic": observed_panic / target,
        }
        if panic_time is not None:
            desired = max(desired_stable, desired_panic)
            if desired > max_panic_pods:
                max_panic_pods = desired
            reason, desired = Reason.PANIC, max_panic_pods
            detail = f"panic mode: {windows}; desired {desired} (never down while panicking)"
        else:
            desired, detail = desired_stable, f"{windows}: ceil -> {dspc}"
            if desired_stable > dspc:
                reason = Reason.RATE_LIMITED_DOWN
                detail += f"; at most /{cfg.max_scale_down_rate:g} per decision -> {desired}"
            elif desired_stable < dspc:
                reason = Reason.RATE_LIMITED_UP
                detail += f"; at most x{cfg.max_scale_up_rate:g} per decision -> {desired}"
            else:
                reason = Reason.SIGNAL

        # Upstream records into the delay window whenever a delay is set, reachable or
        # not (Scale has no reachability test here; its TestAutoscalerScaleDownDelay runs
        # with Reachable unset), so neither do we.
        if cfg.scale_down_delay_s > 0:
            index = now // math.floor(cfg.tick_s)
            size = math.ceil(cfg.scale_down_delay_s / cfg.tick_s)
            # max.TimeWindow: the largest desired count recorded in the last ``size`` ticks
            # (two records in one tick keep the larger).
            value_now = float(desired)
            kept: list[list[float]] = []
            for when, recorded in delays:
                if int(when) == index:
                    value_now = max(value_now, recorded)
                elif index - int(when) < size:
                    kept.append([when, recorded])
            delays = [*kept, [index, value_now]]
            delayed = int(max(v for _, v in delays))
            if delayed != desired:
                detail += f"; scale-down delayed {cfg.scale_down_delay_s} s: {desired} -> {delayed}"
                reason, desired = Reason.STABILIZING, delayed

        # ScaleBounds: min-scale counts only while the revision is reachable; below 1
        # it is 1 (no scale-to-zero here).
        low = max(cfg.min_scale if cfg.reachable else 0, 1)
        bounded = _apply_bounds(low, cfg.max_scale, desired)
        if bounded != desired:
            reason = Reason.AT_MIN if bounded > desired else Reason.AT_MAX
            detail += f"; bounded to [{low}, {cfg.max_scale or 'inf'}] -> {bounded}"
        decision = Decision(bounded, reason, "concurrency", detail, bounded, proposals)
        return decision, new_state()


def _apply_bounds(min_scale: int, max_scale: int, desired: int) -> int:
    """``applyBounds``: max 0 means no upper bound."""
    if desired < min_scale:
        return min_scale
    if max_scale != 0 and desired > max_scale:
        return max_scale
    return desired


def from_config(cfg: config.AutoscalingConfig) -> KPAPolicy:
    """The KPA baseline for a servectl config: its concurrency target, min and max;
    Knative's defaults for everything else."""
    for signal in cfg.signals:
        if signal.type is config.SignalType.CONCURRENCY:
            return KPAPolicy(
                KPAConfig(
                    target=signal.target,
                    min_scale=cfg.min_replicas,
                    max_scale=cfg.max_replicas,
                )
            )
    have = ", ".join(s.type.value for s in cfg.signals) or "none"
    raise ValueError(
        "the kpa baseline scales on concurrency only: add a concurrency signal "
        "(spec.autoscaling.signals: {type: concurrency, targetPerReplica: N}, N = in-flight "
        f"requests per replica) (have: {have})"
    )
