"""``controller.observe``: the cycle's Observed from a metrics snapshot and the backend's
revisions."""

from __future__ import annotations

from dataclasses import replace

import pytest

from servectl.autoscaling.snapshot import PodSample, Signals
from servectl.controller.observe import ready_cpu


def test_cpu_counts_only_the_ready_replicas_when_the_backend_names_them() -> None:
    """A replica loading its model burns CPU nobody asked for: counted, it would read as
    load and order more replicas, which load and burn more (the HPA ignores unready pods'
    CPU for the same reason)."""
    pods = (
        PodSample("a", cpu_usage_cores=0.2, cpu_request_cores=0.5),
        PodSample("b", cpu_usage_cores=0.5, cpu_request_cores=0.5),  # loading TensorFlow
    )
    signals = Signals(cpu_usage_cores=0.7, cpu_utilization=70.0, rps=10.0)
    counted, marked = ready_cpu(signals, pods, frozenset({"a"}))
    assert counted.cpu_usage_cores == pytest.approx(0.2)
    assert counted.cpu_utilization == pytest.approx(40.0)
    assert counted.rps == 10.0
    assert [p.ready for p in marked] == [True, False]
    # No ready pod with a sample yet: CPU is unknown, not the loading replicas' burn.
    unknown, _ = ready_cpu(signals, pods, frozenset())
    assert unknown.cpu_usage_cores is None and unknown.cpu_utilization is None
    assert unknown.rps == 10.0


def test_observe_counts_only_ready_replicas_cpu_per_revision_and_service() -> None:
    from servectl.controller.observe import RevisionState, observe
    from servectl.metrics.assemble import MetricsSnapshot, RevisionMetrics

    key = ("default", "cost", "cost-v1")
    pods = (
        PodSample("cost-v1-0", cpu_usage_cores=0.25, cpu_request_cores=0.5),
        PodSample("cost-v1-1", cpu_usage_cores=0.5, cpu_request_cores=0.5),  # loading
    )
    metrics = MetricsSnapshot(
        time=10.0,
        revisions={
            key: RevisionMetrics(
                key,
                10.0,
                Signals(cpu_usage_cores=0.75, cpu_utilization=75.0, rps=12.0),
                pods=pods,
            )
        },
        latency_bounds_us=(),
    )
    revision = RevisionState(
        "cost-v1", 1, desired=2, ready=1, starting=1, weight=100, available=True
    )
    seen = observe(
        10.0,
        metrics,
        [replace(revision, ready_pods=frozenset({"cost-v1-0"}))],
        namespace="default",
        service="cost",
        min_replicas=1,
        max_replicas=4,
    )
    own = seen.revisions[0].snapshot
    assert own is not None and own.signals.cpu_usage_cores == pytest.approx(0.25)
    assert seen.service.signals.cpu_usage_cores == pytest.approx(0.25)
    assert seen.service.signals.cpu_utilization == pytest.approx(50.0)
    assert [p.ready for p in seen.service.pods] == [True, False]
    # A backend that does not name its ready replicas (the simulator) gets every pod's CPU.
    everyone = observe(
        10.0, metrics, [revision], namespace="default", service="cost", min_replicas=1,
        max_replicas=4,
    )  # fmt: skip
    assert everyone.service.signals.cpu_usage_cores == pytest.approx(0.75)
