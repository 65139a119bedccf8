"""The local runtime as the driver's fleet, on a real store (no processes): specs listed
or refused, faults in the service's own status, a new service's ports, and the route
``apply`` makes (the store is persistence only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from servectl.api import models
from servectl.backends.local import supervisor as sup
from servectl.backends.local.backend import LocalBackend, TickView
from servectl.backends.local.fleet import LocalFleet
from servectl.backends.local.record import RevisionRecord, ServiceRecord
from servectl.backends.local.store import Store
from servectl.controller.backend import EventReason
from servectl.controller.driver import first_plan
from servectl.planning.types import Plan, RevisionPlan

C, S = models.ConditionType, models.ConditionStatus
NOW = 1_800_000_000.0


def doc(name: str, header: tuple[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "model": {"name": name, "basePath": f"/models/{name}", "version": 1},
        "autoscaling": {"minReplicas": 2, "maxReplicas": 4},
    }
    if header is not None:
        match = {"header": {"name": header[0], "value": header[1]}}
        spec["rollout"] = {"strategy": "abTest", "abTest": {"match": match}}
    return {
        "apiVersion": "servectl.io/v1alpha1",
        "kind": "ModelService",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


class Recorder:
    """The supervisor's start, recorded: a started replica is STARTING, with no ports."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def start(self, spec: Any) -> sup.Replica:
        self.started.append(spec.pod)
        return sup.Replica(
            spec=spec,
            phase=sup.Phase.STARTING,
            pid=None,
            rest_port=None,
            grpc_port=None,
            restarts=0,
            started_at=None,
            ready_at=None,
            message="",
            last_error=None,
            cgroup=None,
        )


@pytest.fixture
def store(tmp_path: Path) -> Store:
    opened = Store.open(tmp_path / "state.db")
    yield opened  # type: ignore[misc]
    opened.close()


def fleet_of(store: Store, recorder: Recorder, pairs: list[tuple[int, int]]) -> LocalFleet:
    handed = iter(pairs)

    def allocate(taken: set[int]) -> tuple[int, int]:
        pair = next(handed)
        assert not taken & set(pair), "the fleet handed out ports already taken"
        return pair

    fleet = LocalFleet(
        store,
        recorder,  # type: ignore[arg-type]
        wall_clock=lambda: NOW,
        allocate_ports=allocate,
    )
    fleet.begin(TickView(replicas=(), routes={}), {})
    return fleet


def test_a_spec_that_no_longer_validates_is_listed_with_the_reason(store: Store) -> None:
    store.put_spec("default", "ok", doc("ok"), now=NOW)
    bad = doc("bad")
    bad["spec"]["autoscaling"] = {"minReplicas": 5, "maxReplicas": 2}
    # The store keeps the document as given (written by an older servectl, say); the
    # fleet validates it when it lists it.
    store.put_spec("default", "bad", bad, now=NOW)
    fleet = fleet_of(store, Recorder(), [])
    by_name = {entry.name: entry for entry in fleet.services()}
    assert by_name["bad"].service is None and by_name["bad"].problem
    assert "spec no longer valid" in by_name["bad"].problem
    assert by_name["ok"].service is not None and by_name["ok"].problem is None


def test_a_refusal_sets_ready_false_and_leaves_one_event_until_it_changes(store: Store) -> None:
    store.put_spec("default", "svc", doc("svc"), now=NOW)
    fleet = fleet_of(store, Recorder(), [])
    (entry,) = fleet.services()
    for _ in range(3):  # the fault lasts three ticks: one event
        fleet.refuse(entry, EventReason.RECONCILE_FAILED, "OSError: disk full", NOW)
    fleet.refuse(entry, EventReason.RECONCILE_FAILED, "OSError: no such file", NOW + 1)
    status = models.ModelServiceStatus.model_validate(store.get_status("default", "svc"))
    ready = status.condition(C.READY)
    assert ready is not None
    assert (ready.status, ready.reason, ready.message) == (
        S.FALSE,
        "ReconcileFailed",
        "OSError: no such file",
    )
    events = store.events("default", "svc")
    assert [(e.type, e.reason) for e in events] == [("Warning", "ReconcileFailed")] * 2


def test_new_services_in_one_tick_get_their_own_ports_and_first_routes(store: Store) -> None:
    for name in ("a", "b"):
        store.put_spec("default", name, doc(name), now=NOW)
    recorder = Recorder()
    fleet = fleet_of(store, recorder, [(8501, 8500), (8503, 8502)])
    backends = {}
    for entry in fleet.services():
        backend = fleet.open(entry)
        assert backend.revisions() == [] and backend.route is None
        assert entry.service is not None
        backend.apply(first_plan(entry.service, 1), NOW)
        backends[entry.name] = backend
    ports = {name: (b.record.rest_port, b.record.grpc_port) for name, b in backends.items()}
    assert ports == {"a": (8501, 8500), "b": (8503, 8502)}
    assert sorted(recorder.started) == ["a-v1-0", "a-v1-1", "b-v1-0", "b-v1-1"]
    route = backends["a"].route
    assert route is not None and route.rest_port == 8501
    # The weight is the plan's; the replicas just started do not serve yet.
    assert [(r.name, r.weight, r.endpoints) for r in route.revisions] == [("a-v1", 100, ())]
    # The store keeps the record (persistence), the route came from apply.
    assert store.get_runtime("default", "a") == backends["a"].record.to_dict()


def test_apply_makes_the_route_of_the_plan_and_a_second_apply_starts_nothing_twice(
    store: Store,
) -> None:
    store.put_spec("default", "ab", doc("ab", header=("x-variant", "b")), now=NOW)
    service = models.ModelService.model_validate(doc("ab", header=("x-variant", "b")))
    recorder = Recorder()
    backend = LocalBackend(
        store=store,
        service=service,
        record=ServiceRecord(8501, 8500, {"ab-v1": RevisionRecord(1, 0, 100)}),
        view=TickView(replicas=(), routes={}),
        supervisor=recorder,  # type: ignore[arg-type]
        wall_clock=lambda: NOW,
    )
    plan = Plan(
        revisions=(
            RevisionPlan("ab-v1", 1, 1, 80, "Steady", ""),
            RevisionPlan("ab-v2", 2, 1, 20, "Steady", ""),
        ),
        header_revision="ab-v2",
    )
    backend.apply(plan, NOW)
    backend.apply(plan, NOW)  # the same tick again: the replicas it started count
    assert recorder.started == ["ab-v1-0", "ab-v2-1"]
    route = backend.route
    assert route is not None
    assert [(r.name, r.weight) for r in route.revisions] == [("ab-v1", 80), ("ab-v2", 20)]
    assert route.match is not None and route.match.revision == "ab-v2"


def test_without_apply_the_route_is_the_weights_last_applied(store: Store) -> None:
    # mode: recommend (or a cycle that failed before acting): HAProxy keeps what it had.
    service = models.ModelService.model_validate(doc("svc"))
    backend = LocalBackend(
        store=store,
        service=service,
        record=ServiceRecord(
            8501,
            8500,
            {"svc-v1": RevisionRecord(1, 2, 70), "svc-v2": RevisionRecord(2, 1, 30)},
        ),
        view=TickView(replicas=(), routes={}),
        supervisor=Recorder(),  # type: ignore[arg-type]
        wall_clock=lambda: NOW,
    )
    route = backend.route
    assert route is not None
    assert [(r.name, r.weight) for r in route.revisions] == [("svc-v1", 70), ("svc-v2", 30)]
