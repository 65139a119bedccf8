"""Warm standby on the local runtime without processes: which replicas a revision starts,
takes from its pool, drains, parks and unparks (``servectl.backends.local.standby``), and
``LocalBackend.apply`` carrying it out on a real store with a recording supervisor: the
pool started beside the serving replicas, parked once READY, taken first by a scale-up
(no process started), refilled behind it, never routed, and kept in the record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from servectl.api import models
from servectl.backends.local import standby as pool
from servectl.backends.local import supervisor as sup
from servectl.backends.local.backend import LocalBackend, TickView
from servectl.backends.local.record import RevisionRecord, ServiceRecord
from servectl.backends.local.store import Store
from servectl.controller.spec import service_spec
from servectl.planning.types import Plan, RevisionPlan
from tests.unit.backends.local.test_local_backend import replica

READY, STARTING = sup.Phase.READY, sup.Phase.STARTING
NOW = 1_800_000_000.0

# ---------------------------------------------------------------- the pure moves


def test_a_scale_up_takes_ready_pool_members_first_then_loading_ones_then_starts_cold() -> None:
    pods = [
        replica("cost-v1-0"),
        replica("cost-v1-1", STARTING),  # pool, loading
        replica("cost-v1-2"),  # pool, parked
        replica("cost-v1-3"),  # pool, parked
    ]
    members = {"cost-v1-1", "cost-v1-2", "cost-v1-3"}
    moves = pool.scale(pods, (), members, target=3, standby=3)
    assert moves.activate == ("cost-v1-2", "cost-v1-3")  # READY ones, the oldest first
    assert moves.start == 0 and moves.drain == ()
    assert moves.start_standby == 2  # one left in the pool: refilled to three behind it
    moves = pool.scale(pods, (), members, target=6, standby=1)
    assert moves.activate == ("cost-v1-2", "cost-v1-3", "cost-v1-1")
    assert (moves.start, moves.start_standby) == (2, 1)


def test_a_scale_down_drains_serving_replicas_and_never_parks_them() -> None:
    pods = [replica("cost-v1-0"), replica("cost-v1-1"), replica("cost-v1-2")]
    moves = pool.scale(pods, (), {"cost-v1-2"}, target=1, standby=1)
    assert moves.drain == ("cost-v1-1",)
    assert moves.activate == () and moves.start == moves.start_standby == 0


def test_a_pool_larger_than_asked_drains_its_excess_loading_ones_first() -> None:
    pods = [replica("cost-v1-0"), replica("cost-v1-1"), replica("cost-v1-2", STARTING)]
    moves = pool.scale(pods, (), {"cost-v1-1", "cost-v1-2"}, target=1, standby=1)
    assert moves.drain == ("cost-v1-2",)
    assert pool.scale(pods, (), {"cost-v1-1", "cost-v1-2"}, 1, 0).drain == (
        "cost-v1-2",
        "cost-v1-1",
    )


def test_leaving_pool_members_do_not_count() -> None:
    pods = [replica("cost-v1-0"), replica("cost-v1-1")]
    moves = pool.scale(pods, ["cost-v1-1"], {"cost-v1-1"}, target=1, standby=1)
    assert moves.start_standby == 1 and moves.drain == ()


def test_without_a_pool_it_is_the_plain_scale() -> None:
    pods = [replica("cost-v1-0"), replica("cost-v1-1", STARTING)]
    assert pool.scale(pods, (), (), 4) == pool.Moves(start=2)
    assert pool.scale(pods, (), (), 1) == pool.Moves(drain=("cost-v1-1",))


def test_quota_parks_ready_members_and_unparks_what_serves_or_loads_again() -> None:
    pods = [
        replica("cost-v1-0"),  # serving, parked before: activated, so its CPU comes back
        replica("cost-v1-1"),  # pool, READY, not parked yet
        replica("cost-v1-2", STARTING),  # pool, parked, its process restarted: loads again
        replica("cost-v1-3"),  # pool, parked: stays
        replica("cost-v1-4"),  # pool, draining: left as it is
    ]
    changes = pool.quota(
        pods,
        {"cost-v1-1", "cost-v1-2", "cost-v1-3", "cost-v1-4"},
        {"cost-v1-0", "cost-v1-2", "cost-v1-3"},
        {"cost-v1-4"},
    )
    assert changes == pool.Quota(park=("cost-v1-1",), unpark=("cost-v1-0", "cost-v1-2"))


def test_present_forgets_pods_that_have_gone() -> None:
    assert pool.present({"a": 1.0, "b": 2.0}, ["b", "c"]) == {"b": 2.0}


# ---------------------------------------------------------------- the spec


def test_the_spec_field_feeds_the_planner_and_the_engine() -> None:
    service = models.ModelService.model_validate(doc(standby={"replicas": 2}))
    assert service_spec(service).standby == 2
    assert service.spec.autoscaling.to_config().standby == 2
    assert service.spec.autoscaling.standby is not None
    assert service.spec.autoscaling.standby.parked_cores() == pytest.approx(0.02)
    assert service_spec(models.ModelService.model_validate(doc())).standby == 0


@pytest.mark.parametrize(
    ("standby", "says"),
    [
        ({"replicas": -1}, "greater than or equal to 0"),
        ({"replicas": 1, "parkedCpu": "0"}, "parkedCpu must be greater than zero"),
        ({"replicas": 1, "parkedCpu": "lots"}, "parkedCpu"),
    ],
)
def test_a_bad_standby_names_the_field(standby: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        models.ModelService.model_validate(doc(standby=standby))


# ---------------------------------------------------------------- apply, carried out


def doc(standby: dict[str, Any] | None = None) -> dict[str, Any]:
    autoscaling: dict[str, Any] = {"minReplicas": 1, "maxReplicas": 8}
    if standby is not None:
        autoscaling["standby"] = standby
    return {
        "apiVersion": "servectl.io/v1alpha1",
        "kind": "ModelService",
        "metadata": {"name": "cost", "namespace": "default"},
        "spec": {
            "model": {"name": "cost_model", "basePath": "/models/cost_model", "version": 1},
            "runtime": {"resources": {"cpu": "500m", "memory": "1Gi"}},
            "autoscaling": autoscaling,
        },
    }


class Machine:
    """The supervisor's start and quota writes, recorded; replicas READY when told."""

    def __init__(self) -> None:
        self.replicas: dict[str, sup.Replica] = {}
        self.started: list[str] = []
        self.cpu: dict[str, float | None] = {}

    def start(self, spec: Any) -> sup.Replica:
        self.started.append(spec.pod)
        self.replicas[spec.pod] = replica(spec.pod, STARTING, port=9000 + 2 * len(self.started))
        return self.replicas[spec.pod]

    def set_cpu(self, pod: str, cores: float | None) -> bool:
        if pod not in self.replicas:
            raise sup.SupervisorError(f"no replica {pod}")
        self.cpu[pod] = cores
        return True

    def ready(self, *pods: str) -> None:
        for pod in pods:
            self.replicas[pod] = replica(pod, READY, port=self.replicas[pod].rest_port or 9000)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    opened = Store.open(tmp_path / "state.db")
    opened.put_spec("default", "cost", doc(standby={"replicas": 1}), now=NOW)
    yield opened  # type: ignore[misc]
    opened.close()


def tick(store: Store, machine: Machine, serving: int, standby: int) -> LocalBackend:
    """One apply of a plan with ``serving`` replicas and a pool of ``standby``."""
    text = store.get_runtime("default", "cost")
    record = ServiceRecord.from_dict(text) if text is not None else None
    backend = LocalBackend(
        store=store,
        service=models.ModelService.model_validate(doc(standby={"replicas": standby})),
        record=record,
        view=TickView(replicas=list(machine.replicas.values()), routes={}),
        supervisor=machine,  # type: ignore[arg-type]
        wall_clock=lambda: NOW,
        allocate_ports=lambda: (8501, 8500),
    )
    plan = Plan(revisions=(RevisionPlan("cost-v1", 1, serving, 100, "test", standby=standby),))
    backend.apply(plan, NOW)
    return backend


def routed(backend: LocalBackend) -> set[str]:
    route = backend.route
    assert route is not None
    return {e.name for rev in route.revisions for e in rev.endpoints}


def test_apply_starts_parks_activates_and_refills_the_pool(store: Store) -> None:
    machine = Machine()
    tick(store, machine, serving=1, standby=1)
    assert machine.started == ["cost-v1-0", "cost-v1-1"]
    record = ServiceRecord.from_dict(store.get_runtime("default", "cost"))
    assert set(record.standby) == {"cost-v1-1"} and record.parked == {}
    assert machine.cpu == {}  # loading: at the revision's CPU

    machine.ready("cost-v1-0", "cost-v1-1")
    backend = tick(store, machine, serving=1, standby=1)
    assert machine.cpu == {"cost-v1-1": pytest.approx(0.02)}  # parked once READY
    assert routed(backend) == {"cost-v1-0"}  # the pool is never routed
    states = {s.name: s for s in backend.revision_states()}
    assert (states["cost-v1"].ready, states["cost-v1"].standby) == (1, 1)
    assert states["cost-v1"].parked == 1

    backend = tick(store, machine, serving=2, standby=1)  # a scale-up of one
    assert machine.started == ["cost-v1-0", "cost-v1-1", "cost-v1-2"]  # only the refill
    assert machine.cpu["cost-v1-1"] is None  # its CPU back: the spec's
    assert routed(backend) == {"cost-v1-0", "cost-v1-1"}  # routed the same tick
    backend.emit([])
    (event,) = store.events("default", "cost")
    assert event.reason == "StandbyActivated"
    assert "cost-v1-1 (parked 0 s)" in event.message and "1 started to refill" in event.message
    record = ServiceRecord.from_dict(store.get_runtime("default", "cost"))
    assert set(record.standby) == {"cost-v1-2"} and record.parked == {}


def test_the_pool_goes_when_the_plan_asks_for_none(store: Store) -> None:
    machine = Machine()
    tick(store, machine, serving=1, standby=1)
    machine.ready("cost-v1-0", "cost-v1-1")
    tick(store, machine, serving=1, standby=1)
    tick(store, machine, serving=1, standby=0)
    record = ServiceRecord.from_dict(store.get_runtime("default", "cost"))
    assert set(record.draining) == {"cost-v1-1"}
    assert machine.started == ["cost-v1-0", "cost-v1-1"]


def test_the_record_keeps_the_pool_for_a_restarted_controller() -> None:
    rec = ServiceRecord(
        rest_port=1,
        grpc_port=2,
        revisions={"cost-v1": RevisionRecord(1, 1, 100)},
        standby={"cost-v1-1": NOW},
        parked={"cost-v1-1": NOW + 1},
    )
    assert ServiceRecord.from_dict(rec.to_dict()) == rec
    old = rec.to_dict()
    del old["standby"], old["parked"]  # a record written before standby existed
    assert ServiceRecord.from_dict(old).standby == {}
