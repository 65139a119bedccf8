"""Serving /metrics over HTTP: start on a picked port, routes, stop."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from servectl.metrics.exporters import serve
from servectl.testing.exporters import scrape


class Counting(Collector):
    """A gauge of how many times it was collected: proves each scrape collects afresh."""

    def __init__(self) -> None:
        self.scrapes = 0

    def collect(self) -> Iterator[Metric]:
        self.scrapes += 1
        yield GaugeMetricFamily("test_scrapes", "Scrapes so far.", value=self.scrapes)


def test_start_picks_a_port_serves_metrics_and_stops() -> None:
    registry = CollectorRegistry()
    registry.register(Counting())
    server, url = serve.start(registry, "127.0.0.1", 0)
    try:
        assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
        assert int(url.split(":")[2].split("/")[0]) == server.server_port > 0
        assert scrape(url)[1][("test_scrapes", frozenset())] == 1
        assert scrape(url)[1][("test_scrapes", frozenset())] == 2
        root = url.removesuffix("metrics")
        with urllib.request.urlopen(root, timeout=5) as response:
            assert b"/metrics" in response.read()
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(root + "nope", timeout=5)
        assert info.value.code == 404
    finally:
        serve.stop(server)
    assert server.thread is not None and not server.thread.is_alive()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=2)


def test_start_reports_an_address_in_use() -> None:
    server, _ = serve.start(CollectorRegistry(), "127.0.0.1", 0)
    try:
        with pytest.raises(OSError):
            serve.start(CollectorRegistry(), "127.0.0.1", server.server_port)
    finally:
        serve.stop(server)


def test_exposition_is_the_text_format() -> None:
    registry = CollectorRegistry()
    registry.register(Counting())
    text = serve.exposition(registry)
    assert "# TYPE test_scrapes gauge\ntest_scrapes 1.0\n" in text
