"""servectl's metrics source against a real Prometheus scraping fixture exporters.

The exporters serve series shaped like cAdvisor, kube-state-metrics, dcgm-exporter and TF
Serving (servectl.testing.exporters.Scenario) whose counters grow at known rates; the signals
servectl computes must match those rates within the stated tolerances, and every failure
(Prometheus down, restarted, slow; a target gone; a histogram with no traffic; a missing
label) must give a snapshot that names what is missing and a decision that never shrinks.
"""

from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from servectl.api.models import AnalysisCheck, Verdict
from servectl.autoscaling import config as autoscaling_config
from servectl.autoscaling import registry
from servectl.autoscaling.decision import Reason as DecisionReason
from servectl.autoscaling.snapshot import Replicas
from servectl.metrics import names
from servectl.metrics.assemble import MetricsSnapshot, Reason, condition
from servectl.metrics.config import MetricsConfig
from servectl.metrics.server import PrometheusServer
from servectl.metrics.source import PrometheusSource
from servectl.rollout.analysis import Window, judge
from servectl.testing.exporters import Pod, Scenario, eventually

# Scrapes every second; a 10 s rate window holds ~10 samples.
CONFIG = MetricsConfig(rateWindow="10s", timeoutSeconds=5, staleAfterSeconds=30)
RATE_TOLERANCE = 0.12  # relative: rate() over 10 samples of counters floored to integers


def _eventually(check: Callable[[], Any], timeout_s: float = 45.0) -> Any:
    """:func:`servectl.testing.exporters.eventually`, checking once a second."""
    return eventually(check, timeout_s=timeout_s, every_s=1.0)


def _close(actual: float | None, expected: float, rel: float = RATE_TOLERANCE) -> None:
    assert actual is not None, f"missing, expected {expected}"
    assert math.isfinite(actual)
    assert actual == pytest.approx(expected, rel=rel, abs=1e-6), f"{actual} vs {expected}"


@pytest.fixture
def cluster(prometheus: PrometheusServer, scenario: Scenario) -> Iterator[Scenario]:
    """svc/v1: two pods; svc/v2: one pod with a GPU, errors and a two-mode latency."""
    scenario.add_pods(
        Pod("svc-v1-a", revision="v1", cpu_cores=0.5, rps=20, latency_ms=25),
        Pod("svc-v1-b", revision="v1", cpu_cores=0.25, rps=10, latency_ms=25),
        Pod(
            "svc-v2-a",
            revision="v2",
            cpu_cores=0.8,
            cpu_request_cores=2.0,
            rps=10,
            error_share=0.1,
            latency_ms={10: 0.5, 100: 0.5},
            gpu_util_percent=40.0,
            gpu_fb_used_mib=3000.0,
        ),
    )
    prometheus.set_targets(scenario.targets())
    prometheus.wait_for_targets(len(scenario.targets()), timeout_s=30)
    yield scenario


def _steady(source: PrometheusSource, **kwargs: Any) -> MetricsSnapshot:
    """A snapshot once every revision has every rate (the window holds enough samples)."""

    def check() -> MetricsSnapshot:
        snap = source.snapshot(**kwargs)
        for rev in ("v1", "v2"):
            r = snap.revision("default", "svc", rev)
            assert r.signals.rps is not None and r.signals.cpu_usage_cores is not None, r
            assert r.signals.latency_ms, r
        return snap

    _eventually(check)
    time.sleep(11)  # let the 10 s window fill with samples at the steady rate
    return source.snapshot(**kwargs)


def test_signals_match_the_exporters_rates(cluster: Scenario, prometheus: PrometheusServer) -> None:
    source = PrometheusSource(prometheus.url, CONFIG)
    snap = _steady(source, analysis_services=["svc"])
    assert snap.queries == 5  # one per signal, whatever the number of revisions
    assert not [p for p in snap.problems if p.signal != "gpu"], snap.problems

    v1 = snap.revision("default", "svc", "v1")
    _close(v1.signals.cpu_usage_cores, 0.75)
    _close(v1.signals.cpu_utilization, 100 * 0.75 / 2.0)  # two pods of 1 core each
    assert {p.name: p.cpu_request_cores for p in v1.pods} == {"svc-v1-a": 1.0, "svc-v1-b": 1.0}
    _close({p.name: p.cpu_usage_cores for p in v1.pods}["svc-v1-a"], 0.5)
    _close(v1.signals.rps, 30.0)
    assert v1.signals.error_rate == pytest.approx(0.0, abs=1e-9)
    # Every request takes 25 ms: p50 and p99 lie in TF Serving's bucket holding 25,000 µs,
    # and equal Prometheus' own histogram_quantile over the same data.
    bounds = names.TFS_LATENCY_BOUNDS_US
    upper = next(b for b in bounds if b >= 25_000)
    lower = bounds[bounds.index(upper) - 1]
    for p in (50, 99):
        value = v1.signals.latency(p)
        assert value is not None and lower / 1000 <= value <= upper / 1000
    _close(v1.signals.concurrency, 30 * 0.025)  # Little's law: rps x mean latency
    assert v1.missing == ("gpu",) and v1.signals.gpu_duty_cycle is None

    v2 = snap.revision("default", "svc", "v2")
    _close(v2.signals.cpu_usage_cores, 0.8)
    _close(v2.signals.cpu_utilization, 40.0)  # 0.8 of a 2-core request
    _close(v2.signals.rps, 10.0)
    assert v2.signals.error_rate == pytest.approx(0.1, abs=0.02)
    assert v2.signals.gpu_duty_cycle == pytest.approx(40.0)
    assert v2.gpu_memory_mib == pytest.approx(3000.0)
    p25 = v2.signals.latency(25)
    p90 = v2.signals.latency(90)
    upper_100 = next(b for b in bounds if b >= 100_000)
    lower_100 = bounds[bounds.index(upper_100) - 1]
    assert p90 is not None and lower_100 / 1000 <= p90 <= upper_100 / 1000  # the 100 ms mode
    assert p25 is None  # not configured; computed percentiles are configurable
    assert v2.signals.latency(50) is not None and v2.signals.latency(50) <= 18  # 10 ms mode
    assert v2.missing == ()
    for r in (v1, v2):
        assert all(age < 5 for age in r.ages.values()), r.ages

    # The percentiles servectl computes equal Prometheus' histogram_quantile.
    window = CONFIG.rate_window
    for quantile in (0.5, 0.9, 0.99):
        theirs = source.query(
            f"histogram_quantile({quantile}, sum by (revision, le) "
            f'(rate({names.TFS_REQUEST_LATENCY}_bucket{{service="svc"}}[{window}])))',
            snap.time,
        )
        by_rev = {s.labels["revision"]: s.value for s in theirs}
        for rev in ("v1", "v2"):
            ours = snap.revision("default", "svc", rev).signals.latency(quantile * 100)
            expected = by_rev[rev]
            assert ours is not None and expected is not None
            # rel 1e-5: TF Serving prints bounds with six digits (11568.3 for 11568.31...);
            # servectl interpolates on the exact layout bound.
            assert ours == pytest.approx(expected / 1000, rel=1e-5)

    # Service level: sums of rates, CPU over the sum of requests, errors weighted by rps.
    svc = snap.service("default", "svc")
    _close(svc.signals.rps, 40.0)
    _close(svc.signals.cpu_utilization, 100 * 1.55 / 4.0)
    assert svc.signals.error_rate == pytest.approx(1.0 / 40.0, abs=0.01)
    assert len(svc.pods) == 3
    cond = condition(snap, "default", "svc")
    assert cond.status == "True", cond.message

    # Cumulative counters for the analysis follow the exporters' own counts.
    counters = v2.counters
    assert counters is not None
    truth = cluster.counters("svc-v2-a")
    assert counters.requests == pytest.approx(sum(truth.requests.values()), rel=0.1, abs=15)
    assert counters.errors == pytest.approx(truth.requests.get("INTERNAL", 0.0), rel=0.15, abs=5)
    assert sum(counters.latency_buckets) == pytest.approx(counters.requests, rel=0.05, abs=5)
    assert counters.cpu_seconds == pytest.approx(truth.cpu_seconds, rel=0.15, abs=2)


def test_prometheus_down_then_restarted(cluster: Scenario, prometheus: PrometheusServer) -> None:
    source = PrometheusSource(prometheus.url, CONFIG)
    expected = [("default", "svc", "v1"), ("default", "svc", "v2")]
    before = _steady(source, expected=expected, analysis_services=["svc"])
    requests_before = before.revision("default", "svc", "v1").counters
    assert requests_before is not None

    prometheus.stop()
    down = source.snapshot(expected=expected, analysis_services=["svc"])
    assert {p.reason for p in down.problems} == {Reason.UNREACHABLE}
    assert {p.signal for p in down.problems} == {
        "cpu",
        "cpu_requests",
        "gpu",
        "requests",
        "latency",
    }
    for key in expected:
        r = down.revision(*key)
        assert r.signals.rps is None and r.signals.cpu_utilization is None
        assert r.signals.latency_ms == {}
    cond = condition(down, "default", "svc")
    assert cond.status == "False" and cond.reason == Reason.UNREACHABLE
    assert prometheus.url in cond.message

    # The engine holds: metrics vanished, so nothing shrinks (never to zero, never to min).
    policy = registry.build("servectl", autoscaling_config.AutoscalingConfig(max_replicas=20))
    snap = down.service("default", "svc").snapshot(
        down.time, Replicas(current=8, ready=8, min=1, max=20)
    )
    decision = registry.evaluate(policy, snap).decision
    assert decision.replicas == 8 and decision.reason == DecisionReason.METRICS_MISSING

    prometheus.restart()
    after = _eventually(
        lambda: _has_rates(source.snapshot(expected=expected, analysis_services=["svc"]))
    )
    assert not [p for p in after.problems if p.signal != "gpu"]
    assert condition(after, "default", "svc").status == "True"
    requests_after = after.revision("default", "svc", "v1").counters
    assert requests_after is not None
    # The analysis' totals kept growing across the outage: no reset, no double count.
    assert requests_after.requests >= requests_before.requests
    truth = sum(sum(cluster.counters(p).requests.values()) for p in ("svc-v1-a", "svc-v1-b"))
    assert requests_after.requests == pytest.approx(truth, rel=0.1, abs=30)


def _has_rates(snap: MetricsSnapshot) -> MetricsSnapshot:
    for rev in ("v1", "v2"):
        assert snap.revision("default", "svc", rev).signals.rps is not None
    return snap


def test_slow_prometheus_times_out_and_names_it(
    cluster: Scenario, prometheus: PrometheusServer
) -> None:
    source = PrometheusSource(prometheus.url, MetricsConfig(rateWindow="10s", timeoutSeconds=1.0))
    _eventually(lambda: _has_rates(source.snapshot()))
    process = prometheus._process  # a frozen Prometheus: connections queue, nothing answers
    assert process is not None
    os.kill(process.pid, signal.SIGSTOP)
    try:
        began = time.monotonic()
        slow = source.snapshot(expected=[("default", "svc", "v1")])
        took = time.monotonic() - began
    finally:
        os.kill(process.pid, signal.SIGCONT)
    assert {p.reason for p in slow.problems} == {Reason.TIMEOUT}
    assert took < 10  # queries run in parallel, each bounded by timeoutSeconds
    cond = condition(slow, "default", "svc", ["v1"])
    assert cond.status == "False" and cond.reason == Reason.TIMEOUT
    assert "1 s" in cond.message


def test_a_target_that_disappears_is_named(cluster: Scenario, prometheus: PrometheusServer) -> None:
    source = PrometheusSource(prometheus.url, CONFIG)
    _steady(source)
    cluster.tf_serving_exporter("svc-v2-a").stop()  # v2's only model server is gone

    def v2_gone() -> MetricsSnapshot:
        snap = source.snapshot(expected=[("default", "svc", "v1"), ("default", "svc", "v2")])
        v2 = snap.revision("default", "svc", "v2")
        assert "requests" in v2.missing and "latency" in v2.missing, v2
        return snap

    snap = _eventually(v2_gone, timeout_s=30)
    v1 = snap.revision("default", "svc", "v1")
    assert v1.signals.rps is not None  # the other revision still reads
    v2 = snap.revision("default", "svc", "v2")
    assert v2.signals.rps is None and v2.signals.latency_ms == {}
    assert v2.signals.cpu_usage_cores is not None  # cAdvisor still sees the pod
    cond = condition(snap, "default", "svc")
    assert cond.status == "False" and cond.reason == Reason.PARTIAL
    assert "requests missing for v2" in cond.message
    # The service's own request rate is missing, not v1's alone: the autoscaler holds.
    assert snap.service("default", "svc").signals.rps is None


def test_histogram_with_no_traffic_gives_no_nan(
    cluster: Scenario, prometheus: PrometheusServer
) -> None:
    source = PrometheusSource(prometheus.url, CONFIG)
    _steady(source)
    cluster.update("svc-v2-a", rps=0.0)

    def idle() -> MetricsSnapshot:
        # Idle for servectl (no requests) and for Prometheus (its own p99 is NaN): the
        # request counter and the histogram are separate series, and one scrape can see
        # the last increment of one and not of the other, so wait for both.
        snap = source.snapshot()
        assert snap.revision("default", "svc", "v2").signals.rps == 0.0
        theirs = source.query(
            "histogram_quantile(0.99, sum by (revision, le) (rate("
            f'{names.TFS_REQUEST_LATENCY}_bucket{{revision="v2"}}[10s])))',
            snap.time,
        )
        assert theirs and theirs[0].value is None  # parse_vector maps NaN to None
        return snap

    snap = _eventually(idle, timeout_s=40)
    v2 = snap.revision("default", "svc", "v2")
    # Prometheus itself says NaN here; none of it reaches servectl's signals.
    assert v2.signals.latency_ms == {}
    assert v2.signals.error_rate is None
    assert v2.signals.concurrency == 0.0
    assert "latency" not in v2.missing and "requests" not in v2.missing
    for value in vars(v2.signals).values():
        if isinstance(value, float):
            assert math.isfinite(value)
    assert condition(snap, "default", "svc").status == "True"


def test_label_mismatch_names_the_missing_label(
    prometheus: PrometheusServer, scenario: Scenario
) -> None:
    # kube_pod_labels without the revision label (KSM not allowed to export it), and a
    # TF Serving scrape that did not add the revision target label.
    scenario.add_pods(
        Pod("svc-v1-a", revision=None, cpu_cores=0.5, rps=10),
    )
    prometheus.set_targets(scenario.targets())
    prometheus.wait_for_targets(len(scenario.targets()), timeout_s=30)
    source = PrometheusSource(prometheus.url, CONFIG)

    def mismatch() -> MetricsSnapshot:
        snap = source.snapshot()
        assert {p.signal for p in snap.problems if p.reason == Reason.LABEL_MISSING} >= {
            "cpu",
            "requests",
        }, snap.problems
        return snap

    snap = _eventually(mismatch)
    cpu = snap.problem("cpu")
    requests = snap.problem("requests")
    assert cpu is not None and requests is not None
    assert "'revision'" in cpu.message and "--metric-labels-allowlist" in cpu.message
    assert "'revision'" in requests.message and "tfServingLabels" in requests.message
    assert "scrape-config.yaml" in requests.message
    assert not snap.revisions  # nothing is attributed to a guessed revision


def test_custom_promql_analysis_checks_read_prometheus(
    cluster: Scenario, prometheus: PrometheusServer
) -> None:
    """A rollout's custom `query` check, evaluated for canary and stable, then judged."""
    source = PrometheusSource(prometheus.url, CONFIG)
    first = _steady(source, analysis_services=["svc"])
    time.sleep(3)
    second = source.snapshot(analysis_services=["svc"])
    failures = AnalysisCheck.model_validate(
        {
            "metric": "failureShare",
            "query": (
                'sum(rate(:tensorflow:serving:request_count{revision="{{revision}}",'
                'status!="OK"}[10s]) or vector(0)) / sum(rate(:tensorflow:serving:'
                'request_count{revision="{{revision}}"}[10s]))'
            ),
            "max": 0.05,
        }
    )
    broken = AnalysisCheck.model_validate(
        {"metric": "broken", "query": 'sum(rate(x{revision="{{revision}}"}[10s])', "max": 1}
    )
    several = AnalysisCheck.model_validate(
        {"metric": "several", "query": 'up{revision="{{revision}}"} or up', "max": 1}
    )
    values, problems = source.custom_checks(
        [failures, broken, several], namespace="default", service="svc", revision="v2", stable="v1"
    )
    value, stable = values["failureShare"]
    assert value == pytest.approx(0.1, abs=0.02) and stable == pytest.approx(0.0, abs=1e-9)
    assert values["broken"] == (None, None) and values["several"][0] is None
    by_check = {p.signal.split(" (")[0]: p for p in problems}
    assert by_check["analysis check broken"].reason == Reason.QUERY_ERROR
    assert "spec.rollout" in by_check["analysis check broken"].message
    assert "one number per revision" in by_check["analysis check several"].message

    def window(rev: str) -> Window:
        start = first.revision("default", "svc", rev).counters
        end = second.revision("default", "svc", rev).counters
        assert start is not None and end is not None
        return Window.between(start, end)

    result = judge(
        [failures],
        window("v2"),
        window("v1"),
        min_samples=10,
        bounds_us=second.latency_bounds_us,
        custom=values,
    )
    assert result.verdict is Verdict.FAILED, result.message
    assert "failureShare" in result.message
