"""An :class:`~servectl.planning.types.Observed` from what a backend knows and what
Prometheus said: the one way the local runtime and the Kubernetes backend build it.

Pure: the metrics arrive as a :class:`~servectl.metrics.assemble.MetricsSnapshot` (one
Prometheus round for every service), the custom analysis checks' values as the mapping
:meth:`PrometheusSource.custom_checks <servectl.metrics.source.PrometheusSource.custom_checks>`
returns, and the replicas and routes as :class:`RevisionState` values the backend read.
(The simulator builds its ``Observed`` from its own metrics pipeline, the same shape.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from servectl.api import models
from servectl.autoscaling.snapshot import PodSample, Replicas, Signals, Snapshot
from servectl.metrics import assemble
from servectl.planning.types import Observed, ObservedRevision


@dataclass(frozen=True)
class RevisionState:
    """One revision's replicas and route as the backend sees them now."""

    name: str
    version: int
    desired: int  # replicas last applied
    ready: int  # ready replicas in the routes
    starting: int = 0
    draining: int = 0
    weight: int = 0  # percent applied at the router
    available: bool = False  # TF Serving reports the version AVAILABLE on a ready replica
    # The ready replicas' names, when the backend knows them: CPU then counts only theirs
    # (a replica loading its model burns CPU that no request asked for; the HPA ignores
    # unready pods' CPU too). None: count every replica Prometheus has.
    ready_pods: frozenset[str] | None = None
    # Its replicas that have taken no request yet (loading their model), when the backend
    # knows: their CPU in the rate window is no load (:func:`steady`).
    loading_pods: frozenset[str] | None = None
    # Why the cluster refuses to create its pods, in the cluster's words ("" when it does
    # not): Pod Security admission, a quota, an admission policy.
    refused: str = ""
    # Its warm standby pool (docs/standby.md): replicas loaded and not routed, apart from
    # ``ready``/``starting``; ``parked``: those of them whose CPU is lowered now.
    standby: int = 0
    parked: int = 0


def ready_cpu(
    signals: Signals, pods: Sequence[PodSample], ready: frozenset[str]
) -> tuple[Signals, tuple[PodSample, ...]]:
    """``signals`` with CPU usage and utilization over the ``ready`` pods only, and the
    pods marked ready or not. No ready pod with a CPU sample: CPU is missing (unknown,
    not the load of replicas that are still loading)."""
    marked = tuple(replace(p, ready=p.name in ready) for p in pods)
    counted = [p for p in marked if p.ready and p.cpu_usage_cores is not None]
    if not counted:
        return replace(signals, cpu_usage_cores=None, cpu_utilization=None), marked
    usage = sum(p.cpu_usage_cores or 0.0 for p in counted)
    request = sum(p.cpu_request_cores for p in counted)
    utilization = 100.0 * usage / request if request > 0 else signals.cpu_utilization
    return replace(signals, cpu_usage_cores=usage, cpu_utilization=utilization), marked


def steady(revision: RevisionState, pods: Sequence[PodSample]) -> bool:
    """Whether the revision's CPU usage is over the same replicas as its request rate:
    every replica that served in the rate window is counted (ready long enough for its
    window to hold no loading), and every ready one has a sample.

    Only then is CPU per request (the planner's cost of the revision) measured: a replica
    that has just become ready serves its share at once but counts only once settled; one
    draining, or stopped within the window, served requests whose CPU is not counted. The
    request rate is per revision, so either way CPU per request read low for that revision
    (and high for the others, relative to the stable): for two identical versions under
    load c(v2) went 0.77 .. 1.59 (issue 25, item 5), and the planner moved a replica from
    one revision to the other and weight back, and 8 s later the other way. Replicas still
    loading served nothing (``loading_pods``); without that list every window counts."""
    if revision.ready_pods is None or revision.loading_pods is None:
        return True
    sampled = {p.name for p in pods if p.cpu_usage_cores is not None}
    counted = sampled & revision.ready_pods
    return sampled - revision.loading_pods <= counted and len(counted) >= revision.ready


def observe(
    now: float,
    metrics: assemble.MetricsSnapshot,
    revisions: Sequence[RevisionState],
    *,
    namespace: str,
    service: str,
    min_replicas: int,
    max_replicas: int,
    header_revision: str | None = None,
    custom: Mapping[str, tuple[float | None, float | None]] | None = None,
    required: Iterable[str] = assemble.DEFAULT_REQUIRED,
) -> Observed:
    """The cycle's ``Observed`` for one service.

    ``metrics_ok`` is the ``MetricsAvailable`` condition of the revisions that serve
    (those with weight, or the header route's): when it is False the loop holds or only
    scales up (rule 8), and ``metrics_detail`` says which signal is missing and why.
    """
    names = [r.name for r in revisions]
    serving = [r.name for r in revisions if r.weight > 0 or r.name == header_revision] or names
    available = assemble.condition(metrics, namespace, service, serving, required=required)
    ok = available.status is models.ConditionStatus.TRUE
    observed_revisions = []
    ready_names: set[str] | None = set()
    for r in revisions:
        if r.ready_pods is None:
            ready_names = None
        elif ready_names is not None and (r.weight > 0 or r.name == header_revision):
            ready_names |= r.ready_pods
    for r in revisions:
        own = metrics.revision(namespace, service, r.name)
        signals, pods = own.signals, own.pods
        if r.ready_pods is not None:
            steady_cpu = steady(r, pods)
            signals, pods = ready_cpu(signals, pods, r.ready_pods)
            if not steady_cpu:  # CPU per request unmeasured this tick (steady())
                signals = replace(signals, cpu_usage_cores=None)
        observed_revisions.append(
            ObservedRevision(
                name=r.name,
                version=r.version,
                desired=r.desired,
                ready=r.ready,
                starting=r.starting,
                draining=r.draining,
                weight=r.weight,
                available=r.available,
                snapshot=Snapshot(
                    time=now,
                    replicas=Replicas(current=r.desired, ready=r.ready, min=0, max=max_replicas),
                    signals=signals,
                    pods=pods,
                ),
                counters=own.counters,
                refused=r.refused,
                standby=r.standby,
            )
        )
    whole = metrics.service(namespace, service, serving)
    desired = sum(r.desired for r in revisions)
    ready = sum(r.ready for r in revisions if r.name in serving)
    service_snapshot = whole.snapshot(
        now, Replicas(current=desired, ready=ready, min=min_replicas, max=max_replicas)
    )
    if ready_names is not None:
        signals, pods = ready_cpu(
            service_snapshot.signals, service_snapshot.pods, frozenset(ready_names)
        )
        service_snapshot = replace(service_snapshot, signals=signals, pods=pods)
    return Observed(
        time=now,
        service=service_snapshot,
        revisions=tuple(observed_revisions),
        header_revision=header_revision,
        latency_bounds_us=metrics.latency_bounds_us,
        metrics_ok=ok,
        metrics_detail="" if ok else available.message,
        custom=dict(custom or {}),
    )
