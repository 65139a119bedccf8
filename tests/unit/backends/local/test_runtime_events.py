"""The runtime's events (issue 25, item 4): each happening of the supervisor becomes an
event on its service (Warning or Normal by kind) and a line in the controller's log; what
concerns the whole runtime (HAProxy or Prometheus restarted, the controller started or
stopping) is an event on every service; a lasting failure is one event, not one a tick;
and on the local runtime an empty CPU or GPU signal is explained without a kubelet."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from servectl.backends.local import runtime_events
from servectl.backends.local.replica_events import Happening, Kind
from servectl.backends.local.replica_launch import ReplicaSpec
from servectl.backends.local.store import Store
from servectl.metrics.source import PrometheusSource

T0 = 1_700_000_000.0


@pytest.fixture
def store(tmp_path: Path) -> Store:
    opened = Store.open(tmp_path / "state.db")
    for name in ("cost", "other"):
        opened.put_spec("default", name, {"metadata": {"name": name}, "spec": {}})
    return opened


def _spec(service: str = "cost", pod: str = "cost-v1-0") -> ReplicaSpec:
    return ReplicaSpec("default", service, f"{service}-v1", pod, "m", Path("/m"), 1)


def test_each_happening_is_an_event_on_its_service_and_a_log_line(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    crash = Happening.of(
        Kind.CRASHED, T0, _spec(), "cost-v1-0 (pid 812) killed by signal 9", 812, -9, 0
    )
    restart = Happening.of(Kind.RESTARTED, T0 + 1, _spec(), "restarted cost-v1-0", 815, None, 1)
    gone = Happening.of(Kind.STOPPED, T0 + 2, _spec("deleted", "deleted-v1-0"), "stopped", 9, 0, 0)
    assert (crash.signal, crash.exit_code, gone.exit_code) == (9, None, 0)
    with caplog.at_level(logging.INFO, logger="servectl.runtime"):
        runtime_events.Reporter(store).happenings([crash, restart, gone])
    events = store.events("default", "cost")
    assert [(e.time, e.type, e.reason, e.message) for e in events] == [
        (T0, "Warning", "ReplicaCrashed", "cost-v1-0 (pid 812) killed by signal 9"),
        (T0 + 1, "Normal", "ReplicaRestarted", "restarted cost-v1-0"),
    ]
    assert store.events("default", "other") == []
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        (
            "WARNING",
            "default/cost: Warning ReplicaCrashed: cost-v1-0 (pid 812) killed by signal 9",
        ),
        ("INFO", "default/cost: Normal ReplicaRestarted: restarted cost-v1-0"),
        ("INFO", "default/deleted: Normal ReplicaStopped: stopped"),  # no service: log only
    ]


def test_a_runtime_event_goes_on_every_service_and_a_lasting_failure_once(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    reporter = runtime_events.Reporter(store)
    with caplog.at_level(logging.INFO, logger="servectl.runtime"):
        reporter.runtime("RouterRestarted", "HAProxy (pid 1) was not running", T0, warning=True)
        for _ in range(3):  # three ticks of the same failure
            reporter.failing("RouterFailed", "HAProxy could not be started: port taken", T0)
        reporter.failing("RouterFailed", None, T0)  # over
        reporter.failing("RouterFailed", "HAProxy could not be started: port taken", T0)
    for name in ("cost", "other"):
        assert [(e.type, e.reason) for e in store.events("default", name)] == [
            ("Warning", "RouterRestarted"),
            ("Warning", "RouterFailed"),
            ("Warning", "RouterFailed"),
        ]
    assert len(caplog.records) == 3


@pytest.mark.parametrize("signal", ["cpu", "cpu_requests", "gpu"])
def test_the_local_runtime_explains_an_empty_signal_without_a_kubelet(signal: str) -> None:
    local = PrometheusSource("http://127.0.0.1:9", local_exporter="127.0.0.1:7")
    texts = " ".join(meaning for _, meaning in local._checks(signal))
    assert "servectl's replica exporter (http://127.0.0.1:7/metrics)" in texts
    for cluster_word in ("kubelet", "kube-state-metrics", "dcgm-exporter", "cAdvisor"):
        assert cluster_word not in texts
    cluster = PrometheusSource("http://127.0.0.1:9")
    assert "servectl's replica exporter" not in " ".join(m for _, m in cluster._checks(signal))
