"""PrometheusServer against the real binary: start, scrape, file_sd changes, restart, stop."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from servectl.metrics import server as server_mod
from servectl.metrics.server import (
    PrometheusNotFound,
    PrometheusPortInUse,
    PrometheusQueryError,
    PrometheusServer,
    PrometheusStartError,
    PrometheusTimeout,
    ScrapeTarget,
)
from servectl.processes import free_port
from servectl.testing.exporters import wait_until
from tests.integration.conftest import ExporterFactory

TARGETS_TIMEOUT_S = 30  # Prometheus applies target changes on a 5 s tick; CI machines are slow


def _values(prometheus: PrometheusServer, promql: str) -> dict[str, float]:
    return {s.labels.get("kind", ""): s.value for s in prometheus.query(promql)}


def test_start_answers_ready_and_queries(prometheus: PrometheusServer) -> None:
    assert prometheus.running
    with urllib.request.urlopen(f"{prometheus.url}/-/ready", timeout=5) as response:
        assert response.status == 200
    [sample] = prometheus.query("vector(42)")
    assert sample.value == 42
    [scalar] = prometheus.query("scalar(vector(7))")
    assert scalar.value == 7 and scalar.labels == {}
    assert "scrape_interval: 1s" in prometheus.config_path.read_text()


def test_bad_promql_is_a_query_error(prometheus: PrometheusServer) -> None:
    with pytest.raises(PrometheusQueryError, match="bad_data"):
        prometheus.query("sum(")


def test_wait_for_series_times_out_with_the_query(prometheus: PrometheusServer) -> None:
    with pytest.raises(PrometheusTimeout, match="no_such_metric"):
        prometheus.wait_for_series("no_such_metric", timeout_s=0.3)


def test_scrapes_targets_and_follows_file_sd_changes(
    prometheus: PrometheusServer, exporter_factory: ExporterFactory
) -> None:
    a = exporter_factory('fixture_value{kind="a"} 1\n')
    b = exporter_factory('fixture_value{kind="b"} 2\n')
    c = exporter_factory('fixture_value{kind="c"} 3\n', metrics_path="/other/metrics")

    prometheus.set_targets([a.target("fixture", {"team": "x"})])
    [target] = prometheus.wait_for_targets(1, TARGETS_TIMEOUT_S)
    assert target.labels["team"] == "x" and target.scrape_url == a.url
    [sample] = prometheus.wait_for_series('fixture_value{job="fixture", team="x"}')
    assert sample.value == 1

    a.set_text('fixture_value{kind="a"} 5\n')
    prometheus.wait_for_series('fixture_value{kind="a"} == 5')

    # One change: a leaves, b joins the same job (only its target file changes) and c
    # needs a new job (a config reload).
    prometheus.set_targets([b.target("fixture"), c.target("other", {"team": "y"})])
    prometheus.wait_for_targets(2, TARGETS_TIMEOUT_S)
    # a's series are marked stale when its target is dropped, so they vanish at once.
    wait_until(lambda: _values(prometheus, "fixture_value") == {"b": 2, "c": 3})
    assert _values(prometheus, 'fixture_value{team="y"}') == {"c": 3}
    scrapes = a.scrape_count
    b.wait_for_scrapes(2)
    assert a.scrape_count == scrapes


def test_target_down_and_back_then_restart_keeps_the_data(
    prometheus: PrometheusServer, exporter_factory: ExporterFactory
) -> None:
    exporter = exporter_factory('fixture_value{kind="a"} 1\n')
    prometheus.set_targets([exporter.target("fixture")])
    prometheus.wait_for_targets(1, TARGETS_TIMEOUT_S)
    prometheus.wait_for_series("fixture_value")
    seen_at = time.time()

    # A target that disappears: up goes to 0 and its series go stale at the next scrape.
    exporter.stop()
    prometheus.wait_for_series('up{job="fixture"} == 0')
    wait_until(lambda: not prometheus.query("fixture_value"), what="stale fixture_value")
    exporter.set_text('fixture_value{kind="a"} 2\n')
    exporter.start()  # the same port
    prometheus.wait_for_series("fixture_value == 2")

    port = prometheus.port
    prometheus.restart()
    assert prometheus.port == port
    # Samples from before the restart are still there (the WAL is replayed at start).
    [before] = prometheus.query("fixture_value", at=seen_at)
    assert before.value == 1
    [changes] = prometheus.query("changes(fixture_value[10m])")
    assert changes.value >= 1
    series = prometheus.query_range("up", seen_at - 30, time.time(), 1.0)
    assert {v for _, v in series[0].points} == {0.0, 1.0}


def test_stop_releases_the_port(tmp_path: Path, prometheus_binary: str) -> None:
    server = PrometheusServer(tmp_path, binary=prometheus_binary)
    with server:
        port = server.port
        assert server.running
    assert not server.running
    server.stop()  # idempotent
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2)
    with socket.socket() as sock:
        # As a server would: TIME_WAIT leftovers of our own requests may remain.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen()


def test_a_port_in_use_is_a_start_error_with_the_log(
    prometheus: PrometheusServer, tmp_path: Path, prometheus_binary: str
) -> None:
    second = PrometheusServer(tmp_path / "second", port=prometheus.port, binary=prometheus_binary)
    with pytest.raises(PrometheusPortInUse, match="address already in use"):
        second.start()
    assert not second.running
    # What the local runtime does then: another port, and start again.
    second.move_to(free_port())
    with second:
        assert second.running and second.port != prometheus.port
    other = PrometheusServer(tmp_path / "third", port=free_port(), binary="/bin/false")
    with pytest.raises(PrometheusStartError) as info:  # exits, but not for its port
        other.start()
    assert not isinstance(info.value, PrometheusPortInUse)


def test_missing_binary_names_the_debian_package(tmp_path: Path) -> None:
    server = PrometheusServer(tmp_path, binary=str(tmp_path / "no-such-prometheus"))
    with pytest.raises(PrometheusNotFound, match=r"apt-get install prometheus"):
        server.start()
    assert server_mod.find_prometheus(str(tmp_path / "no-such-prometheus")) is None


def test_targets_are_validated(tmp_path: Path) -> None:
    server = PrometheusServer(tmp_path)
    with pytest.raises(ValueError, match="job name"):
        server.set_targets([ScrapeTarget("has space", "127.0.0.1:1")])
    with pytest.raises(ValueError, match="duration"):
        PrometheusServer(tmp_path, scrape_interval_s=0.0001)
