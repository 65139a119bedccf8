"""The local backend's pure decisions: which replicas to start and drain, what HAProxy
should route, when a draining replica may stop; its record; model version checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from servectl.api import models
from servectl.backends.local import backend as lb
from servectl.backends.local import router as router_mod
from servectl.backends.local import supervisor as sup


def replica(pod: str, phase: sup.Phase = sup.Phase.READY, *, port: int = 9000) -> sup.Replica:
    revision = pod.rsplit("-", 1)[0]
    return sup.Replica(
        spec=sup.ReplicaSpec(
            namespace="default",
            service="cost",
            revision=revision,
            pod=pod,
            model_name="cost_model",
            base_path=Path("/models/cost_model"),
            version=int(revision.rsplit("v", 1)[1]),
        ),
        phase=phase,
        pid=1234,
        rest_port=port,
        grpc_port=port + 1,
        restarts=0,
        started_at=0.0,
        ready_at=0.0 if phase is sup.Phase.READY else None,
        message="",
        last_error=None,
        cgroup=None,
    )


def record(**revisions: tuple[int, int, int]) -> lb.ServiceRecord:
    return lb.ServiceRecord(
        rest_port=8501,
        grpc_port=8500,
        revisions={
            name.replace("_", "-"): lb.RevisionRecord(v, n, w)
            for name, (v, n, w) in revisions.items()
        },
    )


# ---------------------------------------------------------------- scale_revision


def test_scale_up_starts_the_missing_replicas() -> None:
    assert lb.scale_revision([replica("cost-v1-0")], (), 3) == (2, [])


def test_scale_down_drains_replicas_that_do_not_serve_first_then_the_newest() -> None:
    pods = [
        replica("cost-v1-0"),
        replica("cost-v1-1"),
        replica("cost-v1-2", sup.Phase.STARTING),
        replica("cost-v1-3"),
    ]
    start, drain = lb.scale_revision(pods, (), 2)
    assert start == 0
    assert drain == ["cost-v1-2", "cost-v1-3"]


def test_draining_and_stopping_replicas_do_not_count_toward_the_target() -> None:
    pods = [replica("cost-v1-0"), replica("cost-v1-1"), replica("cost-v1-2", sup.Phase.STOPPING)]
    assert lb.scale_revision(pods, ["cost-v1-1"], 2) == (1, [])
    assert lb.scale_revision(pods, ["cost-v1-1"], 1) == (0, [])


# ---------------------------------------------------------------- desired_route


def test_only_ready_replicas_are_routed_and_draining_ones_are_marked() -> None:
    rec = lb.ServiceRecord(
        rest_port=8501,
        grpc_port=8500,
        revisions={"cost-v1": lb.RevisionRecord(1, 2, 90), "cost-v2": lb.RevisionRecord(2, 1, 10)},
        draining={"cost-v1-1": 100.0},
    )
    pods = [
        replica("cost-v1-0", port=9000),
        replica("cost-v1-1", port=9002),
        replica("cost-v1-2", sup.Phase.STARTING, port=9004),
        replica("cost-v2-3", port=9006),
    ]
    route = lb.desired_route("default", "cost", rec, pods, None)
    assert (route.rest_port, route.grpc_port) == (8501, 8500)
    by_name = {r.name: r for r in route.revisions}
    assert by_name["cost-v1"].weight == 90 and by_name["cost-v2"].weight == 10
    assert by_name["cost-v1"].endpoints == (
        router_mod.Endpoint("cost-v1-0", 9000, 9001),
        router_mod.Endpoint("cost-v1-1", 9002, 9003, draining=True),
    )
    assert [e.name for e in by_name["cost-v2"].endpoints] == ["cost-v2-3"]
    assert route.match is None


def test_a_revision_no_longer_planned_keeps_its_draining_endpoints_at_weight_zero() -> None:
    rec = lb.ServiceRecord(
        rest_port=8501,
        grpc_port=8500,
        revisions={"cost-v2": lb.RevisionRecord(2, 1, 100)},
        draining={"cost-v1-0": 5.0},
    )
    route = lb.desired_route("default", "cost", rec, [replica("cost-v1-0")], None)
    old = next(r for r in route.revisions if r.name == "cost-v1")
    assert old.weight == 0 and old.endpoints[0].draining


def test_the_header_route_follows_the_record() -> None:
    rec = record(cost_v1=(1, 1, 100), cost_v2=(2, 1, 0))
    match = router_mod.Match("header", "x-variant", "b", revision="")
    assert lb.desired_route("default", "cost", rec, [], match).match is None
    routed = lb.desired_route(
        "default", "cost", lb.ServiceRecord(**{**vars(rec), "header": "cost-v2"}), [], match
    )
    assert routed.match == router_mod.Match("header", "x-variant", "b", revision="cost-v2")


# ---------------------------------------------------------------- drained


def test_a_draining_replica_stops_once_out_of_the_router_with_nothing_in_flight() -> None:
    rec = lb.ServiceRecord(rest_port=1, grpc_port=2, draining={"cost-v1-0": 100.0})
    pods = {"cost-v1-0": replica("cost-v1-0")}
    # Still routed (the router has not applied the drain yet): wait.
    assert lb.drained(rec, pods, {}, ["cost-v1-0"], 101.0, 30) == []
    # Out of the router but a request in flight: wait.
    assert lb.drained(rec, pods, {"cost-v1-0": 1}, [], 101.0, 30) == []
    assert lb.drained(rec, pods, {"cost-v1-0": 0}, [], 101.0, 30) == ["cost-v1-0"]
    # drainSeconds over: stop whatever is in flight.
    assert lb.drained(rec, pods, {"cost-v1-0": 3}, [], 130.0, 30) == ["cost-v1-0"]


def test_a_draining_replica_that_never_served_stops_at_once() -> None:
    rec = lb.ServiceRecord(rest_port=1, grpc_port=2, draining={"cost-v1-0": 100.0})
    pods = {"cost-v1-0": replica("cost-v1-0", sup.Phase.STARTING)}
    assert lb.drained(rec, pods, {}, ["cost-v1-0"], 100.0, 30) == ["cost-v1-0"]
    stopping = {"cost-v1-0": replica("cost-v1-0", sup.Phase.STOPPING)}
    assert lb.drained(rec, stopping, {}, [], 200.0, 30) == []


# ---------------------------------------------------------------- record, versions


def test_the_record_round_trips_through_json() -> None:
    rec = lb.ServiceRecord(
        rest_port=8503,
        grpc_port=8502,
        revisions={"cost-v1": lb.RevisionRecord(1, 3, 100)},
        header="cost-v1",
        draining={"cost-v1-4": 12.5},
        next_ordinal=5,
    )
    assert lb.ServiceRecord.from_dict(rec.to_dict()) == rec


def _version(base: Path, v: int) -> None:
    (base / str(v)).mkdir(parents=True)
    (base / str(v) / "saved_model.pb").write_bytes(b"")


def test_versions_on_disk_and_their_errors(tmp_path: Path) -> None:
    base = tmp_path / "m"
    with pytest.raises(lb.ModelPathError, match=r"spec.model.basePath: .* does not exist"):
        lb.check_version(base, None)
    base.mkdir()
    (base / "notes").mkdir()
    (base / "7").mkdir()  # no SavedModel in it
    with pytest.raises(lb.ModelPathError, match=r"basePath: no version under .*/1/saved_model.pb"):
        lb.check_version(base, None)
    _version(base, 1)
    _version(base, 3)
    assert lb.versions_on_disk(base) == [1, 3]
    assert lb.check_version(base, None) == 3
    assert lb.check_version(base, 1) == 1
    with pytest.raises(lb.ModelPathError, match=r"spec.model.version: version 2 .*it has 1, 3"):
        lb.check_version(base, 2)


def test_match_of_the_spec() -> None:
    def spec(rollout: dict[str, object] | None) -> models.ModelServiceSpec:
        doc: dict[str, object] = {"model": {"name": "m", "basePath": "/m"}}
        if rollout is not None:
            doc["rollout"] = rollout
        return models.ModelServiceSpec.model_validate(doc)

    assert lb.match_of(spec(None)) is None
    ab = spec(
        {
            "strategy": "abTest",
            "abTest": {
                "match": {"header": {"name": "x-variant", "value": "b"}},
                "durationSeconds": 60,
                "winnerMetric": "latencyP99",
            },
        }
    )
    assert lb.match_of(ab) == router_mod.Match("header", "x-variant", "b", revision="")
    cookie = spec(
        {
            "strategy": "abTest",
            "abTest": {
                "match": {"cookie": {"name": "group", "value": "b"}},
                "durationSeconds": 60,
                "winnerMetric": "latencyP99",
            },
        }
    )
    assert lb.match_of(cookie) == router_mod.Match("cookie", "group", "b", revision="")
