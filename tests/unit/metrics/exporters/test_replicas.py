"""The replica registry: parsing with errors that name the field, and re-reading the file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from servectl.metrics.exporters.replicas import (
    ReplicaFile,
    ReplicaFileCollector,
    ReplicasFileError,
    StaticReplicas,
    parse_replicas,
)
from tests.unit.metrics.exporters.helpers import collect, replica, write_replicas

GOOD = {
    "namespace": "default",
    "service": "resnet",
    "revision": "resnet-v2",
    "pod": "resnet-v2-0",
    "container": "model-server",
    "pid": 1234,
    "cgroup": "/sys/fs/cgroup/cpu/servectl/resnet-v2-0",
    "cpu_request_cores": 1.0,
}


def doc(*replicas: dict[str, object]) -> str:
    return json.dumps({"replicas": list(replicas)})


def test_parses_the_documented_example() -> None:
    (r,) = parse_replicas(doc(GOOD))
    assert (r.namespace, r.service, r.revision, r.pod, r.container) == (
        "default",
        "resnet",
        "resnet-v2",
        "resnet-v2-0",
        "model-server",
    )
    assert r.pid == 1234
    assert r.cgroup == "/sys/fs/cgroup/cpu/servectl/resnet-v2-0"
    assert r.cpu_request_cores == 1.0


def test_cgroup_and_request_are_optional_and_container_defaults() -> None:
    minimal = {k: v for k, v in GOOD.items() if k not in {"cgroup", "cpu_request_cores"}}
    del minimal["container"]
    (r,) = parse_replicas(doc(minimal))
    assert r.cgroup is None and r.cpu_request_cores is None and r.container == "model-server"
    (r,) = parse_replicas(doc(GOOD | {"cgroup": None}))
    assert r.cgroup is None


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        ({"pid": -3}, "replicas[2].pid: Input should be greater than 0"),
        ({"pid": "abc"}, "replicas[2].pid: Input should be a valid integer"),
        ({"pod": ""}, "replicas[2].pod: String should have at least 1 character"),
        ({"cpu_request_cores": 0}, "replicas[2].cpu_request_cores: Input should be greater than 0"),
        ({"cpu_requests_cores": 1}, "replicas[2].cpu_requests_cores: Extra inputs"),
    ],
)
def test_errors_name_the_field(bad: dict[str, object], expected: str) -> None:
    ok = [GOOD | {"pod": f"p{i}"} for i in range(2)]
    with pytest.raises(ReplicasFileError) as info:
        parse_replicas(doc(*ok, GOOD | {"pod": "p2"} | bad), "reps.json")
    assert str(info.value).startswith("reps.json: ")
    assert expected in str(info.value)


def test_a_missing_field_is_named() -> None:
    without_pid = {k: v for k, v in GOOD.items() if k != "pid"}
    with pytest.raises(ReplicasFileError, match=r"replicas\[0\]\.pid: Field required"):
        parse_replicas(doc(without_pid))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{not json", "not JSON"),
        ("[]", "(top level): Input should be a valid dictionary"),
        ("{}", "replicas: Field required"),
        ('{"replicas": [1]}', "replicas[0]: Input should be a valid dictionary"),
    ],
)
def test_malformed_documents(text: str, expected: str) -> None:
    with pytest.raises(ReplicasFileError) as info:
        parse_replicas(text)
    assert expected in str(info.value)


def test_a_pod_listed_twice_in_a_namespace_is_an_error() -> None:
    with pytest.raises(ReplicasFileError, match=r"replicas\[1\]\.pod: default/resnet-v2-0 .*"):
        parse_replicas(doc(GOOD, GOOD | {"pid": 99}))
    # The same pod name in another namespace is another pod.
    assert len(parse_replicas(doc(GOOD, GOOD | {"namespace": "prod"}))) == 2


def test_file_missing_then_written_then_malformed_then_fixed_then_removed(tmp_path: Path) -> None:
    path = tmp_path / "replicas.json"
    warnings: list[str] = []
    source = ReplicaFile(path, warn=warnings.append)
    assert list(source.replicas()) == [] and source.error is None

    first = [replica("a-0", 10), replica("a-1", 11)]
    write_replicas(path, first)
    assert [r.pod for r in source.replicas()] == ["a-0", "a-1"]

    path.write_text(doc(GOOD | {"pid": 0}))
    assert [r.pod for r in source.replicas()] == ["a-0", "a-1"]  # last good list kept
    assert source.error is not None and "replicas[0].pid" in source.error
    assert source.replicas() and len(warnings) == 1  # warned once per version of the file
    assert "keeping the last good list: 2 replicas" in warnings[0]

    write_replicas(path, [replica("b-0", 20)])
    assert [r.pod for r in source.replicas()] == ["b-0"] and source.error is None

    path.unlink()
    assert list(source.replicas()) == [] and source.error is None


def test_file_is_reread_only_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "replicas.json"
    write_replicas(path, [replica("a-0", 10)])
    source = ReplicaFile(path)
    first = source.replicas()
    assert source.replicas() is first  # unchanged file: cached
    stat = path.stat()
    write_replicas(path, [replica("a-9", 10)])  # same size, new inode
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert [r.pod for r in source.replicas()] == ["a-9"]


def test_a_malformed_file_at_start_serves_no_replicas(tmp_path: Path) -> None:
    path = tmp_path / "replicas.json"
    path.write_text("{")
    warnings: list[str] = []
    source = ReplicaFile(path, warn=warnings.append)
    assert list(source.replicas()) == []
    assert warnings and "not JSON" in warnings[0] and "0 replicas" in warnings[0]


def test_replica_file_collector_reports_count_and_error(tmp_path: Path) -> None:
    path = tmp_path / "replicas.json"
    source = ReplicaFile(path, warn=lambda _: None)
    write_replicas(path, [replica("a-0", 10), replica("a-1", 11)])
    _, series = collect(ReplicaFileCollector(source))
    assert series[("servectl_exporter_replicas", frozenset())] == 2
    assert series[("servectl_exporter_replicas_file_error", frozenset())] == 0
    path.write_text("nope")
    _, series = collect(ReplicaFileCollector(source))
    assert series[("servectl_exporter_replicas", frozenset())] == 2
    assert series[("servectl_exporter_replicas_file_error", frozenset())] == 1


def test_static_replicas() -> None:
    r = replica()
    assert list(StaticReplicas((r,)).replicas()) == [r]
