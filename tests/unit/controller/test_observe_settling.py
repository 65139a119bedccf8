"""CPU per request is measured only over a steady window (issue 25, item 5): the request
rate is per revision, so while one of its replicas settles (ready, serving, its CPU not
counted yet), drains or has just stopped, CPU over the counted replicas per request of
them all is wrong. For two identical versions under load the planner's cost of the canary
went 0.77 .. 1.59 that way, and it moved replicas and weight between them. Such a tick
leaves the revision's usage unknown (the planner keeps its estimate); the service's CPU
for the autoscaler is as before (the counted replicas')."""

from __future__ import annotations

import pytest

from servectl.autoscaling.snapshot import PodSample, Signals
from servectl.controller.observe import RevisionState, observe
from servectl.metrics.assemble import MetricsSnapshot, RevisionMetrics
from servectl.planning.types import Observed

NOW = 10.0


def pod(name: str, cores: float) -> PodSample:
    return PodSample(name, cpu_usage_cores=cores, cpu_request_cores=0.5)


def seen(pods: tuple[PodSample, ...], **state: object) -> Observed:
    """cost-v1 at 10 req/s with ``pods`` as Prometheus has them, the backend's view
    ``state`` (2 ready replicas, both settled, none loading, unless given)."""
    key = ("default", "cost", "cost-v1")
    usage = sum(p.cpu_usage_cores or 0.0 for p in pods)
    metrics = MetricsSnapshot(
        time=NOW,
        revisions={key: RevisionMetrics(key, NOW, Signals(cpu_usage_cores=usage, rps=10.0), pods)},
        latency_bounds_us=(),
    )
    fields: dict[str, object] = {
        "ready": 2,
        "weight": 100,
        "available": True,
        "ready_pods": frozenset({"cost-v1-0", "cost-v1-1"}),
        "loading_pods": frozenset(),
    }
    fields.update(state)
    revision = RevisionState("cost-v1", 1, 2, **fields)  # type: ignore[arg-type]
    return observe(
        NOW, metrics, [revision], namespace="default", service="cost", min_replicas=1,
        max_replicas=4,
    )  # fmt: skip


def usage(observed: Observed) -> float | None:
    own = observed.revisions[0].snapshot
    assert own is not None
    return own.signals.cpu_usage_cores


def test_a_steady_revision_has_its_usage() -> None:
    steady = seen((pod("cost-v1-0", 0.2), pod("cost-v1-1", 0.2)))
    assert usage(steady) == pytest.approx(0.4)


def test_a_replica_settling_leaves_cpu_per_request_unmeasured() -> None:
    # cost-v1-1 became ready 3 s ago: it serves half the requests already, its 5 s rate
    # still holds its loading burn, so it is not counted.
    settling = seen(
        (pod("cost-v1-0", 0.2), pod("cost-v1-1", 0.45)), ready_pods=frozenset({"cost-v1-0"})
    )
    assert usage(settling) is None  # 0.2 core for 10 req/s would read half the cost
    own = settling.revisions[0].snapshot
    assert own is not None and own.signals.cpu_utilization == pytest.approx(40.0)
    # The autoscaler's CPU is the counted replicas', as before.
    assert settling.service.signals.cpu_usage_cores == pytest.approx(0.2)


def test_a_replica_draining_or_just_stopped_leaves_it_unmeasured() -> None:
    # cost-v1-2 stopped 2 s ago: its series lasts the rate window, its requests are in
    # the revision's rate, its CPU is not counted.
    stopped = seen((pod("cost-v1-0", 0.2), pod("cost-v1-1", 0.2), pod("cost-v1-2", 0.1)))
    assert usage(stopped) is None
    draining = seen(
        (pod("cost-v1-0", 0.2), pod("cost-v1-1", 0.2), pod("cost-v1-2", 0.1)), draining=1
    )
    assert usage(draining) is None


def test_a_replica_loading_served_nothing_and_spoils_nothing() -> None:
    loading = seen(
        (pod("cost-v1-0", 0.2), pod("cost-v1-1", 0.2), pod("cost-v1-2", 0.45)),
        starting=1,
        loading_pods=frozenset({"cost-v1-2"}),
    )
    assert usage(loading) == pytest.approx(0.4)


def test_a_backend_that_does_not_say_which_replicas_load_counts_every_window() -> None:
    """The simulator and the Kubernetes backend: as before."""
    unknown = seen(
        (pod("cost-v1-0", 0.2), pod("cost-v1-1", 0.45)),
        ready_pods=frozenset({"cost-v1-0"}),
        loading_pods=None,
    )
    assert usage(unknown) == pytest.approx(0.2)
