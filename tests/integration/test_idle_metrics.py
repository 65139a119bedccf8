"""An idle model server against a real Prometheus: scraped with no request series is zero
requests, a failing scrape is missing (issue 25, item 1; the PromQL of the ``scraped``
parts checked where it runs).

The fixture TF Serving of a pod with ``rps=0`` prints no request and no latency series, as
TF Serving does before its first request (servectl.testing.exposition.tf_serving).
"""

from __future__ import annotations

from servectl.api.models import ConditionStatus
from servectl.metrics.assemble import MetricsSnapshot, condition
from servectl.metrics.config import MetricsConfig
from servectl.metrics.server import PrometheusServer
from servectl.metrics.source import PrometheusSource
from servectl.testing.exporters import Pod, Scenario, eventually

CONFIG = MetricsConfig(rateWindow="10s", timeoutSeconds=5, staleAfterSeconds=30)
EXPECTED = [("default", "svc", "v1")]


def test_an_idle_model_server_reads_zero_then_missing_once_its_scrape_fails(
    prometheus: PrometheusServer, scenario: Scenario
) -> None:
    scenario.add_pods(Pod("svc-v1-a", revision="v1", cpu_cores=0.02, rps=0.0))
    prometheus.set_targets(scenario.targets())
    prometheus.wait_for_targets(len(scenario.targets()), timeout_s=30)
    source = PrometheusSource(prometheus.url, CONFIG)

    def zero() -> MetricsSnapshot:
        snap = source.snapshot(expected=EXPECTED, analysis_services=["svc"])
        v1 = snap.revision("default", "svc", "v1")
        assert v1.signals.rps == 0.0, v1
        assert v1.signals.cpu_usage_cores is not None, v1  # its rate() needs two scrapes
        return snap

    snap = eventually(zero, timeout_s=30, every_s=1.0)
    v1 = snap.revision("default", "svc", "v1")
    assert "requests" not in v1.missing and "latency" not in v1.missing
    assert v1.signals.latency_ms == {} and v1.signals.error_rate is None
    assert 0.0 <= v1.ages["requests"] < 5.0
    cond = condition(snap, "default", "svc")
    assert cond.status is ConditionStatus.TRUE, cond.message
    # No problem named for TF Serving: its scrape answered, it has just served nothing.
    assert snap.problem("requests") is None and snap.problem("latency") is None

    scenario.tf_serving_exporter("svc-v1-a").stop()  # the model server stops answering

    def failing() -> MetricsSnapshot:
        snap = source.snapshot(expected=EXPECTED)
        assert "requests" in snap.revision("default", "svc", "v1").scrape_failing
        return snap

    snap = eventually(failing, timeout_s=30, every_s=1.0)
    v1 = snap.revision("default", "svc", "v1")
    assert v1.signals.rps is None and {"requests", "latency"} <= set(v1.missing)
    cond = condition(snap, "default", "svc")
    assert cond.status is ConditionStatus.FALSE
    assert "the scrape of its model server fails" in cond.message
