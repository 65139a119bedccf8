"""Warm standby on the local runtime, the pure part: which replicas a revision starts,
takes from its pool, drains, parks and unparks (docs/standby.md).

A revision's replicas are *serving* (routed, counted as its capacity) or in its *standby
pool* (:attr:`ServiceRecord.standby`): started like any replica, at the revision's CPU
while they load, and *parked* once READY (their cgroup's CPU quota lowered to the spec's
``standby.parkedCpu``; :attr:`ServiceRecord.parked`). HAProxy never routes to the pool.

- A scale-up takes pool members first (READY parked ones, then the ones still loading,
  the oldest first): an activation is the quota written back and the route added, no
  process start. Only what the pool cannot cover starts cold.
- The pool is refilled behind it by starting replicas that join the pool.
- A scale-down drains serving replicas as before; it never parks one (it has had
  traffic in flight, and a drained replica's quota would have to come back first).
- A pool larger than the plan's asks (a revision that no longer takes traffic) drains its
  excess; a pool member takes no request, so it stops at once.
- A parked replica that is no longer READY (its process restarted, or its checks fail)
  gets its CPU back, so that it can load again; it parks once READY again.

No I/O here: :class:`~servectl.backends.local.backend.LocalBackend` carries the moves out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from servectl.backends.local import supervisor as sup


def _ordinal(replica: sup.Replica) -> int:
    pod = replica.spec.pod
    return int(pod.rsplit("-", 1)[1]) if "-" in pod and pod.rsplit("-", 1)[1].isdigit() else 0


def _victim_order(replica: sup.Replica) -> tuple[int, int]:
    """Scale-down order: replicas that do not serve yet go first, then the newest."""
    serving = 1 if replica.phase is sup.Phase.READY else 0
    return (serving, -_ordinal(replica))


def _activation_order(replica: sup.Replica) -> tuple[int, int]:
    """Which pool member a scale-up takes first: READY ones, then the oldest."""
    return (0 if replica.phase is sup.Phase.READY else 1, _ordinal(replica))


@dataclass(frozen=True)
class Moves:
    """What one revision's replicas need this tick."""

    start: int = 0  # new serving replicas (cold starts)
    start_standby: int = 0  # new replicas for the pool
    activate: tuple[str, ...] = ()  # pool members that serve from now on
    drain: tuple[str, ...] = ()  # serving replicas too many, and pool members too many


def scale(
    replicas: Sequence[sup.Replica],
    draining: Iterable[str],
    pool: Iterable[str],
    target: int,
    standby: int = 0,
) -> Moves:
    """The moves that give a revision ``target`` serving replicas and ``standby`` in its
    pool, none of them leaving (``replicas``: the revision's, from the supervisor;
    ``pool``: the pods of its standby pool as recorded)."""
    leaving = set(draining)
    members = set(pool)
    staying = [
        r for r in replicas if r.spec.pod not in leaving and r.phase is not sup.Phase.STOPPING
    ]
    serving = [r for r in staying if r.spec.pod not in members]
    in_pool = sorted((r for r in staying if r.spec.pod in members), key=_activation_order)
    start = 0
    activate: list[str] = []
    drain: list[str] = []
    if len(serving) < target:
        taken = in_pool[: target - len(serving)]
        activate = [r.spec.pod for r in taken]
        in_pool = in_pool[len(taken) :]
        start = target - len(serving) - len(taken)
    else:
        excess = sorted(serving, key=_victim_order)[: len(serving) - target]
        drain = [r.spec.pod for r in excess]
    start_standby = max(0, standby - len(in_pool))
    if len(in_pool) > standby:
        extra = sorted(in_pool, key=_victim_order)[: len(in_pool) - standby]
        drain += [r.spec.pod for r in extra]
    return Moves(start, start_standby, tuple(activate), tuple(drain))


@dataclass(frozen=True)
class Quota:
    """Whose CPU quota changes this tick."""

    park: tuple[str, ...] = ()  # READY pool members whose quota is lowered now
    unpark: tuple[str, ...] = ()  # parked replicas that get their revision's CPU back


def quota(
    replicas: Iterable[sup.Replica],
    pool: Iterable[str],
    parked: Iterable[str],
    draining: Iterable[str],
) -> Quota:
    """Park the pool's READY members not parked yet; unpark the parked replicas that
    serve now (activated) or are no longer READY. A draining replica keeps its quota (it
    is about to stop)."""
    members, low, leaving = set(pool), set(parked), set(draining)
    park: list[str] = []
    unpark: list[str] = []
    for replica in sorted(replicas, key=lambda r: r.spec.pod):
        pod = replica.spec.pod
        if pod in leaving or replica.phase is sup.Phase.STOPPING:
            continue
        ready = replica.phase is sup.Phase.READY
        if pod in members and ready and pod not in low:
            park.append(pod)
        elif pod in low and (pod not in members or not ready):
            unpark.append(pod)
    return Quota(tuple(park), tuple(unpark))


def present(entries: Mapping[str, float], pods: Iterable[str]) -> dict[str, float]:
    """``entries`` without the pods that have gone (the supervisor no longer lists them)."""
    alive = set(pods)
    return {pod: since for pod, since in entries.items() if pod in alive}
