"""One tick over every service of a fleet: the per-tick driver the local runtime and the
Kubernetes controller both run around :func:`~servectl.controller.reconcile.reconcile_once`.

A **fleet** is a place with many ModelServices (the local runtime's store, a cluster's
watch caches). Each tick, with one ``now``::

    list      fleet.services()                     each service, or why its spec is refused
    open      fleet.open(service) -> FleetService  one Backend per service for this tick
              decider (cached per spec generation), decider.analysis(state)
    measure   fleet.snapshot(request)              ONE metrics round for every service: the
                                                   revisions each runs, the services in an
                                                   analysis, the custom checks deciders asked for
    loop      per service: bootstrap (a first revision, as a Plan) when it has none,
              then reconcile_once(backend, decider, now)
    forget    deciders of services that are gone

A service that fails (a spec servectl refuses, a model path with no version, an
exception anywhere in its cycle) is reported in its own status (``Ready=False`` with the
reason) and by one event when that changes, through :meth:`Fleet.refuse`; the other
services go on.

Pure: the fleet does the I/O behind its protocol; time is the ``now`` passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from servectl.api import models
from servectl.autoscaling import config
from servectl.controller.backend import Backend, Event, EventReason, EventType
from servectl.controller.decide import ServectlDecider
from servectl.controller.reconcile import Cycle, reconcile_once
from servectl.controller.spec import PolicySpecError, policy_for, service_spec
from servectl.metrics.assemble import CustomRequest, MetricsSnapshot, RevisionKey
from servectl.planning.types import Plan, PlanReason, RevisionPlan

ServiceKey = tuple[str, str]
"""(namespace, name)."""


@dataclass(frozen=True)
class Listed:
    """One service as the fleet lists it this tick: its spec, or why servectl refuses it."""

    namespace: str
    name: str
    generation: int
    service: models.ModelService | None
    problem: str | None = None  # the refused spec's field and fix (service is then None)

    @property
    def key(self) -> ServiceKey:
        return (self.namespace, self.name)


@dataclass(frozen=True)
class SnapshotRequest:
    """What the tick's one metrics round must cover."""

    expected: tuple[RevisionKey, ...] = ()
    analysis_services: tuple[str, ...] = ()
    custom: tuple[CustomRequest, ...] = ()


class FleetService(Backend, Protocol):
    """One service of a fleet for one tick: a :class:`Backend`, and what the driver asks
    of it around the loop."""

    def revisions(self) -> Sequence[str]:
        """The revisions the service runs now (none: it has never started)."""
        ...

    def use_metrics(self, metrics: MetricsSnapshot) -> None:
        """The tick's metrics round, before :meth:`observe`."""
        ...

    def first_version(self) -> int:
        """The model version a new service starts with; raises ``ValueError`` naming the
        field and the fix when there is none to serve."""
        ...


class Fleet(Protocol):
    """Many services in one place: the local runtime, or a Kubernetes cluster."""

    @property
    def routing(self) -> config.Routing:
        """How the place's router spreads a revision's requests (the engine sizes for it)."""
        ...

    def services(self) -> Sequence[Listed]: ...

    def policies(self, namespace: str) -> Mapping[str, models.ScalingPolicy]:
        """The ScalingPolicy documents a spec's ``policy.ref`` may name."""
        ...

    def open(self, listed: Listed) -> FleetService: ...

    def snapshot(self, request: SnapshotRequest) -> MetricsSnapshot: ...

    def refuse(self, listed: Listed, reason: EventReason, message: str, now: float) -> None:
        """Say in the service's own status (``Ready=False``, ``reason``) and, when that
        changes, in an event, that servectl cannot run it as it is."""
        ...


@dataclass
class TickResult:
    """What one tick did, per service."""

    time: float
    cycles: dict[ServiceKey, Cycle] = field(default_factory=dict)
    backends: dict[ServiceKey, FleetService] = field(default_factory=dict)
    errors: dict[ServiceKey, str] = field(default_factory=dict)
    services: int = 0


def first_plan(service: models.ModelService, version: int) -> Plan:
    """A new service's first revision: ``version`` at minReplicas with all the traffic."""
    replicas = service.spec.autoscaling.min_replicas
    return Plan(
        revisions=(
            RevisionPlan(
                name=service_spec(service).revision_name(version),
                version=version,
                replicas=replicas,
                weight=100,
                reason=str(PlanReason.STEADY),
                message="first revision",
            ),
        )
    )


@dataclass
class _Cached:
    generation: int
    decider: ServectlDecider


@dataclass
class _Opened:
    listed: Listed
    service: models.ModelService
    decider: ServectlDecider
    backend: FleetService
    state: Any


_Ran = tuple[ServiceKey, Cycle | None, str | None]
Mapper = Callable[[Callable[[_Opened], _Ran], Iterable[_Opened]], Iterable[_Ran]]
"""``map``, or a thread pool's ``map`` when the fleet's writes wait on a server."""


class Driver:
    """Runs :meth:`tick` for a fleet; keeps each service's decider while its spec's
    generation holds (building one compiles the spec's CEL policy)."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self._deciders: dict[ServiceKey, _Cached] = {}

    def decider(self, listed: Listed, service: models.ModelService) -> ServectlDecider:
        """The service's decider; raises :class:`PolicySpecError` naming the field."""
        cached = self._deciders.get(listed.key)
        if cached is not None and cached.generation == listed.generation:
            return cached.decider
        policy = policy_for(
            service, self.fleet.policies(listed.namespace), routing=self.fleet.routing
        )
        decider = ServectlDecider(service_spec(service), policy)
        self._deciders[listed.key] = _Cached(listed.generation, decider)
        return decider

    def cached(self, key: ServiceKey) -> ServectlDecider | None:
        """The decider the last tick used for ``key`` (None: none yet, or gone)."""
        cached = self._deciders.get(key)
        return None if cached is None else cached.decider

    def tick(self, now: float, *, mapper: Mapper = map) -> TickResult:
        listed = self.fleet.services()
        result = TickResult(time=now, services=len(listed))
        opened: list[_Opened] = []
        for entry in listed:
            try:
                item = self._open(entry, now, result)
            except Exception as exc:  # one service's failure must not stop the others
                self._fail(entry, EventReason.RECONCILE_FAILED, _describe(exc), now, result)
                continue
            if item is not None:
                opened.append(item)
        metrics = self.fleet.snapshot(_request(opened))
        for key, cycle, error in mapper(lambda item: self._run(item, metrics, now), opened):
            if cycle is not None:
                result.cycles[key] = cycle
            if error is not None:
                result.errors[key] = error
        live = {entry.key for entry in listed}
        for key in set(self._deciders) - live:
            del self._deciders[key]
        return result

    def _open(self, entry: Listed, now: float, result: TickResult) -> _Opened | None:
        if entry.service is None:
            self._fail(entry, EventReason.INVALID_SPEC, entry.problem or "invalid", now, result)
            return None
        try:
            decider = self.decider(entry, entry.service)
        except PolicySpecError as exc:
            self._fail(entry, EventReason.INVALID_SPEC, str(exc), now, result)
            return None
        backend = self.fleet.open(entry)
        result.backends[entry.key] = backend
        return _Opened(entry, entry.service, decider, backend, backend.load_state())

    def _run(self, item: _Opened, metrics: MetricsSnapshot, now: float) -> _Ran:
        entry, backend = item.listed, item.backend
        try:
            backend.use_metrics(metrics)
            if item.state is None and not backend.revisions():
                try:
                    version = backend.first_version()
                except ValueError as exc:
                    message = str(exc)
                    self.fleet.refuse(entry, EventReason.MODEL_NOT_FOUND, message, now)
                    return entry.key, None, message
                plan = first_plan(item.service, version)
                backend.apply(plan, now)
                first = plan.revisions[0]
                backend.emit(
                    [
                        _event(
                            now,
                            EventReason.CREATED,
                            f"revision {first.name} at {first.replicas} replicas",
                        )
                    ]
                )
            return entry.key, reconcile_once(backend, item.decider, now), None
        except Exception as exc:  # one service's failure must not stop the others
            message = _describe(exc)
            try:
                self.fleet.refuse(entry, EventReason.RECONCILE_FAILED, message, now)
            except Exception as also:  # the failure report itself failed: say both
                message = f"{message}; and reporting it failed: {_describe(also)}"
            return entry.key, None, message

    def _fail(
        self, entry: Listed, reason: EventReason, message: str, now: float, result: TickResult
    ) -> None:
        result.errors[entry.key] = message
        try:
            self.fleet.refuse(entry, reason, message, now)
        except Exception as exc:
            result.errors[entry.key] = f"{message}; and reporting it failed: {_describe(exc)}"


def _request(opened: Sequence[_Opened]) -> SnapshotRequest:
    expected: list[RevisionKey] = []
    rolling: list[str] = []
    custom: list[CustomRequest] = []
    for item in opened:
        ns, name = item.listed.key
        revisions = list(item.backend.revisions())
        expected += [(ns, name, rev) for rev in revisions]
        if len(revisions) > 1:
            rolling.append(name)
        need = item.decider.analysis(item.state)
        if need is not None:
            custom.append(CustomRequest(ns, name, need.revision, need.stable, need.checks))
    return SnapshotRequest(tuple(expected), tuple(rolling), tuple(custom))


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _event(now: float, reason: EventReason, message: str) -> Event:
    return Event(now, EventType.NORMAL, reason, message)
