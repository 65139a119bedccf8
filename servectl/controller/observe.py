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
from dataclasses import dataclass

from servectl.api import models
from servectl.autoscaling.snapshot import Replicas, Snapshot
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
    for r in revisions:
        own = metrics.revision(namespace, service, r.name)
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
                    signals=own.signals,
                    pods=own.pods,
                ),
                counters=own.counters,
            )
        )
    whole = metrics.service(namespace, service, serving)
    desired = sum(r.desired for r in revisions)
    ready = sum(r.ready for r in revisions if r.name in serving)
    return Observed(
        time=now,
        service=whole.snapshot(
            now, Replicas(current=desired, ready=ready, min=min_replicas, max=max_replicas)
        ),
        revisions=tuple(observed_revisions),
        header_revision=header_revision,
        latency_bounds_us=metrics.latency_bounds_us,
        metrics_ok=ok,
        metrics_detail="" if ok else available.message,
        custom=dict(custom or {}),
    )
