"""One ModelService on this machine as a :class:`~servectl.controller.driver.FleetService`.

The runtime (:mod:`servectl.backends.local.runtime`) is the fleet: each tick the driver
(:mod:`servectl.controller.driver`) opens one :class:`LocalBackend` per service over what
the runtime read once for every service (the supervisor's replicas, HAProxy's routes),
hands it the tick's one Prometheus snapshot, and runs ``reconcile_once`` on it:

- **observe**: each revision the runtime keeps for the service (:class:`ServiceRecord`:
  the replicas and weights last applied), its replicas as the supervisor sees them
  (ready: the model version is AVAILABLE and HAProxy routes to it), the weights HAProxy
  applies now, the metrics and the custom analysis checks measured in that snapshot;
- **commands**: the user's rollout commands from the store's queue (taken once);
- **apply**: starts replicas a revision lacks (taking its warm standby pool first:
  :mod:`~servectl.backends.local.standby`), marks the ones it has too many of as
  draining, parks the pool's READY replicas, and makes the service's route
  (:attr:`LocalBackend.route`: the plan's weights and header route over the replicas
  that serve). The runtime sends every service's
  route to HAProxy once per tick, takes a draining replica out of HAProxy, waits for its
  in-flight requests (up to ``drainSeconds``) and only then stops it (SIGTERM, then
  SIGKILL after the grace period);
- state, status and events go to the SQLite store (persistence only: nothing is rebuilt
  from it within a tick), so a controller killed at any moment starts again at the same
  step with the same weights.

The pure part — which replicas to start and which to drain, the route HAProxy should run —
is in functions (:func:`scale_revision`, :func:`desired_route`, :func:`drained`) that the
tests drive without processes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from servectl.api import models
from servectl.api.models import ModelServiceStatus, RolloutPhase
from servectl.backends import client as protocol
from servectl.backends.local import router as router_mod
from servectl.backends.local import standby as pool_mod
from servectl.backends.local import supervisor as sup
from servectl.backends.local.record import RevisionRecord, ServiceRecord
from servectl.backends.local.store import CommandOutcome, Store
from servectl.backends.local.versions import ModelPathError, check_version, versions_on_disk
from servectl.controller import state as state_codec
from servectl.controller.backend import Event, EventReason, EventType
from servectl.controller.decide import Command
from servectl.controller.observe import RevisionState, observe
from servectl.controller.spec import route_match
from servectl.metrics.assemble import MetricsSnapshot
from servectl.planning.types import Observed, Plan
from servectl.rollout.machine import Op

#: Phases a replica can be in before it serves (the loop counts them as starting).
_NOT_YET = (sup.Phase.STARTING, sup.Phase.NOT_READY, sup.Phase.BACKOFF)
CPU_SETTLE_S = 8.0
"""A replica's CPU counts as load once it has served this long: before, the rate window
(5 s, one scrape a second) still holds the CPU it burnt loading TensorFlow and the model
(Kubernetes' HPA has --horizontal-pod-autoscaler-cpu-initialization-period for this)."""
_TERMINAL = frozenset({RolloutPhase.COMPLETED, RolloutPhase.ABORTED})


# ------------------------------------------------------------------------ pure decisions


def pod_name(revision: str, ordinal: int) -> str:
    return f"{revision}-{ordinal}"


def scale_revision(
    replicas: Sequence[sup.Replica], draining: Iterable[str], target: int
) -> tuple[int, list[str]]:
    """How many replicas to start and which to drain so the revision has ``target``
    replicas that are not leaving (``replicas``: the revision's, from the supervisor), with
    no standby pool (:func:`servectl.backends.local.standby.scale` with one)."""
    moves = pool_mod.scale(replicas, draining, (), target)
    return moves.start, list(moves.drain)


def desired_route(
    namespace: str,
    name: str,
    record: ServiceRecord,
    replicas: Sequence[sup.Replica],
    match: router_mod.Match | None,
) -> router_mod.ServiceRoute:
    """The route HAProxy should run for the service: each revision's weight, its READY
    replicas as endpoints, draining ones marked draining (no new requests). A replica
    that is not READY, or is in a standby pool, is never routed to."""
    by_revision: dict[str, list[router_mod.Endpoint]] = {}
    for replica in replicas:
        if replica.rest_port is None or replica.grpc_port is None:
            continue
        pod = replica.spec.pod
        if pod in record.standby:
            continue
        draining = pod in record.draining
        if replica.phase is not sup.Phase.READY and not draining:
            continue
        if replica.phase is sup.Phase.STOPPING:
            continue
        by_revision.setdefault(replica.spec.revision, []).append(
            router_mod.Endpoint(pod, replica.rest_port, replica.grpc_port, draining=draining)
        )
    names = set(record.revisions) | set(by_revision)
    revisions = tuple(
        router_mod.RevisionRoute(
            name=rev,
            weight=record.revisions[rev].weight if rev in record.revisions else 0,
            endpoints=tuple(sorted(by_revision.get(rev, []), key=lambda e: e.name)),
        )
        for rev in sorted(names)
    )
    header = None
    if match is not None and record.header is not None:
        header = replace(match, revision=record.header)
    return router_mod.ServiceRoute(
        namespace=namespace,
        service=name,
        rest_port=record.rest_port,
        grpc_port=record.grpc_port,
        revisions=revisions,
        match=header,
    )


def drained(
    record: ServiceRecord,
    replicas: Mapping[str, sup.Replica],
    inflight: Mapping[str, int],
    routed: Iterable[str],
    now: float,
    drain_s: float,
) -> list[str]:
    """The draining replicas to stop now: those HAProxy no longer sends new requests to
    with nothing in flight, those that never served, and those past ``drain_s``."""
    still_routed = set(routed)
    stop = []
    for pod, since in sorted(record.draining.items()):
        replica = replicas.get(pod)
        if replica is None or replica.phase is sup.Phase.STOPPING:
            continue
        if (
            replica.phase is not sup.Phase.READY  # never took a request (or is dead)
            or now - since >= drain_s
            or (pod not in still_routed and inflight.get(pod, 0) == 0)
        ):
            stop.append(pod)
    return stop


def match_of(spec: models.ModelServiceSpec) -> router_mod.Match | None:
    """The A/B or blue/green preview match of the spec, as a router match (its revision
    is filled per tick from the plan's header route)."""
    match = route_match(spec)
    if match is None:
        return None
    kind: Literal["header", "cookie"] = "header" if match.kind == "header" else "cookie"
    return router_mod.Match(kind, match.name, match.value, revision="")


def activated(
    revision: str, moves: pool_mod.Moves, parked: Mapping[str, float], wall: float, now: float
) -> Event:
    """The event of a scale-up that took standby replicas: which, how long parked, and the
    refill."""
    taken = ", ".join(
        f"{pod} (parked {wall - parked[pod]:.0f} s)" if pod in parked else f"{pod} (loading)"
        for pod in moves.activate
    )
    refill = f"; {moves.start_standby} started to refill the pool" if moves.start_standby else ""
    cold = f"; {moves.start} more started cold" if moves.start else ""
    return Event(
        now,
        EventType.NORMAL,
        EventReason.STANDBY_ACTIVATED,
        f"{revision}: took {len(moves.activate)} from the standby pool, serving without a "
        f"cold start: {taken}{cold}{refill}",
    )


# ------------------------------------------------------------------------ the backend


@dataclass
class TickView:
    """What the runtime read once this tick, shared by every service's backend."""

    replicas: Sequence[sup.Replica]
    routes: Mapping[tuple[str, str], router_mod.ServiceRoute]


PortAllocator = Callable[[], tuple[int, int]]
"""A new service's (REST, gRPC) front ports, free and taken by no other service."""


class LocalBackend:
    """One ModelService in the local runtime for one tick: a
    :class:`~servectl.controller.driver.FleetService`."""

    def __init__(
        self,
        *,
        store: Store,
        service: models.ModelService,
        record: ServiceRecord | None,
        view: TickView,
        supervisor: sup.Supervisor,
        wall_clock: Callable[[], float],
        allocate_ports: PortAllocator | None = None,
        metrics: MetricsSnapshot | None = None,
    ) -> None:
        self.store = store
        self.service = service
        self.namespace = service.metadata.namespace
        self.name = service.metadata.name
        self.record = record
        self.view = view
        self.supervisor = supervisor
        self.metrics = metrics
        self._wall = wall_clock
        self._allocate_ports = allocate_ports
        self._state_loaded: Any = None
        self._started: list[sup.Replica] = []  # started this tick (not in the view yet)
        self._route: router_mod.ServiceRoute | None = None
        self.errors: list[str] = []  # what apply could not do, for the runtime's log
        self._taken: list[int] = []  # commands this cycle took, not yet answered
        self._outcomes: dict[int, tuple[CommandOutcome, str]] = {}
        self._events: list[Event] = []  # apply's own (standby activations), for emit

    # -- helpers

    def own_replicas(self) -> list[sup.Replica]:
        return [
            r
            for r in self.view.replicas
            if r.spec.namespace == self.namespace and r.spec.service == self.name
        ] + self._started

    def _routed(self) -> dict[str, router_mod.Endpoint]:
        route = self.view.routes.get((self.namespace, self.name))
        if route is None:
            return {}
        return {e.name: e for rev in route.revisions for e in rev.endpoints}

    @property
    def route(self) -> router_mod.ServiceRoute | None:
        """The route HAProxy should run for the service after this tick: what ``apply``
        made of the plan, else (``mode: recommend``, or a cycle that failed before it
        acted) the weights last applied over the replicas that serve now. None: the
        service has no revision yet."""
        if self._route is None and self.record is not None:
            self._route = self._route_for(self.record)
        return self._route

    def _route_for(self, record: ServiceRecord) -> router_mod.ServiceRoute:
        return desired_route(
            self.namespace, self.name, record, self.own_replicas(), match_of(self.service.spec)
        )

    # -- what the driver asks

    def revisions(self) -> list[str]:
        return sorted(self.record.revisions) if self.record is not None else []

    def first_version(self) -> int:
        spec = self.service.spec.model
        return check_version(Path(spec.base_path), spec.version)

    def use_metrics(self, metrics: MetricsSnapshot) -> None:
        self.metrics = metrics

    def revision_states(self) -> list[RevisionState]:
        wall = self._wall()
        route = self.view.routes.get((self.namespace, self.name))
        weights = {r.name: r.weight for r in route.revisions} if route is not None else None
        routed = self._routed()
        mine = self.own_replicas()
        states: list[RevisionState] = []
        if self.record is None:
            return states
        record = self.record
        for rev, applied in sorted(record.revisions.items()):
            every = [r for r in mine if r.spec.revision == rev]
            pool = [
                r
                for r in every
                if r.spec.pod in record.standby and r.spec.pod not in record.draining
            ]
            pods = [r for r in every if r.spec.pod not in record.standby]  # serving
            draining = [r for r in pods if r.spec.pod in record.draining]
            ready = [
                r
                for r in pods
                if r.phase is sup.Phase.READY
                and r.spec.pod not in record.draining
                and (route is None or (r.spec.pod in routed and not routed[r.spec.pod].draining))
            ]
            starting = [
                r for r in pods if r.phase in _NOT_YET and r.spec.pod not in record.draining
            ]
            weight = weights.get(rev, 0) if weights is not None else applied.weight
            states.append(
                RevisionState(
                    name=rev,
                    version=applied.version,
                    desired=applied.replicas,
                    ready=len(ready),
                    starting=len(starting),
                    draining=len(draining),
                    weight=weight,
                    available=bool(ready),
                    standby=len(pool),
                    parked=sum(1 for r in pool if r.spec.pod in record.parked),
                    ready_pods=frozenset(
                        r.spec.pod
                        for r in ready
                        if r.ready_at is not None and wall - r.ready_at >= CPU_SETTLE_S
                    ),
                    loading_pods=frozenset(
                        r.spec.pod for r in pods if r.phase is sup.Phase.STARTING
                    ),
                )
            )
        return states

    # -- Backend

    def observe(self, now: float) -> Observed:
        spec = self.service.spec
        if self.metrics is None:
            raise RuntimeError("observe before use_metrics: the driver gives the tick's metrics")
        return observe(
            now,
            self.metrics,
            self.revision_states(),
            namespace=self.namespace,
            service=self.name,
            min_replicas=spec.autoscaling.min_replicas,
            max_replicas=spec.autoscaling.max_replicas,
            header_revision=self.record.header if self.record is not None else None,
            custom=self.metrics.custom_for(self.namespace, self.name),
        )

    def commands(self, now: float) -> list[Command]:
        taken = self.store.take_commands(self.namespace, self.name, now=self._wall())
        commands = []
        for queued in taken:
            try:
                commands.append(Command(Op(queued.op), queued.version, id=str(queued.id)))
            except ValueError:
                self.errors.append(f"unknown command {queued.op!r} ignored")
                self._outcomes[queued.id] = ("refused", f"unknown command {queued.op!r}")
                continue
            self._taken.append(queued.id)
        return commands

    def _settle(self, events: Sequence[Event]) -> None:
        """Record what became of the commands this cycle took, for the CLI waiting on
        them: refused (the CommandRefused event that names it), else carried out, with
        where the rollout stands now."""
        refused = {
            e.command: e.message
            for e in events
            if e.reason is EventReason.COMMAND_REFUSED and e.command is not None
        }
        rollout = getattr(self._state_loaded, "rollout", None)  # the state saved this cycle
        where = (
            ""
            if rollout is None
            else protocol.rollout_where(str(rollout.phase), rollout.step, rollout.message)
        )
        for ident in self._taken:
            error = refused.get(str(ident))
            self._outcomes[ident] = ("done", where) if error is None else ("refused", error)
        self._taken = []
        self.store.settle_commands(self.namespace, self.name, self._outcomes)
        self._outcomes = {}

    def fail_commands(self, why: str) -> None:
        """The cycle that took commands failed before it decided on them: say so."""
        for ident in self._taken:
            self._outcomes[ident] = ("failed", f"the controller's cycle failed: {why}")
        self._taken = []
        self.store.settle_commands(self.namespace, self.name, self._outcomes)
        self._outcomes = {}

    def apply(self, plan: Plan, now: float) -> None:
        """Start the replicas a revision lacks (its standby pool first), mark the ones too
        many as draining, park the pool's READY replicas, and make the route
        (:attr:`route`) the plan's weights over the replicas that serve; the record goes to
        the store. A new service gets its front ports here."""
        wall = self._wall()
        if self.record is None:
            if self._allocate_ports is None:
                raise RuntimeError(f"{self.namespace}/{self.name}: no ports for a new service")
            rest, grpc = self._allocate_ports()
            self.record = ServiceRecord(rest_port=rest, grpc_port=grpc)
        mine = self.own_replicas()
        alive = [r.spec.pod for r in mine]
        draining = dict(self.record.draining)
        pool = pool_mod.present(self.record.standby, alive)
        parked = pool_mod.present(self.record.parked, alive)
        ordinal = self.record.next_ordinal
        revisions = {
            r.name: RevisionRecord(version=r.version, replicas=r.replicas, weight=r.weight)
            for r in plan.revisions
        }
        standby = {r.name: r.standby for r in plan.revisions}
        for rev in sorted(set(revisions) | {r.spec.revision for r in mine}):
            pods = [r for r in mine if r.spec.revision == rev]
            moves = pool_mod.scale(
                pods,
                draining,
                pool,
                revisions[rev].replicas if rev in revisions else 0,
                standby.get(rev, 0),
            )
            for pod in moves.drain:
                draining[pod] = wall
            for pod in moves.activate:
                del pool[pod]
            if moves.activate:
                self._events.append(activated(rev, moves, parked, wall, now))
            for joins in (False,) * moves.start + (True,) * moves.start_standby:
                version = revisions[rev].version
                try:
                    started = self.supervisor.start(
                        self.replica_spec(rev, version, pod_name(rev, ordinal))
                    )
                except (sup.SupervisorError, OSError) as exc:
                    self.errors.append(f"{rev}: cannot start a replica: {exc}")
                    break
                ordinal += 1
                self._started.append(started)
                if joins:
                    pool[started.spec.pod] = wall
        self._set_quotas(self.own_replicas(), pool, parked, draining, wall)
        self.record = replace(
            self.record,
            revisions=revisions,
            header=plan.header_revision,
            draining=draining,
            next_ordinal=ordinal,
            standby=pool,
            parked=parked,
        )
        self._route = self._route_for(self.record)
        self.store.put_runtime(self.namespace, self.name, self.record.to_dict(), now=wall)

    def _set_quotas(
        self,
        replicas: Sequence[sup.Replica],
        pool: Mapping[str, float],
        parked: dict[str, float],
        draining: Mapping[str, float],
        wall: float,
    ) -> None:
        """Park the pool's READY replicas at ``standby.parkedCpu`` and give the ones that
        serve now (or load again) their CPU back; ``parked`` is updated in place. A quota
        that cannot be written is retried next tick (an error for the runtime's log)."""
        changes = pool_mod.quota(replicas, pool, parked, draining)
        if not changes.park and not changes.unpark:
            return
        config = self.service.spec.autoscaling.standby
        low = config.parked_cores() if config is not None else None
        for pod in changes.unpark:
            try:
                self.supervisor.set_cpu(pod, None)
            except sup.SupervisorError as exc:
                self.errors.append(f"cannot give a parked replica its CPU back: {exc}")
                continue
            del parked[pod]
        for pod in changes.park:
            if low is None:  # the spec no longer asks for standby: it drains instead
                continue
            try:
                self.supervisor.set_cpu(pod, low)
            except sup.SupervisorError as exc:
                self.errors.append(f"cannot park a standby replica: {exc}")
                continue
            parked[pod] = wall  # also where the CPU is not limited: nothing to lower

    def replica_spec(self, revision: str, version: int, pod: str) -> sup.ReplicaSpec:
        spec = self.service.spec
        resources = spec.runtime.resources
        batching = spec.runtime.batching
        return sup.ReplicaSpec(
            namespace=self.namespace,
            service=self.name,
            revision=revision,
            pod=pod,
            model_name=spec.model.name,
            base_path=Path(spec.model.base_path),
            version=version,
            cpu_cores=resources.cpu_cores(),
            memory_bytes=resources.memory_bytes(),
            batching=(
                (batching.max_batch_size, batching.batch_timeout_micros)
                if batching is not None
                else None
            ),
        )

    def load_state(self) -> Any:
        if self._state_loaded is None:
            text = self.store.get_loop_state(self.namespace, self.name)
            self._state_loaded = state_codec.loads(text) if text is not None else None
        return self._state_loaded

    def save_state(self, state: Any) -> None:
        self._state_loaded = state
        self.store.put_loop_state(self.namespace, self.name, state_codec.dumps(state))

    def load_status(self) -> ModelServiceStatus | None:
        data = self.store.get_status(self.namespace, self.name)
        return ModelServiceStatus.model_validate(data) if data is not None else None

    def write_status(self, status: ModelServiceStatus) -> None:
        previous = self.store.get_status(self.namespace, self.name)
        doc = status.model_dump(mode="json", by_alias=True, exclude_none=True)
        self.store.put_status(self.namespace, self.name, doc, now=self._wall())
        self._record_rollout(previous, status)

    def _record_rollout(
        self, previous: Mapping[str, Any] | None, status: ModelServiceStatus
    ) -> None:
        rollout = status.rollout
        if rollout is None or rollout.phase not in _TERMINAL:
            return
        before = (previous or {}).get("rollout") or {}
        if before.get("phase") == str(rollout.phase):
            return
        record = rollout.model_dump(mode="json", by_alias=True, exclude_none=True)
        # When it completes, the new version is already the stable one: say where it began.
        record["fromVersion"] = before.get("stableVersion", rollout.stable_version)
        record["toVersion"] = before.get("canaryVersion", rollout.canary_version)
        record.pop("state", None)
        self.store.append_rollout(self.namespace, self.name, record, now=self._wall())

    def emit(self, events: Sequence[Event]) -> None:
        if self._taken or self._outcomes:  # the cycle's last act: its commands answered
            self._settle(events)
        events, self._events = [*self._events, *events], []
        if not events:
            return
        self.store.append_events(
            self.namespace,
            self.name,
            [
                {
                    "time": e.time if math.isfinite(e.time) else self._wall(),
                    "type": str(e.type),
                    "reason": str(e.reason),
                    "message": e.message,
                }
                for e in events
            ],
        )


__all__ = [
    "EventReason",
    "LocalBackend",
    "ModelPathError",
    "RevisionRecord",
    "ServiceRecord",
    "TickView",
    "check_version",
    "desired_route",
    "drained",
    "match_of",
    "scale_revision",
    "versions_on_disk",
]
