"""Snapshot input rules (docs/snapshot.md, "Rules of from_dict"): non-finite numbers are
missing, negative measurements and out-of-range counts are refused naming the field,
and the engine decides on anything from_dict accepts or code builds."""

from __future__ import annotations

import math
from typing import Any

import pytest

from servectl.autoscaling import config, engine, engine_state, hpa, kpa, queueing, snapshot
from servectl.autoscaling.decision import Reason

NON_FINITE = [math.inf, -math.inf, math.nan]


def doc(**parts: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"time": 1_000.0, "replicas": {"current": 4, "ready": 4}}
    base.update(parts)
    return base


def refused(document: Any, message: str) -> None:
    with pytest.raises(snapshot.SnapshotError) as caught:
        snapshot.from_dict(document)
    assert message in str(caught.value), str(caught.value)


# ----------------------------------------------------------------------------- non-finite

SIGNALS = ["cpu_utilization", "cpu_usage_cores", "gpu_duty_cycle", "rps", "concurrency"]


@pytest.mark.parametrize("value", NON_FINITE, ids=str)
@pytest.mark.parametrize("name", [*SIGNALS, "error_rate"])
def test_a_non_finite_signal_is_missing(name: str, value: float) -> None:
    snap = snapshot.from_dict(doc(signals={name: value}))
    assert getattr(snap.signals, name) is None


@pytest.mark.parametrize("value", NON_FINITE, ids=str)
def test_a_non_finite_latency_is_dropped(value: float) -> None:
    snap = snapshot.from_dict(doc(signals={"latency_ms": {"p99": value, "p50": 20.0}}))
    assert snap.signals.latency_ms == {"p50": 20.0}


@pytest.mark.parametrize("value", NON_FINITE, ids=str)
def test_non_finite_pod_numbers_are_missing(value: float) -> None:
    pod = {
        "name": "a",
        "start_time": value,
        "cpu_usage_cores": value,
        "cpu_request_cores": value,
        "concurrency": value,
        "gpu_duty_cycle": value,
    }
    (sample,) = snapshot.from_dict(doc(pods=[pod])).pods
    assert sample.cpu_usage_cores is None
    assert sample.concurrency is None
    assert sample.gpu_duty_cycle is None
    assert sample.start_time == 0.0  # missing: the default
    assert sample.cpu_request_cores == 0.0  # unknown: as if the pod set no request


def test_an_int_too_large_for_a_double_is_infinite_so_missing() -> None:
    assert snapshot.from_dict(doc(signals={"rps": 10**400})).signals.rps is None


@pytest.mark.parametrize("value", NON_FINITE, ids=str)
def test_a_non_finite_age_is_unknown_so_stale(value: float) -> None:
    snap = snapshot.from_dict(doc(signals={"age_s": value, "cpu_utilization": 90.0}))
    assert snap.signals.age_s == math.inf
    decision, _ = engine.EnginePolicy(config.AutoscalingConfig()).decide(snap, {})
    assert decision.reason is Reason.METRICS_MISSING
    assert decision.replicas == 4
    assert "signals are of unknown age (stale after 60 s)" in decision.detail


@pytest.mark.parametrize("value", NON_FINITE, ids=str)
def test_snapshots_built_in_code_drop_non_finite_numbers(value: float) -> None:
    signals = snapshot.Signals(
        cpu_utilization=value,
        cpu_usage_cores=value,
        gpu_duty_cycle=value,
        rps=value,
        concurrency=value,
        latency_ms={"p99": value, "p50": 30.0},
        error_rate=value,
        age_s=value,
    )
    assert all(getattr(signals, name) is None for name in [*SIGNALS, "error_rate"])
    assert signals.latency_ms == {"p50": 30.0}
    assert signals.age_s == math.inf
    pod = snapshot.PodSample("a", cpu_usage_cores=value, concurrency=value, start_time=value)
    assert pod.cpu_usage_cores is None and pod.concurrency is None and pod.start_time == 0.0


@pytest.mark.parametrize("value", NON_FINITE, ids=str)
def test_a_snapshot_built_in_code_needs_a_finite_time(value: float) -> None:
    with pytest.raises(snapshot.SnapshotError, match="time"):
        snapshot.Snapshot(time=value, replicas=snapshot.Replicas(1, 1))


# ----------------------------------------------------------------------------- refused


@pytest.mark.parametrize("name", [*SIGNALS, "error_rate", "age_s"])
def test_a_negative_signal_is_refused(name: str) -> None:
    refused(doc(signals={name: -3}), f"signals.{name}: must be >= 0, got -3")


def test_a_negative_latency_is_refused() -> None:
    refused(doc(signals={"latency_ms": {"p99": -1.5}}), "signals.latency_ms.p99: must be >= 0")


@pytest.mark.parametrize("name", ["cpu_usage_cores", "cpu_request_cores", "concurrency"])
def test_a_negative_pod_number_is_refused(name: str) -> None:
    refused(doc(pods=[{"name": "a"}, {"name": "b", name: -0.5}]), f"pods[1].{name}: must be >= 0")


@pytest.mark.parametrize("value", [1.5, 5, 100.0])
def test_an_error_rate_above_one_is_refused(value: float) -> None:
    refused(doc(signals={"error_rate": value}), "signals.error_rate: must be at most 1")


@pytest.mark.parametrize("key", ["p", "99", "pfoo", "p101", "p-1", "pnan"])
def test_a_latency_key_must_be_a_percentile(key: str) -> None:
    refused(doc(signals={"latency_ms": {key: 1.0}}), f"signals.latency_ms.{key}: keys are")


@pytest.mark.parametrize(
    ("replicas", "message"),
    [
        ({"current": -1}, "replicas.current: must be >= 0, got -1"),
        ({"current": 2, "ready": -2}, "replicas.ready: must be >= 0"),
        ({"current": 2, "min": -1}, "replicas.min: must be >= 0"),
        ({"current": 2, "max": 0}, "replicas.max: must be >= 1"),
        ({"current": 2, "min": 5, "max": 3}, "replicas.min (5) > replicas.max (3)"),
        ({"current": 2.5}, "replicas.current: expected an integer, got 2.5"),
        ({"current": 2, "max": 1e308}, "replicas.max: expected an integer, got 1e+308"),
        ({"current": 2, "max": 10**30}, "replicas.max: must be at most 150000"),
        ({"current": 10**400}, "replicas.current: must be at most 150000"),
        ({"current": 150_001}, "replicas.current: must be at most 150000"),
        ({"current": True}, "replicas.current: expected an integer, got true"),
        ({"current": "3"}, "replicas.current: expected an integer, got '3'"),
    ],
)
def test_replica_counts_are_ints_within_kubernetes_limits(
    replicas: dict[str, Any], message: str
) -> None:
    refused(doc(replicas=replicas), message)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (math.inf, "time: must be a finite number of seconds, got inf"),
        (-math.inf, "time: must be a finite number of seconds"),
        (math.nan, "time: must be a finite number of seconds, got nan"),
        (10**400, "time: must be a finite number"),
        (1e300, "time: 1e+300 is outside the years 1-9999"),
        ("now", "time: expected a number, got 'now'"),
        (None, "time: expected a number, got null"),
    ],
)
def test_time_must_be_finite_seconds(value: Any, message: str) -> None:
    refused(doc(time=value), message)


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        ({"signals": []}, "signals: expected an object, got a list"),
        ({"pods": {}}, "pods: expected a list of pod objects, got an object"),
        ({"rollout": "Idle"}, "rollout: expected an object, got 'Idle'"),
        ({"pods": [{"name": 7}]}, "pods[0].name: expected a string, got 7"),
        ({"pods": [{"name": "a"}, {"name": "a"}]}, "pods[1].name: 'a' is also the name of pods[0]"),
        ({"rollout": {"phase": 3}}, "rollout.phase: expected a string, got 3"),
        ({"rollout": {"canary_weight": 101}}, "rollout.canary_weight: must be at most 100"),
        ({"rollout": {"step": -1}}, "rollout.step: must be >= 0"),
    ],
)
def test_parts_of_the_wrong_shape_are_refused(parts: dict[str, Any], message: str) -> None:
    refused(doc(**parts), message)


def test_null_parts_are_absent() -> None:
    snap = snapshot.from_dict(doc(signals=None, pods=None, rollout=None))
    assert snap.pods == () and snap.signals == snapshot.Signals()


def test_a_deeply_nested_value_is_refused_without_recursing() -> None:
    deep: Any = 1.0
    for _ in range(100_000):
        deep = [deep]
    refused(doc(time=deep), "time: expected a number, got a list")
    refused(doc(pods=[{"name": deep}]), "pods[0].name: expected a string, got a list")


def test_unknown_keys_of_any_type_are_named() -> None:
    refused({"time": 1, "replicas": {"current": 1}, 3: 1, "x" * 500: 2}, "unknown field(s) 3, xxx")


# ----------------------------------------------------------------------------- accepted


def test_pods_may_start_in_the_future_and_be_empty() -> None:
    future = doc(pods=[{"name": "a", "start_time": 5_000.0, "ready": False}])
    assert snapshot.from_dict(future).pods[0].start_time == 5_000.0
    assert snapshot.from_dict(doc(pods=[])).pods == ()


def test_zero_and_huge_finite_numbers_are_accepted() -> None:
    snap = snapshot.from_dict(doc(signals={"rps": 0, "cpu_usage_cores": 1.7976931348623157e308}))
    assert snap.signals.rps == 0.0
    assert snap.signals.cpu_usage_cores == 1.7976931348623157e308


def test_negative_zero_is_zero() -> None:
    rps = snapshot.from_dict(doc(signals={"rps": -0.0})).signals.rps
    assert rps is not None and math.copysign(1.0, rps) == 1.0


# ----------------------------------------------------------------------------- policies


def example_doc(**signals: Any) -> dict[str, Any]:
    return {
        "time": 1_795_444_200.0,
        "replicas": {"current": 6, "ready": 6, "min": 1, "max": 50},
        "signals": {"cpu_usage_cores": 10.4, "rps": 520.0, "concurrency": 14.2, **signals},
        "pods": [{"name": f"pod-{i}", "cpu_usage_cores": 1.7, "cpu_request_cores": 2.0}
                 for i in range(6)],
    }  # fmt: skip


ALL_SIGNALS = (
    config.SignalTarget(config.SignalType.CPU, 70.0),
    config.SignalTarget(config.SignalType.LATENCY, 150.0),
    config.SignalTarget(config.SignalType.RPS, 50.0),
    config.SignalTarget(config.SignalType.CONCURRENCY, 10.0),
    config.SignalTarget(config.SignalType.GPU, 80.0),
)


@pytest.mark.parametrize(
    "signals",
    [
        {"rps": math.inf},
        {"cpu_usage_cores": math.inf},
        {"cpu_usage_cores": 1.7976931348623157e308},
        {"concurrency": 1.7976931348623157e308, "rps": 0, "cpu_usage_cores": 0},
        {"rps": 1e300, "cpu_usage_cores": 1e-300, "concurrency": 1e300},
    ],
    ids=str,
)
def test_every_policy_decides_on_extreme_signals(signals: dict[str, Any]) -> None:
    snap = snapshot.from_dict(example_doc(**signals))
    cfg = config.AutoscalingConfig(min_replicas=1, max_replicas=50, signals=ALL_SIGNALS)
    for policy in (engine.EnginePolicy(cfg), hpa.from_config(cfg), kpa.from_config(cfg)):
        decision, _ = policy.decide(snap, policy.initial_state())
        assert 1 <= decision.replicas <= 50, (policy.name, decision)


def test_a_zero_service_time_never_divides() -> None:
    # CPU usage 0 with traffic (a broken metric), then no replica ready: the engine used
    # to divide the ready capacity by the zero CPU time per request it had learnt.
    policy = engine.EnginePolicy(config.AutoscalingConfig(max_replicas=50))
    steady = {"rps": 10.0, "cpu_usage_cores": 0.0, "concurrency": 1.0}
    first = snapshot.from_dict(
        {"time": 100.0, "replicas": {"current": 2, "ready": 2}, "signals": steady}
    )
    _, state = policy.decide(first, {})
    assert engine_state.from_dict(state).service_s is None
    queued = {**steady, "concurrency": 100.0}
    later = snapshot.from_dict(
        {"time": 102.0, "replicas": {"current": 2, "ready": 0}, "signals": queued}
    )
    decision, _ = policy.decide(later, {**state, "service_s": 0.0})
    assert 1 <= decision.replicas <= 50


def test_latency_sizing_bisects_to_the_fewest_replicas_that_fit() -> None:
    args = (900.0, 0.02, 2, 0.99, 0.05)
    linear = next(
        n for n in range(1, 10_000) if queueing.wait_quantile_s(900.0 / n, 0.02, 2, 0.99) <= 0.05
    )
    assert queueing.replicas_for_latency(*args, max_replicas=10_000) == max(linear, 10)
    assert queueing.replicas_for_latency(1e300, 1.0, 1, 0.99, 0.1, 150_000) == 150_000
    assert queueing.replicas_for_latency(10.0, math.inf, 1, 0.99, 0.1, 7) == 7
