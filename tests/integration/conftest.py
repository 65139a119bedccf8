"""Fixtures for the tests against a real Prometheus (every test here is marked `prometheus`,
except the router's, marked `haproxy`, and those of tests/integration/k8s, `kubernetes`).

- ``prometheus``: a `PrometheusServer` in tmp_path, scraping every second, started; no
  targets yet (``prometheus.set_targets(...)``). Starting takes well under a second, but
  Prometheus 2.42 applies target changes on a fixed 5 s tick, so the first scrape of a new
  target comes ~5 s (up to ~10 s) after `set_targets`: wait with ``wait_for_targets``.
- ``exporter_factory``: ``exporter_factory(text="", metrics_path="/metrics")`` -> a started
  `FixtureExporter` (servectl.testing.exporters), stopped at teardown.
- ``scenario``: a started live `Scenario` (servectl.testing.exporters), closed at teardown.

Missing binary: the test is skipped, or fails with the install hint when
``SERVECTL_REQUIRE_PROMETHEUS=1`` (CI).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from servectl.metrics.server import PrometheusServer
from servectl.testing.exporters import FixtureExporter, Scenario
from tests.integration.fixtures import require_binary

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        # The router's tests (marked haproxy) need no Prometheus, nor do the Kubernetes
        # control plane's (tests/integration/k8s, marked kubernetes by their conftest).
        if (
            _HERE in item.path.parents
            and _HERE / "k8s" not in item.path.parents
            and item.get_closest_marker("haproxy") is None
        ):
            item.add_marker(pytest.mark.prometheus)


@pytest.fixture
def prometheus_binary() -> str:
    return require_binary("prometheus")


@pytest.fixture
def prometheus(tmp_path: Path, prometheus_binary: str) -> Iterator[PrometheusServer]:
    server = PrometheusServer(
        tmp_path / "prometheus", scrape_interval_s=1.0, binary=prometheus_binary
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


ExporterFactory = Callable[..., FixtureExporter]


@pytest.fixture
def exporter_factory() -> Iterator[ExporterFactory]:
    started: list[FixtureExporter] = []

    def make(text: str = "", *, metrics_path: str = "/metrics") -> FixtureExporter:
        exporter = FixtureExporter(text, metrics_path=metrics_path).start()
        started.append(exporter)
        return exporter

    yield make
    for exporter in started:
        exporter.stop()


@pytest.fixture
def scenario() -> Iterator[Scenario]:
    with Scenario() as live:
        yield live
