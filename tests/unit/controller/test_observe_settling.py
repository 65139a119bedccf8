"""CPU per request while a replica settles (issue 25, item 5): a replica that has just
become ready serves its share of the requests at once, but its CPU counts only once its
rate window holds no loading. Usage is then over the same replicas as the request rate,
so the planner's cost and the engine's service time hold still while it settles."""

from __future__ import annotations

import pytest

from servectl.autoscaling.snapshot import PodSample, Signals
from servectl.controller.observe import RevisionState, observe
from servectl.metrics.assemble import MetricsSnapshot, RevisionMetrics

NOW = 10.0


def snapshot(**revisions: tuple[float, tuple[PodSample, ...]]) -> MetricsSnapshot:
    """Each revision's request rate and pods (CPU as Prometheus reads it)."""
    metrics = {}
    for name, (rps, pods) in revisions.items():
        key = ("default", "cost", name.replace("_", "-"))
        usage = sum(p.cpu_usage_cores or 0.0 for p in pods)
        metrics[key] = RevisionMetrics(key, NOW, Signals(cpu_usage_cores=usage, rps=rps), pods)
    return MetricsSnapshot(time=NOW, revisions=metrics, latency_bounds_us=())


def pod(name: str, cores: float) -> PodSample:
    return PodSample(name, cpu_usage_cores=cores, cpu_request_cores=0.5)


def per_request(seen_rps: float, cores: float | None) -> float:
    assert cores is not None
    return cores / seen_rps


def test_a_replica_settling_does_not_change_cpu_per_request() -> None:
    # v2's second replica became ready 3 s ago: it serves half of v2's 10 req/s already,
    # its 5 s CPU rate still holds the loading burn (0.45 core), so it is not counted.
    metrics = snapshot(
        cost_v1=(10.0, (pod("cost-v1-0", 0.2), pod("cost-v1-1", 0.2))),
        cost_v2=(10.0, (pod("cost-v2-2", 0.2), pod("cost-v2-3", 0.45))),
    )
    revisions = [
        RevisionState(
            "cost-v1", 1, 2, ready=2, weight=50, available=True,
            ready_pods=frozenset({"cost-v1-0", "cost-v1-1"}),
        ),
        RevisionState(
            "cost-v2", 2, 2, ready=2, weight=50, available=True,
            ready_pods=frozenset({"cost-v2-2"}),
        ),
    ]  # fmt: skip
    seen = observe(
        NOW, metrics, revisions, namespace="default", service="cost", min_replicas=1,
        max_replicas=4,
    )  # fmt: skip
    v1, v2 = (r.snapshot for r in seen.revisions)
    assert v1 is not None and v2 is not None
    # The same version at the same load: the same CPU per request (0.04 core-s).
    assert per_request(10.0, v2.signals.cpu_usage_cores) == pytest.approx(0.04)
    assert per_request(10.0, v1.signals.cpu_usage_cores) == pytest.approx(0.04)
    # Utilization is a mean over the counted replicas either way.
    assert v2.signals.cpu_utilization == pytest.approx(40.0)
    # The service as a whole: 4 replicas serve, 3 are counted.
    assert seen.service.signals.cpu_usage_cores == pytest.approx(0.8)
    assert seen.service.signals.cpu_utilization == pytest.approx(40.0)


def test_replicas_that_do_not_serve_are_not_extrapolated_to() -> None:
    """Starting (not ready) replicas take no requests: usage is the ready ones' alone."""
    metrics = snapshot(cost_v1=(10.0, (pod("cost-v1-0", 0.3), pod("cost-v1-1", 0.5))))
    revision = RevisionState(
        "cost-v1", 1, 2, ready=1, starting=1, weight=100, available=True,
        ready_pods=frozenset({"cost-v1-0"}),
    )  # fmt: skip
    seen = observe(
        NOW, metrics, [revision], namespace="default", service="cost", min_replicas=1,
        max_replicas=4,
    )  # fmt: skip
    own = seen.revisions[0].snapshot
    assert own is not None and own.signals.cpu_usage_cores == pytest.approx(0.3)
    assert seen.service.signals.cpu_usage_cores == pytest.approx(0.3)
