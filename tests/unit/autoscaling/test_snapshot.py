"""The snapshot JSON form: round trip and errors that name the field."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servectl.autoscaling import snapshot
from servectl.testing import make_snapshot


def test_round_trip() -> None:
    snap = make_snapshot(
        rps=100.0, cpu_usage_cores=2.0, latency_ms={"p99": 120.0, "p99.9": 300.0}, age_s=3.0
    )
    assert snapshot.from_dict(json.loads(json.dumps(snapshot.to_dict(snap)))) == snap


def test_minimal_document_gets_defaults() -> None:
    snap = snapshot.from_dict({"time": 5, "replicas": {"current": 3}})
    assert snap.replicas.ready == 3
    assert snap.replicas.starting == 0
    assert snap.signals.rps is None


def test_nan_is_missing() -> None:
    snap = snapshot.from_dict(
        {"time": 1, "replicas": {"current": 1}, "signals": {"rps": float("nan")}}
    )
    assert snap.signals.rps is None


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"replicas": {"current": 1}}, "time"),
        ({"time": 1}, "replicas.current"),
        ({"time": "soon", "replicas": {"current": 1}}, "time"),
        ({"time": 1, "replicas": {"current": 1.5}}, "replicas.current"),
        ({"time": 1, "replicas": {"current": 1, "min": 5, "max": 2}}, "replicas.min"),
        ({"time": 1, "replicas": {"current": 1}, "signals": {"rps": "fast"}}, "signals.rps"),
        ({"time": 1, "replicas": {"current": 1}, "signals": {"cpu": 3}}, "signals"),
        (
            {"time": 1, "replicas": {"current": 1}, "signals": {"latency_ms": {"99": 1}}},
            "latency_ms",
        ),
        ({"time": 1, "replicas": {"current": 1}, "pods": [{"ready": True}]}, "pods[0].name"),
        ({"time": 1, "replicas": {"current": 1}, "rollout": {"step": "x"}}, "rollout.step"),
        ({"time": 1, "replicas": {"current": 1}, "extra": 1}, "extra"),
    ],
)
def test_errors_name_the_field(doc: dict[str, Any], field: str) -> None:
    with pytest.raises(snapshot.SnapshotError, match=field.replace("[", r"\[").replace("]", r"\]")):
        snapshot.from_dict(doc)


def test_time_fields_are_utc() -> None:
    # 2026-11-23 is a Monday; 14:30 UTC.
    fields = snapshot.time_fields(1_795_444_200.0)
    assert fields["weekday"] == 0
    assert fields["hour"] == 14
    assert fields["minute"] == 30


def test_latency_lookup() -> None:
    sig = snapshot.Signals(latency_ms={"p99": 5.0, "p99.9": 9.0})
    assert sig.latency(99) == 5.0
    assert sig.latency(99.9) == 9.0
    assert sig.latency(50) is None


json_values = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@given(
    st.fixed_dictionaries(
        {"time": json_values, "replicas": json_values},
        optional={"signals": json_values, "pods": json_values, "rollout": json_values},
    )
)
def test_arbitrary_documents_parse_or_raise_snapshot_error(doc: dict[str, Any]) -> None:
    # Any exception other than SnapshotError fails the test.
    with contextlib.suppress(snapshot.SnapshotError):
        snapshot.from_dict(doc)


@pytest.mark.parametrize(
    ("pods", "field"),
    [(5, "pods"), ([{"name": "a", "ready": "no"}], r"pods\[0\].ready")],
)
def test_pod_errors(pods: Any, field: str) -> None:
    with pytest.raises(snapshot.SnapshotError, match=field):
        snapshot.from_dict({"time": 1, "replicas": {"current": 1}, "pods": pods})
