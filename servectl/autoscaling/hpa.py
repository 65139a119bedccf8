"""Kubernetes HPA v2, reproduced exactly: the reference baseline servectl is measured against.

What it reproduces (read from kubernetes/pkg/controller/podautoscaler, rewritten here):

- ``replica_calculator.go``: per metric, pods are grouped into counted, unready, missing
  (``groupPods``); the usage ratio is current/target with Kubernetes' integer
  arithmetic on milli-units (``metrics/utilization.go``); a ratio within the tolerance
  holds; otherwise ``ceil(ratio * counted pods)``. With missing or unready pods the
  ratio is recomputed conservatively (missing pods at 100 % of target on a scale-down,
  0 % on a scale-up; unready pods at 0 % on a scale-up) and the count holds if that
  flips the direction or lands within the tolerance (``GetResourceReplicas``,
  ``calcPlainMetricReplicas``, ``GetObjectMetricReplicas``).
- ``horizontal.go``: several metrics combine by max; if some metric is invalid and the
  valid ones would scale down, nothing scales (``computeReplicasForMetrics``); a current
  count outside [min, max] jumps to the bound; the first time an HPA is seen its
  current count seeds the recommendation history (``reconcileAutoscaler``,
  ``recordInitialRecommendation``); then ``behavior`` (``behavior.normalize``) or, with
  no ``behavior`` in the spec, the legacy normalization (``normalizeDesiredReplicas``).

Worked example (CPU, target 70 %): 4 ready pods using 0.9, 0.9, 0.8, 0.8 cores of a
1-core request -> utilization (3400 * 100) // 4000 = 85 %, ratio 85/70 = 1.214, outside
the 0.1 tolerance -> ceil(1.214 * 4) = 5 replicas.

Everything we cannot observe exactly (pod phase, readiness transition times, metric
windows) and how we map it onto the snapshot is listed in docs/baselines.md.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from servectl.autoscaling import behavior, config
from servectl.autoscaling.decision import Decision, Reason
from servectl.autoscaling.policy import State
from servectl.autoscaling.snapshot import PodSample, Snapshot

# kube-controller-manager flag defaults (horizontal-pod-autoscaler-*).
SYNC_PERIOD_S = 15.0  # --horizontal-pod-autoscaler-sync-period
TOLERANCE = 0.1  # --horizontal-pod-autoscaler-tolerance
CPU_INITIALIZATION_PERIOD_S = 300.0  # --horizontal-pod-autoscaler-cpu-initialization-period
INITIAL_READINESS_DELAY_S = 30.0  # --horizontal-pod-autoscaler-initial-readiness-delay
DOWNSCALE_STABILIZATION_S = 300.0  # --horizontal-pod-autoscaler-downscale-stabilization
# Not a Kubernetes setting: the window a metrics-server CPU sample covers (the interval
# between the two kubelet readings behind the rate; the kubelet resolution is 15 s).
CPU_METRIC_WINDOW_S = 15.0
# autoscaling.DefaultCPUUtilization: the metric an HPA gets when it lists none.
DEFAULT_CPU_UTILIZATION = 80


class PodField(enum.StrEnum):
    """A per-pod value a Pods metric can read from ``PodSample``."""

    CONCURRENCY = "concurrency"
    GPU_DUTY_CYCLE = "gpu_duty_cycle"


class ServiceSignal(enum.StrEnum):
    """A service-level value (``snapshot.Signals``) an Object/External metric can read."""

    CPU_UTILIZATION = "cpu_utilization"
    CPU_USAGE_CORES = "cpu_usage_cores"
    GPU_DUTY_CYCLE = "gpu_duty_cycle"
    RPS = "rps"
    CONCURRENCY = "concurrency"
    ERROR_RATE = "error_rate"
    LATENCY = "latency"  # at the metric's ``percentile``


class TargetType(enum.StrEnum):
    VALUE = "Value"
    AVERAGE_VALUE = "AverageValue"


@dataclass(frozen=True)
class ResourceMetric:
    """``type: Resource``, cpu, ``target.averageUtilization`` (percent of the request)."""

    target_utilization: int
    name: str = "cpu"


@dataclass(frozen=True)
class PodsMetric:
    """``type: Pods`` with ``target.averageValue``.

    ``source`` is either a per-pod field, or a service-level signal that we spread evenly
    over the ready pods (as if each ready pod reported its share; docs/baselines.md).
    """

    name: str
    target_average_value: float
    source: PodField | ServiceSignal
    percentile: float = 99.0


@dataclass(frozen=True)
class ObjectMetric:
    """``type: Object`` (or ``External``: the arithmetic is the same) on a service signal.

    ``Value`` targets compare the value itself (``GetObjectMetricReplicas``);
    ``AverageValue`` targets compare value / pods (``GetObjectPerPodMetricReplicas``).
    """

    name: str
    target: float
    signal: ServiceSignal
    target_type: TargetType = TargetType.VALUE
    percentile: float = 99.0
    kind: Literal["Object", "External"] = "Object"


MetricSpec = ResourceMetric | PodsMetric | ObjectMetric


@dataclass(frozen=True)
class HPAConfig:
    """One HorizontalPodAutoscaler plus the controller flags that shape it.

    ``behavior=None`` is an HPA whose spec has no ``behavior``: Kubernetes then runs its
    legacy normalization (``normalizeDesiredReplicas``: max over the downscale window,
    scale-up capped at max(2 x current, 4)), not the documented behavior defaults.
    """

    metrics: tuple[MetricSpec, ...] = (ResourceMetric(DEFAULT_CPU_UTILIZATION),)
    min_replicas: int = 1
    max_replicas: int = 10
    behavior: config.Behavior | None = field(default_factory=config.Behavior)
    tolerance: float = TOLERANCE
    cpu_initialization_period_s: float = CPU_INITIALIZATION_PERIOD_S
    initial_readiness_delay_s: float = INITIAL_READINESS_DELAY_S
    downscale_stabilization_s: float = DOWNSCALE_STABILIZATION_S
    cpu_metric_window_s: float = CPU_METRIC_WINDOW_S
    sync_period_s: float = SYNC_PERIOD_S

    def __post_init__(self) -> None:
        if not self.metrics:
            raise ValueError("HPAConfig.metrics: at least one metric is required")
        if self.min_replicas < 0 or self.max_replicas < max(self.min_replicas, 1):
            raise ValueError(
                f"HPAConfig: need 0 <= min_replicas <= max_replicas and max_replicas >= 1, "
                f"got min {self.min_replicas}, max {self.max_replicas}"
            )
        if self.tolerance < 0:
            raise ValueError(f"HPAConfig.tolerance must be >= 0, got {self.tolerance}")
        for spec in self.metrics:
            target = _target_of(spec)
            if not target > 0:
                raise ValueError(f"HPA metric {spec.name!r}: target must be > 0, got {target}")


def _target_of(spec: MetricSpec) -> float:
    if isinstance(spec, ResourceMetric):
        return spec.target_utilization
    if isinstance(spec, PodsMetric):
        return spec.target_average_value
    return spec.target


class _MetricError(Exception):
    """A metric could not be computed (Kubernetes: the metric is invalid this cycle)."""


@dataclass(frozen=True)
class _Proposal:
    replicas: int
    held: bool  # the calculator kept currentReplicas (tolerance or a direction flip)
    detail: str


@dataclass(frozen=True)
class _Pod:
    """A pod as the replica calculator sees it; ``transition`` approximates the Ready
    condition's lastTransitionTime (docs/baselines.md)."""

    name: str
    ready: bool
    start_time: float
    transition: float
    sample: PodSample | None  # None: synthesized from replica counts (no pods reported)


#: The largest milli-value: Kubernetes keeps quantities' milli-values in an int64.
_MAX_MILLI = 2**63 - 1


def _milli(value: float) -> int:
    """Quantity.MilliValue(): milli-units, rounded up (float noise removed first);
    saturated at the int64 range (a value of 9.2e15 units or more is that big)."""
    scaled = round(value * 1000.0, 6)
    if not scaled < _MAX_MILLI:  # also +inf (a huge, finite value times 1000)
        return _MAX_MILLI
    if not scaled > -_MAX_MILLI:
        return -_MAX_MILLI
    return math.ceil(scaled)


def _is_within(ratio: float, tolerance: float) -> bool:
    """``Tolerances.isWithin``: the band is inclusive on both ends."""
    return (1.0 - tolerance) <= ratio <= (1.0 + tolerance)


class HPAPolicy:
    """The HPA controller for one scale target; state is the controller's memory."""

    def __init__(self, cfg: HPAConfig | None = None) -> None:
        self.config = cfg or HPAConfig()

    @property
    def name(self) -> str:
        return "hpa"

    @property
    def period_s(self) -> float:
        return self.config.sync_period_s

    def initial_state(self) -> State:
        return {"behavior": behavior.BehaviorState().to_dict(), "pods": {}}

    # ------------------------------------------------------------------ one sync

    def decide(self, snap: Snapshot, state: State) -> tuple[Decision, State]:
        cfg = self.config
        now = snap.time
        current = snap.replicas.current
        history = behavior.BehaviorState.from_dict(state.get("behavior"))
        pod_memory = _track_readiness(snap, state.get("pods") or {})
        if not history.recommendations:
            # recordInitialRecommendation: the count found on first sight is a recommendation.
            history = behavior.BehaviorState(((now, current),), history.scale_events)

        def done(decision: Decision, new_history: behavior.BehaviorState) -> tuple[Decision, State]:
            return decision, {"behavior": new_history.to_dict(), "pods": pod_memory}

        if current == 0 and cfg.min_replicas != 0:
            detail = "scaling is disabled since the replica count of the target is zero"
            return done(Decision(0, Reason.SIGNAL, None, detail, 0), history)
        if current > cfg.max_replicas or current < cfg.min_replicas:
            bound = cfg.max_replicas if current > cfg.max_replicas else cfg.min_replicas
            reason = Reason.AT_MAX if current > cfg.max_replicas else Reason.AT_MIN
            side = "above maxReplicas" if reason is Reason.AT_MAX else "below minReplicas"
            if cfg.behavior is not None:  # storeScaleEvent runs only with a behavior
                history = behavior.BehaviorState(
                    history.recommendations, (*history.scale_events, (now, bound - current))
                )
            detail = f"current {current} {side} {bound}: set {bound} without computing metrics"
            return done(Decision(bound, reason, None, detail, bound), history)

        pods = _pod_views(snap, pod_memory)
        proposals: dict[str, _Proposal] = {}
        invalid: list[str] = []
        desired, winner = 0, None
        for spec in cfg.metrics:
            try:
                proposal = self._compute(spec, snap, pods)
            except _MetricError as err:
                invalid.append(f"{spec.name}: {err}")
                continue
            proposals[spec.name] = proposal
            if desired == 0 or proposal.replicas > desired:
                desired, winner = proposal.replicas, spec.name
        raw = {name: float(p.replicas) for name, p in proposals.items()}
        if invalid and (len(invalid) == len(cfg.metrics) or desired < current):
            what = "all metrics invalid" if not proposals else "some metrics invalid"
            detail = f"{what} ({'; '.join(invalid)}): holding {current}"
            if proposals:
                detail += f" (valid metrics alone would scale down to {desired})"
            decision = Decision(current, Reason.METRICS_MISSING, None, detail, current, raw)
            return done(decision, history)

        assert winner is not None  # at least one metric was valid
        won = proposals[winner]
        if cfg.behavior is not None:
            norm = behavior.normalize(
                desired, current, now, cfg.min_replicas, cfg.max_replicas, cfg.behavior, history
            )
        else:
            norm = self._normalize_legacy(desired, current, now, history)
        result = norm.replicas
        if norm.reason is not None:
            why = norm.reason
        elif won.held and result == current:
            why = Reason.WITHIN_TOLERANCE
        else:
            why = Reason.SIGNAL
        detail = won.detail
        if len(proposals) > 1:
            others = ", ".join(f"{n} {p.replicas}" for n, p in proposals.items() if n != winner)
            detail += f"; max over metrics ({others})"
        if invalid:
            detail += f"; scaling on valid metrics only ({'; '.join(invalid)})"
        if result != desired:
            detail += f"; {why.value.lower()}: {desired} -> {result}"
        return done(Decision(result, why, winner, detail, result, raw), norm.state)

    # ------------------------------------------------------------------ normalization

    def _normalize_legacy(
        self, desired: int, current: int, now: float, history: behavior.BehaviorState
    ) -> behavior.Normalized:
        """``normalizeDesiredReplicas``: the path of an HPA without ``behavior``."""
        cfg = self.config
        cutoff = now - cfg.downscale_stabilization_s
        # stabilizeRecommendation: a recommendation counts unless strictly older than cutoff.
        window = [rec for when, rec in history.recommendations if when >= cutoff]
        stabilized = max([desired, *window])
        reason: Reason | None = Reason.STABILIZING if stabilized != desired else None
        # convertDesiredReplicasWithRules / calculateScaleUpLimit.
        scale_up_limit = int(max(2.0 * current, 4.0))
        if cfg.max_replicas > scale_up_limit:
            maximum, limited_by = scale_up_limit, Reason.RATE_LIMITED_UP
        else:
            maximum, limited_by = cfg.max_replicas, Reason.AT_MAX
        result = stabilized
        if stabilized < cfg.min_replicas:
            result, reason = cfg.min_replicas, Reason.AT_MIN
        elif stabilized > maximum:
            result, reason = maximum, limited_by
        kept = tuple(r for r in history.recommendations if r[0] >= cutoff)
        return behavior.Normalized(
            result, reason, behavior.BehaviorState((*kept, (now, desired)), ())
        )

    # ------------------------------------------------------------------ per metric

    def _compute(self, spec: MetricSpec, snap: Snapshot, pods: list[_Pod]) -> _Proposal:
        if isinstance(spec, ResourceMetric):
            return self._resource(spec, snap, pods)
        if isinstance(spec, PodsMetric):
            return self._pods(spec, snap, pods)
        return self._object(spec, snap, pods)

    def _resource(self, spec: ResourceMetric, snap: Snapshot, pods: list[_Pod]) -> _Proposal:
        """``GetResourceReplicas`` for cpu utilization."""
        if not pods:
            raise _MetricError("no pods returned by selector while calculating replica count")
        samples: dict[str, int] = {}
        requests: dict[str, int] = {}
        for pod in pods:
            if pod.sample is None:  # synthesized from service-level utilization
                requests[pod.name] = 1000
                if pod.ready and snap.signals.cpu_utilization is not None:
                    samples[pod.name] = _milli(snap.signals.cpu_utilization / 100.0)
            else:
                requests[pod.name] = _milli(pod.sample.cpu_request_cores)
                if pod.sample.cpu_usage_cores is not None:
                    samples[pod.name] = _milli(pod.sample.cpu_usage_cores)
        counted, unready, missing = self._group(pods, samples, snap, cpu=True)
        if not counted:
            raise _MetricError("did not receive metrics for targeted pods (pods might be unready)")
        target = spec.target_utilization
        usage_ratio, utilization = _utilization_ratio(counted, requests, target)
        what = f"cpu {utilization}% of request vs target {target}%"

        def missing_value(name: str, scale_down: bool) -> int:
            # A scale-down counts a missing pod at max(100 %, target) of its request.
            return requests[name] * max(100, target) // 100 if scale_down else 0

        def rerun(metrics: dict[str, int]) -> float:
            return _utilization_ratio(metrics, requests, target)[0]

        return self._conservative(
            what, usage_ratio, counted, unready, missing, missing_value, rerun, snap
        )

    def _pods(self, spec: PodsMetric, snap: Snapshot, pods: list[_Pod]) -> _Proposal:
        """``GetMetricReplicas`` / ``calcPlainMetricReplicas`` (no readiness rules)."""
        if not pods:
            raise _MetricError("no pods returned by selector while calculating replica count")
        samples = _pods_samples(spec, snap, pods)
        counted, unready, missing = self._group(pods, samples, snap, cpu=False)
        if not counted:
            raise _MetricError("did not receive metrics for targeted pods (pods might be unready)")
        target = _milli(spec.target_average_value)
        usage_ratio, usage = _usage_ratio(counted, target)
        what = (
            f"{spec.name} {usage / 1000:g} per pod vs target {spec.target_average_value:g}"
            f" (ratio {usage_ratio:.3f})"
        )

        def missing_value(_name: str, scale_down: bool) -> int:
            return target if scale_down else 0

        def rerun(metrics: dict[str, int]) -> float:
            return _usage_ratio(metrics, target)[0]

        return self._conservative(
            what, usage_ratio, counted, unready, missing, missing_value, rerun, snap
        )

    def _conservative(
        self,
        what: str,
        usage_ratio: float,
        counted: dict[str, int],
        unready: set[str],
        missing: set[str],
        missing_value: Callable[[str, bool], int],
        rerun: Callable[[dict[str, int]], float],
        snap: Snapshot,
    ) -> _Proposal:
        """The shared tail of ``GetResourceReplicas`` and ``calcPlainMetricReplicas``."""
        tol = self.config.tolerance
        current = snap.replicas.current
        scale_up_with_unready = bool(unready) and usage_ratio > 1.0
        if not scale_up_with_unready and not missing:
            if _is_within(usage_ratio, tol):
                return _Proposal(current, True, f"{what}: within {tol:g} of 1.0, keep {current}")
            wanted = math.ceil(usage_ratio * len(counted))
            return _Proposal(wanted, False, f"{what}: ceil({usage_ratio:.3f} x {len(counted)})")
        metrics = dict(counted)
        if missing and usage_ratio != 1.0:
            for name in missing:
                metrics[name] = missing_value(name, usage_ratio < 1.0)
        if scale_up_with_unready:
            for name in unready:
                metrics[name] = 0
        new_ratio = rerun(metrics)
        note = (
            f"{what}; rebalanced with {len(missing)} missing and "
            f"{len(unready) if scale_up_with_unready else 0} unready pods -> ratio {new_ratio:.3f}"
        )
        flips = (usage_ratio < 1.0 < new_ratio) or (new_ratio < 1.0 < usage_ratio)
        if _is_within(new_ratio, tol) or flips:
            return _Proposal(current, True, f"{note}: keep {current}")
        wanted = math.ceil(new_ratio * len(metrics))
        if (new_ratio < 1.0 and wanted > current) or (new_ratio > 1.0 and wanted < current):
            return _Proposal(current, True, f"{note}: {wanted} would reverse direction, keep")
        return _Proposal(wanted, False, f"{note}: ceil({new_ratio:.3f} x {len(metrics)})")

    def _object(self, spec: ObjectMetric, snap: Snapshot, pods: list[_Pod]) -> _Proposal:
        """``GetObjectMetricReplicas`` / ``GetExternalMetricReplicas`` (Value) and the
        per-pod variants (AverageValue)."""
        tol = self.config.tolerance
        value = _signal_value(snap, spec.signal, spec.percentile)
        if value is None:
            raise _MetricError(f"unable to get {spec.kind.lower()} metric {spec.signal.value}")
        usage, target = _milli(value), _milli(spec.target)
        what = f"{spec.name} {value:g} vs target {spec.target:g}"
        if spec.target_type is TargetType.AVERAGE_VALUE:
            status_replicas = len(pods) if snap.pods else snap.replicas.current
            denominator = target * status_replicas
            if denominator == 0:
                ratio = math.inf if usage > 0 else math.nan
            else:
                ratio = usage / denominator
            if _is_within(ratio, tol):
                return _Proposal(status_replicas, True, f"{what} per pod: within {tol:g}, keep")
            wanted = math.ceil(usage / target)
            return _Proposal(wanted, False, f"{what} per pod: ceil({usage} / {target})")
        ratio = usage / target
        current = snap.replicas.current
        if current == 0:  # scale from zero ignores pods and tolerance
            return _Proposal(math.ceil(ratio), False, f"{what}: ceil({ratio:.3f}) from zero")
        if _is_within(ratio, tol):
            return _Proposal(current, True, f"{what} (ratio {ratio:.3f}): within {tol:g}, keep")
        # getReadyPodsCount; with current > 0 there is always a pod list (reported or
        # synthesized), so its "no pods" error cannot happen here.
        ready = sum(1 for pod in pods if pod.ready)
        wanted = math.ceil(ratio * ready)
        return _Proposal(wanted, False, f"{what}: ceil({ratio:.3f} x {ready} ready)")

    def _group(
        self, pods: list[_Pod], samples: Mapping[str, int], snap: Snapshot, *, cpu: bool
    ) -> tuple[dict[str, int], set[str], set[str]]:
        """``groupPods``: counted samples, unready pods, pods missing a sample.

        No pod phase in a snapshot: a pod that is not ready and has no sample stands for
        a Pending pod (unready). CPU adds the readiness rules of the initialization period.
        """
        cfg = self.config
        now = snap.time
        counted: dict[str, int] = {}
        unready: set[str] = set()
        missing: set[str] = set()
        for pod in pods:
            value = samples.get(pod.name)
            if value is None:
                (missing if pod.ready else unready).add(pod.name)
                continue
            if cpu:
                if pod.start_time + cfg.cpu_initialization_period_s > now:
                    # Still initializing: ignore the sample unless it was taken a full
                    # metric window after the pod turned ready.
                    sampled_at = now - snap.signals.age_s
                    skip = not pod.ready or sampled_at < pod.transition + cfg.cpu_metric_window_s
                else:
                    # Past initialization: ignore only a pod that has never been ready.
                    skip = (
                        not pod.ready
                        and pod.start_time + cfg.initial_readiness_delay_s > pod.transition
                    )
                if skip:
                    unready.add(pod.name)
                    continue
            counted[pod.name] = value
        return counted, unready, missing


# ---------------------------------------------------------------------- helpers


def _utilization_ratio(
    metrics: Mapping[str, int], requests: Mapping[str, int], target: int
) -> tuple[float, int]:
    """``GetResourceUtilizationRatio``: integer percent of the summed requests."""
    metrics_total = sum(metrics.values())
    requests_total = sum(requests[name] for name in metrics)
    if requests_total == 0:
        raise _MetricError("no metrics returned matched known pods (zero CPU requests)")
    utilization = (metrics_total * 100) // requests_total
    return utilization / target, utilization


def _usage_ratio(metrics: Mapping[str, int], target: int) -> tuple[float, int]:
    """``GetMetricUsageRatio``: integer average of milli-values over the target."""
    usage = sum(metrics.values()) // len(metrics)
    return usage / target, usage


def _signal_value(snap: Snapshot, signal: ServiceSignal, percentile: float) -> float | None:
    if signal is ServiceSignal.LATENCY:
        return snap.signals.latency(percentile)
    value: float | None = getattr(snap.signals, signal.value)
    return value


def _pods_samples(spec: PodsMetric, snap: Snapshot, pods: list[_Pod]) -> dict[str, int]:
    samples: dict[str, int] = {}
    if isinstance(spec.source, PodField):
        for pod in pods:
            if pod.sample is not None:
                value = getattr(pod.sample, spec.source.value)
                if value is not None:
                    samples[pod.name] = _milli(value)
        return samples
    total = _signal_value(snap, spec.source, spec.percentile)
    ready = [pod for pod in pods if pod.ready]
    if total is None or not ready:
        return samples
    share = _milli(total / len(ready))
    return {pod.name: share for pod in ready}


def _track_readiness(snap: Snapshot, memory: Mapping[str, Any]) -> dict[str, list[Any]]:
    """Remember each pod's readiness and since when (our lastTransitionTime).

    First sight: since the pod's start (a not-ready pod's condition dates from its
    creation). Afterwards: the first sync that saw the change (late by < one period).
    """
    tracked: dict[str, list[Any]] = {}
    for pod in snap.pods:
        before = memory.get(pod.name)
        if before is None:
            tracked[pod.name] = [pod.ready, pod.start_time]
        elif bool(before[0]) != pod.ready:
            tracked[pod.name] = [pod.ready, snap.time]
        else:
            tracked[pod.name] = [pod.ready, float(before[1])]
    return tracked


def _pod_views(snap: Snapshot, memory: Mapping[str, list[Any]]) -> list[_Pod]:
    if snap.pods:
        return [_Pod(p.name, p.ready, p.start_time, float(memory[p.name][1]), p) for p in snap.pods]
    # No pods reported: ``ready`` long-running ready pods and the rest pending.
    ready = min(snap.replicas.ready, snap.replicas.current)
    return [
        _Pod(f"replica-{i}", i < ready, -math.inf, -math.inf, None)
        for i in range(snap.replicas.current)
    ]


# ---------------------------------------------------------------------- from servectl config


def metric_for(signal: config.SignalTarget) -> MetricSpec:
    """The HPA metric a servectl signal target becomes (docs/baselines.md)."""
    if signal.type is config.SignalType.CPU:
        return ResourceMetric(target_utilization=round(signal.target))
    if signal.type is config.SignalType.CONCURRENCY:
        return PodsMetric("concurrency", signal.target, PodField.CONCURRENCY)
    if signal.type is config.SignalType.GPU:
        return PodsMetric("gpu", signal.target, PodField.GPU_DUTY_CYCLE)
    if signal.type is config.SignalType.RPS:
        return PodsMetric("rps", signal.target, ServiceSignal.RPS)
    return ObjectMetric(
        "latency", signal.target, ServiceSignal.LATENCY, percentile=signal.percentile
    )


def from_config(cfg: config.AutoscalingConfig) -> HPAPolicy:
    """The HPA baseline for a servectl config: same targets, min and max; Kubernetes'
    documented defaults for everything else (behavior, tolerance, periods)."""
    return HPAPolicy(
        HPAConfig(
            metrics=tuple(metric_for(s) for s in cfg.signals),
            min_replicas=cfg.min_replicas,
            max_replicas=cfg.max_replicas,
            behavior=config.Behavior(),
            tolerance=TOLERANCE,
        )
    )
