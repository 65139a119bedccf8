"""The ``hpa`` baseline against Kubernetes' HPA v2 (replica_calculator.go, horizontal.go).

Each test names the Go function or the docs section ("Horizontal Pod Autoscaling",
kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/) it checks. Pods are
started long before ``NOW`` (past the 300 s CPU initialization period) unless a test
says otherwise; ``warm()`` is controller memory with nothing in any window, so a test
sees the replica calculator's answer without the first-sight recommendation.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from servectl.autoscaling import config, hpa
from servectl.autoscaling.decision import Decision, Reason
from servectl.autoscaling.policy import State
from servectl.autoscaling.snapshot import PodSample, Replicas, Signals, Snapshot
from servectl.testing import drive

NOW = 10_000.0


def pod(
    name: str,
    cpu: float | None = None,
    *,
    ready: bool = True,
    start: float = 0.0,
    request: float = 1.0,
    concurrency: float | None = None,
    gpu: float | None = None,
) -> PodSample:
    return PodSample(name, ready, start, cpu, request, concurrency, gpu)


def cpu_pods(*usage: float | None) -> tuple[PodSample, ...]:
    return tuple(pod(f"p{i}", u) for i, u in enumerate(usage))


def pending(n: int, first: int = 90) -> tuple[PodSample, ...]:
    """Not ready, no sample yet: what a Pending pod looks like in a snapshot."""
    return tuple(pod(f"p{first + i}", ready=False, start=NOW - 20) for i in range(n))


def snap(
    pods: tuple[PodSample, ...],
    *,
    t: float = NOW,
    current: int | None = None,
    latency_ms: dict[str, float] | None = None,
    **signals: Any,
) -> Snapshot:
    current = len(pods) if current is None else current
    ready = sum(1 for p in pods if p.ready)
    return Snapshot(
        time=t,
        replicas=Replicas(current=current, ready=ready, min=1, max=100),
        signals=Signals(latency_ms=latency_ms or {}, **signals),
        pods=pods,
    )


def policy(*metrics: hpa.MetricSpec, **kw: Any) -> hpa.HPAPolicy:
    kw.setdefault("max_replicas", 100)
    return hpa.HPAPolicy(hpa.HPAConfig(metrics=metrics, **kw))


def cpu(target: int, **kw: Any) -> hpa.HPAPolicy:
    return policy(hpa.ResourceMetric(target), **kw)


def warm(t: float = NOW - 1_000) -> State:
    """Memory of an HPA seen long ago: nothing left in any window."""
    return {"behavior": {"recommendations": [[t, 1]], "scale_events": []}, "pods": {}}


def decide(p: hpa.HPAPolicy, s: Snapshot, state: State | None = None) -> Decision:
    return p.decide(s, warm() if state is None else state)[0]


# ------------------------------------------------------------------ the ratio


@pytest.mark.parametrize(
    ("usage", "expected", "reason"),
    [
        # GetResourceReplicas + Tolerances.isWithin; docs "Algorithm details": skip
        # scaling when the ratio is within the 0.1 tolerance.
        pytest.param(0.63, 4, Reason.WITHIN_TOLERANCE, id="1.05-holds"),
        pytest.param(0.72, 5, Reason.SIGNAL, id="1.2-scales"),
        # The band is inclusive: 66/60 is exactly 1.1 in float64 and holds.
        pytest.param(0.66, 4, Reason.WITHIN_TOLERANCE, id="1.1-edge-holds"),
        pytest.param(0.67, 5, Reason.SIGNAL, id="1.117-scales"),
        pytest.param(0.54, 4, Reason.WITHIN_TOLERANCE, id="0.9-edge-holds"),
        pytest.param(0.45, 3, Reason.SIGNAL, id="0.75-scales-down"),
    ],
)
def test_tolerance(usage: float, expected: int, reason: Reason) -> None:
    decision = decide(cpu(60), snap(cpu_pods(usage, usage, usage, usage)))
    assert (decision.replicas, decision.reason, decision.signal) == (expected, reason, "cpu")


@pytest.mark.parametrize(
    ("pods", "target", "expected"),
    [
        # desiredReplicas = ceil(ratio x counted pods), docs "Algorithm details".
        pytest.param(cpu_pods(0.9, 0.9, 0.8, 0.8), 70, 5, id="worked-example"),
        pytest.param(cpu_pods(1.0, 1.0), 50, 4, id="double"),
        # GetResourceUtilizationRatio sums usage and requests: 2000m of 3000m = 66 %.
        pytest.param((pod("a", 1.0), pod("b", 1.0, request=2.0)), 50, 3, id="summed-requests"),
        # utilization = (usage * 100) / requests in integers: 0.7749 cores -> 77 %,
        # 77/70 = 1.1 -> within tolerance (77.49/70 in floats would have scaled).
        pytest.param(cpu_pods(0.7749, 0.7749), 70, 2, id="integer-percent"),
    ],
)
def test_ratio_formula(pods: tuple[PodSample, ...], target: int, expected: int) -> None:
    assert decide(cpu(target), snap(pods)).replicas == expected


# ------------------------------------------------------------------ missing and unready


@pytest.mark.parametrize(
    ("pods", "target", "proposal"),
    [
        # GetResourceReplicas: on a scale-up a missing pod counts as 0 % of its request:
        # 3 x 100 % + 0 over 4 requests = 75 %, 75/50 -> ceil(1.5 x 4) = 6.
        pytest.param(cpu_pods(1.0, 1.0, 1.0, None), 50, 6, id="up-missing-as-zero"),
        # ... and if that reverses the direction (90/60 up, rebalanced 45/60 down) the
        # count stays; counting only the ready pods would have said ceil(1.5 x 2) = 3.
        pytest.param(cpu_pods(0.9, 0.9, None, None), 60, 4, id="up-flip-holds"),
        # On a scale-down a missing pod counts as 100 % of its request:
        # (300m + 1000m) / 4000m = 32 % -> ceil(0.64 x 4) = 3 (ready-only: 1).
        pytest.param(cpu_pods(0.1, 0.1, 0.1, None), 50, 3, id="down-missing-as-full"),
        # ... or as the target when the target is above 100 % (fallbackUtilization).
        pytest.param(cpu_pods(0.3, 0.3, None, None), 150, 3, id="down-missing-as-target"),
    ],
)
def test_missing_pods(pods: tuple[PodSample, ...], target: int, proposal: int) -> None:
    decision = decide(cpu(target), snap(pods))
    assert decision.proposals["cpu"] == proposal


def test_missing_pods_plain_metric_scale_down() -> None:
    # calcPlainMetricReplicas: on a scale-down a missing pod counts at exactly the target:
    # (3 x 1 + 5) / 4 = 2 per pod vs 5 -> ceil(0.4 x 4) = 2 (ready-only: 1).
    pods = (*(pod(f"p{i}", concurrency=1.0) for i in range(3)), pod("p3"))
    metric = hpa.PodsMetric("concurrency", 5.0, hpa.PodField.CONCURRENCY)
    assert decide(policy(metric), snap(pods)).proposals["concurrency"] == 2


@pytest.mark.parametrize(
    ("pods", "target", "proposal"),
    [
        # GetResourceReplicas (scaleUpWithUnready): unready pods count as 0 % on a
        # scale-up: 3000m / 4000m = 75 %, 75/50 -> 6.
        pytest.param(cpu_pods(1.0, 1.0, 1.0) + pending(1), 50, 6, id="up-unready-as-zero"),
        pytest.param(cpu_pods(0.9, 0.9) + pending(2), 60, 4, id="up-unready-flip-holds"),
        # On a scale-down unready pods are left out: ceil(0.2 x 3) = 1.
        pytest.param(cpu_pods(0.1, 0.1, 0.1) + pending(1), 50, 1, id="down-unready-ignored"),
    ],
)
def test_unready_pods(pods: tuple[PodSample, ...], target: int, proposal: int) -> None:
    assert decide(cpu(target), snap(pods)).proposals["cpu"] == proposal


# ------------------------------------------------------------------ CPU initialization


def test_cpu_sample_of_initializing_unready_pod_is_ignored() -> None:
    # groupPods (cpu): within --horizontal-pod-autoscaler-cpu-initialization-period (5 m)
    # a pod that is not ready is unready, its (start-up) CPU ignored. Docs "Algorithm
    # details": pods still initializing are set aside.
    loading = pod("p3", 2.0, ready=False, start=NOW - 100)
    pods = (*cpu_pods(0.5, 0.5, 0.5), loading)
    decision = decide(cpu(50), snap(pods))
    assert (decision.replicas, decision.reason) == (4, Reason.WITHIN_TOLERANCE)
    # Pods metrics have no readiness rules: the same pod's concurrency counts.
    busy = tuple(pod(p.name, ready=p.ready, start=p.start_time, concurrency=4.0) for p in pods)
    metric = hpa.PodsMetric("concurrency", 2.0, hpa.PodField.CONCURRENCY)
    assert decide(policy(metric), snap(busy)).proposals["concurrency"] == 8


def test_cpu_sample_right_after_readiness_is_ignored() -> None:
    # groupPods (cpu): within the initialization period a ready pod's sample counts only
    # if taken a full metric window after it turned ready; we see the transition at the
    # sync that observes it.
    p = cpu(50)
    starting = (*cpu_pods(0.5, 0.5, 0.5), pod("p3", 2.0, ready=False, start=NOW - 100))
    _, state = p.decide(snap(starting), warm())
    now_ready = (*cpu_pods(0.5, 0.5, 0.5), pod("p3", 2.0, start=NOW - 100))
    just_ready, state = p.decide(snap(now_ready, t=NOW + 15), state)
    assert just_ready.replicas == 4  # 2.0 cores ignored: ratio 1.0 on the other three
    later, _ = p.decide(snap(now_ready, t=NOW + 30), state)
    assert later.replicas == 7  # (1500m + 2000m) / 4000m = 87 %, ceil(1.74 x 4) = 7


def test_ready_pod_in_initialization_period_counts() -> None:
    # First seen already ready 100 s after start: taken as ready since its start, so its
    # sample (now) is more than one metric window after the transition and counts.
    pods = (*cpu_pods(0.5, 0.5, 0.5), pod("p3", 2.0, start=NOW - 100))
    assert decide(cpu(50), snap(pods)).replicas == 7


def test_after_initialization_only_never_ready_pods_are_ignored() -> None:
    # groupPods (cpu), past the initialization period: a not-ready pod is ignored only if
    # it never became ready (its last transition within 30 s of start,
    # --horizontal-pod-autoscaler-initial-readiness-delay).
    p = cpu(50)
    failing = (*cpu_pods(0.5, 0.5, 0.5), pod("p3", 2.0, ready=False))
    never_ready = p.decide(snap(failing), warm())[0]
    assert never_ready.replicas == 4  # ignored: ratio 1.0 on three pods
    # The same pod, seen ready at the previous sync, went unready: its CPU counts.
    _, state = p.decide(snap((*cpu_pods(0.5, 0.5, 0.5), pod("p3", 2.0))), warm())
    was_ready, _ = p.decide(snap(failing, t=NOW + 15), state)
    assert was_ready.replicas == 7


# ------------------------------------------------------------------ several metrics


CONCURRENCY = hpa.PodsMetric("concurrency", 2.0, hpa.PodField.CONCURRENCY)
LATENCY = hpa.ObjectMetric("latency", 150.0, hpa.ServiceSignal.LATENCY, percentile=99.0)


def busy_pods(cpu_each: float, conc_each: float, n: int = 4) -> tuple[PodSample, ...]:
    return tuple(pod(f"p{i}", cpu_each, concurrency=conc_each) for i in range(n))


def test_multiple_metrics_take_the_max() -> None:
    # computeReplicasForMetrics: the largest proposal wins and names the metric.
    p = policy(hpa.ResourceMetric(60), CONCURRENCY)
    decision = decide(p, snap(busy_pods(0.72, 4.0)))
    assert (decision.replicas, decision.signal) == (8, "concurrency")
    assert decision.proposals == {"cpu": 5.0, "concurrency": 8.0}


@pytest.mark.parametrize(
    ("cpu_each", "latency", "expected", "reason", "signal"),
    [
        # computeReplicasForMetrics: an invalid metric blocks a scale-down...
        pytest.param(0.15, None, 4, Reason.METRICS_MISSING, None, id="no-down-on-partial"),
        # ... but the valid metrics may still scale up...
        pytest.param(0.9, None, 6, Reason.SIGNAL, "cpu", id="up-on-partial"),
        # ... and with every metric valid the max wins as usual.
        pytest.param(0.15, {"p99": 30.0}, 1, Reason.SIGNAL, "cpu", id="all-valid"),
    ],
)
def test_invalid_metric_rule(
    cpu_each: float,
    latency: dict[str, float] | None,
    expected: int,
    reason: Reason,
    signal: str | None,
) -> None:
    p = policy(hpa.ResourceMetric(60), LATENCY)
    decision = decide(p, snap(cpu_pods(*[cpu_each] * 4), latency_ms=latency))
    assert (decision.replicas, decision.reason, decision.signal) == (expected, reason, signal)


def test_all_metrics_invalid_holds() -> None:
    # computeReplicasForMetrics: every metric invalid -> error, no scale at all.
    decision = decide(policy(hpa.ResourceMetric(60), LATENCY), snap(cpu_pods(None, None)))
    assert (decision.replicas, decision.reason) == (2, Reason.METRICS_MISSING)
    assert "all metrics invalid" in decision.detail


# ------------------------------------------------------------------ behavior


def cpu_load(total_cores: float) -> Callable[[float, int], Snapshot]:
    """Snapshots where ``total_cores`` of CPU spread over whatever runs."""

    def at(t: float, current: int) -> Snapshot:
        per_pod = total_cores / current
        return snap(tuple(pod(f"p{i}", per_pod) for i in range(current)), t=t)

    return at


def test_scale_down_waits_for_the_stabilization_window() -> None:
    # Docs "Stabilization window" (default 300 s down): recommendations of 10 made up to
    # NOW+45 keep the count at 10 until NOW+345, when the last of them is 300 s old.
    load = {t: 6.0 if t < NOW + 60 else 1.2 for t in range(int(NOW), int(NOW) + 600, 15)}

    def at(t: float, current: int) -> Snapshot:
        return cpu_load(load[int(t)])(t, current)

    timeline = drive(cpu(60), at, start=NOW, ticks=30, initial=10)
    counts = {t: d.replicas for t, d in timeline}
    assert all(counts[NOW + 15 * i] == 10 for i in range(23))
    assert counts[NOW + 330] == 10
    assert timeline[22][1].reason is Reason.STABILIZING
    assert counts[NOW + 345] == 2


def test_first_sight_counts_as_a_recommendation() -> None:
    # recordInitialRecommendation: a fresh controller does not scale down at once.
    p = cpu(60)
    fresh = p.decide(snap(cpu_pods(0.15, 0.15, 0.15, 0.15)), p.initial_state())[0]
    assert (fresh.replicas, fresh.reason) == (4, Reason.STABILIZING)


@pytest.mark.parametrize(
    ("rules", "start", "expected"),
    [
        # Docs "Default behavior": up max(100 % / 15 s, 4 pods / 15 s).
        pytest.param(config.hpa_default_scale_up(), 1, [5, 10, 20, 40], id="default-max"),
        pytest.param(
            config.ScalingRules(
                0.0,
                (
                    config.RatePolicy(config.RateType.PERCENT, 100, 15.0),
                    config.RatePolicy(config.RateType.PODS, 4, 15.0),
                ),
                config.SelectPolicy.MIN,
            ),
            1,
            [2, 4, 8, 12],
            id="select-min",
        ),
        pytest.param(
            config.ScalingRules(0.0, (), config.SelectPolicy.DISABLED), 3, [3, 3, 3, 3], id="off"
        ),
        # Docs "Scaling policies": a 60 s period budgets the pods added in the last 60 s.
        pytest.param(
            config.ScalingRules(0.0, (config.RatePolicy(config.RateType.PODS, 4, 60.0),)),
            1,
            [5, 5, 5, 5, 9],
            id="pods-per-60s",
        ),
    ],
)
def test_scale_up_rate_policies(
    rules: config.ScalingRules, start: int, expected: list[int]
) -> None:
    p = cpu(50, behavior=config.Behavior(scale_up=rules), max_replicas=60)
    timeline = drive(p, cpu_load(40.0), start=NOW, ticks=len(expected), initial=start)
    assert [d.replicas for _, d in timeline] == expected


def test_scale_down_disabled() -> None:
    # selectPolicy: Disabled turns a direction off (calculateScaleDownLimitWithBehaviors).
    off = config.ScalingRules(0.0, (), config.SelectPolicy.DISABLED)
    p = cpu(50, behavior=config.Behavior(scale_down=off))
    decision = decide(p, snap(cpu_pods(0.1, 0.1, 0.1, 0.1)))
    assert (decision.replicas, decision.reason) == (4, Reason.RATE_LIMITED_DOWN)


@pytest.mark.parametrize(
    ("usage", "lo", "hi", "expected", "reason"),
    [
        # convertDesiredReplicasWithRules: TooManyReplicas when max <= max(2 x current, 4)...
        pytest.param(1.0, 1, 5, 5, Reason.AT_MAX, id="max"),
        # ... and TooFewReplicas below minReplicas.
        pytest.param(0.05, 3, 10, 3, Reason.AT_MIN, id="min"),
    ],
)
def test_legacy_bounds(usage: float, lo: int, hi: int, expected: int, reason: Reason) -> None:
    p = cpu(50, behavior=None, min_replicas=lo, max_replicas=hi)
    decision = decide(p, snap(cpu_pods(*[usage] * 4)))
    assert (decision.replicas, decision.reason) == (expected, reason)


def test_legacy_normalization_without_behavior() -> None:
    # normalizeDesiredReplicas (spec.behavior unset): scale-up capped at
    # max(2 x current, 4) per sync, not the behavior defaults' max(2 x, +4).
    p = cpu(50, behavior=None)
    timeline = drive(p, cpu_load(40.0), start=NOW, ticks=4, initial=1)
    assert [d.replicas for _, d in timeline] == [4, 8, 16, 32]
    assert timeline[0][1].reason is Reason.RATE_LIMITED_UP
    # stabilizeRecommendation: max over the 300 s window, boundary included.
    state = p.decide(snap(cpu_pods(0.9, 0.9)), warm())[1]  # recommends 4 at NOW
    held = p.decide(snap(cpu_pods(0.1, 0.1), t=NOW + 300), state)[0]
    assert (held.replicas, held.reason) == (4, Reason.STABILIZING)
    released = p.decide(snap(cpu_pods(0.1, 0.1), t=NOW + 301), state)[0]
    assert released.replicas == 1


@pytest.mark.parametrize(
    ("current", "usage", "lo", "hi", "expected", "reason"),
    [
        # reconcileAutoscaler: current outside [min, max] goes to the bound, no metrics.
        pytest.param(12, None, 1, 10, 10, Reason.AT_MAX, id="current-above-max"),
        pytest.param(1, None, 2, 10, 2, Reason.AT_MIN, id="current-below-min"),
        # convertDesiredReplicasWithBehaviorRate: TooManyReplicas / TooFewReplicas.
        pytest.param(4, 1.0, 1, 6, 6, Reason.AT_MAX, id="desired-above-max"),
        pytest.param(4, 0.05, 3, 10, 3, Reason.AT_MIN, id="desired-below-min"),
    ],
)
def test_min_max(
    current: int, usage: float | None, lo: int, hi: int, expected: int, reason: Reason
) -> None:
    p = cpu(50, min_replicas=lo, max_replicas=hi)
    decision, state = p.decide(snap(cpu_pods(*[usage] * current)), warm())
    assert (decision.replicas, decision.reason) == (expected, reason)
    if usage is None:  # the jump is a scale event (storeScaleEvent), not a recommendation
        assert state["behavior"]["scale_events"] == [[NOW, expected - current]]


def test_considered_pods_cannot_reverse_the_direction() -> None:
    # GetResourceReplicas: ratio 2.0 up, rebalanced 1.32 still up, but 3 pods considered
    # give ceil(1.32 x 3) = 4 < current 6: keep 6 rather than scale down on high CPU.
    pods = cpu_pods(1.0, 1.0) + pending(1)
    decision = decide(cpu(50), snap(pods, current=6))
    assert (decision.replicas, decision.reason) == (6, Reason.WITHIN_TOLERANCE)
    assert "reverse" in decision.detail


@pytest.mark.parametrize(
    ("metric", "pods", "signals"),
    [
        # Each is an invalid metric in Kubernetes (an error from the replica calculator).
        pytest.param(
            hpa.ResourceMetric(50),
            (pod("a", 0.5, request=0.0),),
            {},
            id="cpu-zero-requests",
        ),
        pytest.param(
            hpa.PodsMetric("gpu", 60.0, hpa.PodField.GPU_DUTY_CYCLE),
            cpu_pods(0.5, 0.5),
            {},
            id="pods-field-absent",
        ),
        pytest.param(
            hpa.PodsMetric("rps", 60.0, hpa.ServiceSignal.RPS),
            cpu_pods(0.5, 0.5),
            {},
            id="service-signal-absent",
        ),
        pytest.param(LATENCY, cpu_pods(0.5), {}, id="object-absent"),
    ],
)
def test_invalid_metrics(
    metric: hpa.MetricSpec, pods: tuple[PodSample, ...], signals: dict[str, Any]
) -> None:
    decision = decide(policy(metric), snap(pods, **signals))
    assert (decision.replicas, decision.reason) == (len(pods), Reason.METRICS_MISSING)


def test_scale_from_zero_with_min_zero() -> None:
    # HPAScaleToZero (minReplicas 0): with no pods, pod metrics are invalid and an
    # Object/External metric scales from zero on the ratio alone (getUsageRatioReplicaCount,
    # GetExternalPerPodMetricReplicas).
    rps_value = hpa.ObjectMetric("rps", 100.0, hpa.ServiceSignal.RPS, kind="External")
    rps_average = hpa.ObjectMetric(
        "rps", 100.0, hpa.ServiceSignal.RPS, hpa.TargetType.AVERAGE_VALUE, kind="External"
    )
    for metric in (rps_value, rps_average):
        assert decide(policy(metric, min_replicas=0), snap((), rps=250.0)).replicas == 3
    idle = decide(policy(rps_average, min_replicas=0), snap((), rps=0.0))
    assert idle.replicas == 0
    no_pods = decide(policy(hpa.ResourceMetric(50), min_replicas=0), snap((), rps=250.0))
    assert (no_pods.replicas, no_pods.reason) == (0, Reason.METRICS_MISSING)
    pods_metric = hpa.PodsMetric("rps", 60.0, hpa.ServiceSignal.RPS)
    assert decide(policy(pods_metric, min_replicas=0), snap((), rps=1.0)).replicas == 0


def test_zero_replicas_disables_scaling() -> None:
    # reconcileAutoscaler: "scaling is disabled since the replica count of the target is zero".
    decision = decide(cpu(50), snap((), current=0))
    assert (decision.replicas, decision.detail.startswith("scaling is disabled")) == (0, True)


# ------------------------------------------------------------------ other metric sources


def test_object_value_metric() -> None:
    # GetObjectMetricReplicas: ratio = value / target, times the *ready* pod count.
    p = policy(LATENCY)
    pods = cpu_pods(0.5, 0.5, 0.5) + pending(1)
    assert decide(p, snap(pods, latency_ms={"p99": 300.0})).replicas == 6
    holds = decide(p, snap(pods, latency_ms={"p99": 160.0}))
    assert (holds.replicas, holds.reason) == (4, Reason.WITHIN_TOLERANCE)


def test_external_average_value_metric() -> None:
    # GetExternalPerPodMetricReplicas: ceil(value / target-per-pod) outside tolerance.
    rps = hpa.ObjectMetric(
        "rps", 100.0, hpa.ServiceSignal.RPS, hpa.TargetType.AVERAGE_VALUE, kind="External"
    )
    assert decide(policy(rps), snap(cpu_pods(0.5, 0.5, 0.5, 0.5), rps=700.0)).replicas == 7
    assert decide(policy(rps), snap(cpu_pods(0.5, 0.5, 0.5, 0.5), rps=420.0)).replicas == 4


def test_service_signal_spread_over_ready_pods() -> None:
    # rps -> Pods AverageValue: each ready pod reports rps / ready; the pending pod has no
    # sample, so it is unready (0 on a scale-up): 800 over 5 pods = 160 vs 100 -> 8.
    p = hpa.from_config(
        config.AutoscalingConfig(
            max_replicas=20, signals=(config.SignalTarget(config.SignalType.RPS, 100.0),)
        )
    )
    decision = decide(p, snap(cpu_pods(0.5, 0.5, 0.5, 0.5) + pending(1), rps=800.0))
    assert (decision.replicas, decision.signal) == (8, "rps")


def test_no_pods_reported_uses_replica_counts() -> None:
    # Approximation (docs/baselines.md): without pods, `ready` pods at the service-level
    # utilization and the rest pending: 3 x 90 % + 1 unready over 4 = 67 % -> 5.
    s = Snapshot(time=NOW, replicas=Replicas(4, 3), signals=Signals(cpu_utilization=90.0), pods=())
    assert decide(cpu(60), s).replicas == 5
    no_util = Snapshot(time=NOW, replicas=Replicas(4, 3), pods=())
    assert decide(cpu(60), no_util).reason is Reason.METRICS_MISSING


# ------------------------------------------------------------------ config and state


def test_from_config_maps_signals_and_keeps_hpa_defaults() -> None:
    cfg = config.AutoscalingConfig(
        min_replicas=2,
        max_replicas=30,
        signals=(
            config.SignalTarget(config.SignalType.CPU, 70.0),
            config.SignalTarget(config.SignalType.CONCURRENCY, 4.0),
            config.SignalTarget(config.SignalType.GPU, 80.0),
            config.SignalTarget(config.SignalType.RPS, 50.0),
            config.SignalTarget(config.SignalType.LATENCY, 200.0, 99.9),
        ),
        tolerance=0.3,
    )
    p = hpa.from_config(cfg)
    assert p.config.metrics == (
        hpa.ResourceMetric(70),
        hpa.PodsMetric("concurrency", 4.0, hpa.PodField.CONCURRENCY),
        hpa.PodsMetric("gpu", 80.0, hpa.PodField.GPU_DUTY_CYCLE),
        hpa.PodsMetric("rps", 50.0, hpa.ServiceSignal.RPS),
        hpa.ObjectMetric("latency", 200.0, hpa.ServiceSignal.LATENCY, percentile=99.9),
    )
    assert (p.config.min_replicas, p.config.max_replicas) == (2, 30)
    assert p.config.behavior == config.Behavior()  # not servectl's own defaults
    assert p.config.tolerance == 0.1
    assert (p.name, p.period_s) == ("hpa", 15.0)


def test_gpu_duty_cycle_per_pod() -> None:
    gpu = hpa.PodsMetric("gpu", 60.0, hpa.PodField.GPU_DUTY_CYCLE)
    pods = tuple(pod(f"p{i}", gpu=g) for i, g in enumerate([90.0, 90.0, 60.0]))
    assert decide(policy(gpu), snap(pods)).replicas == 4  # avg 80 / 60 -> ceil(4.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"metrics": ()},
        {"min_replicas": 5, "max_replicas": 2},
        {"tolerance": -0.1},
        {"metrics": (hpa.ResourceMetric(0),)},
    ],
)
def test_config_validation(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="HPA"):
        hpa.HPAConfig(**kwargs)


def test_state_round_trips_through_json() -> None:
    # Policy protocol: state is JSON; a controller restart resumes identically.
    load = [6.0] * 4 + [1.2] * 30 + [9.0] * 6

    def at(t: float, current: int) -> Snapshot:
        i = int((t - NOW) // 15)
        pods = tuple(
            pod(f"p{k}", load[i] / current, ready=k < current - (i % 3 == 0))
            for k in range(current)
        )
        return snap(pods, t=t)

    p = cpu(60)
    plain: list[Decision] = []
    through_json: list[Decision] = []
    for sink, codec in ((plain, False), (through_json, True)):
        state = p.initial_state()
        current = 4
        for i in range(len(load)):
            decision, state = p.decide(at(NOW + 15 * i, current), state)
            if codec:
                state = json.loads(json.dumps(state))
            current = decision.replicas
            sink.append(decision)
    assert plain == through_json
    assert len({d.replicas for d in plain}) > 2  # the run actually moved
