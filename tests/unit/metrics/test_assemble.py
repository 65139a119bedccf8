"""Query results -> per-revision signals, counters and the MetricsAvailable condition.

The results are built by hand as Prometheus returns them for the real queries: one
vector per signal, each sample tagged with its part (``servectl_part``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from servectl.api.models import ConditionStatus, ConditionType
from servectl.autoscaling.snapshot import PodSample
from servectl.metrics import names
from servectl.metrics.assemble import (
    ALL_SIGNALS,
    CounterTracker,
    MetricsSnapshot,
    Problem,
    Reason,
    Sample,
    assemble,
    condition,
    parse_vector,
)
from servectl.metrics.config import MetricsConfig, SeriesLabels, ServingLabels
from servectl.metrics.names import TFS_LATENCY_BOUNDS_US
from servectl.metrics.promql import PART_LABEL

T = 1000.0
NS = "prod"
SVC = "svc"
BOUNDS = names.TFS_LATENCY_BOUNDS_US


def _text(value: float | str) -> str:
    return value if isinstance(value, str) else repr(float(value))


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(bound)


class Tick:
    """One tick's query results, built the way Prometheus answers the real queries."""

    def __init__(self, time: float = T) -> None:
        self.time = time
        self.items: dict[str, list[dict[str, Any]]] = {
            s: [] for s in ("cpu", "cpu_requests", "gpu", "requests", "latency")
        }

    def _add(self, signal: str, part: str, value: float | str, labels: Mapping[str, str]) -> None:
        metric = {**labels, PART_LABEL: part}
        self.items[signal].append({"metric": metric, "value": [self.time, _text(value)]})

    def pod(
        self,
        revision: str,
        pod: str,
        *,
        usage: float | str | None = None,
        request: float | str | None = None,
        cpu_total: float | str | None = None,
        cpu_time: float | str | None = T,
        gpu: float | str | None = None,
        gpu_memory: float | str | None = None,
        gpu_time: float | str | None = T,
        service: str = SVC,
        namespace: str = NS,
    ) -> Tick:
        """cAdvisor, KSM and DCGM series of one pod, joined with pod-info."""
        labels = {"namespace": namespace, "pod": pod, "service": service, "revision": revision}
        if usage is not None:
            self._add("cpu", "value", usage, labels)
            if cpu_time is not None:
                self._add("cpu", "sample_time", cpu_time, labels)
        if cpu_total is not None:
            self._add("cpu", "total", cpu_total, labels)
        if request is not None:
            self._add("cpu_requests", "value", request, labels)
        if gpu is not None:
            self._add("gpu", "util", gpu, labels)
            if gpu_time is not None:
                self._add("gpu", "sample_time", gpu_time, labels)
        if gpu_memory is not None:
            self._add("gpu", "memory", gpu_memory, labels)
        return self

    def requests(
        self,
        revision: str,
        rates: Mapping[str, float | str],
        *,
        totals: Mapping[tuple[str, str], float] | None = None,
        sample_time: float | str | None = T,
        service: str = SVC,
        namespace: str = NS,
    ) -> Tick:
        """TF Serving request_count: rate by status, per-pod totals, newest timestamp."""
        labels = {"namespace": namespace, "service": service, "revision": revision}
        for status, rate in rates.items():
            self._add("requests", "rate", rate, {**labels, "status": status})
        for (pod, status), total in (totals or {}).items():
            self._add("requests", "total", total, {**labels, "pod": pod, "status": status})
        if sample_time is not None:
            self._add("requests", "sample_time", sample_time, labels)
        return self

    def latency(
        self,
        revision: str,
        cumulative: Mapping[float, float | str],
        *,
        busy: float | str | None = None,
        totals: Mapping[str, Mapping[float, float]] | None = None,
        sample_time: float | str | None = T,
        service: str = SVC,
        namespace: str = NS,
        count: float | None = None,
    ) -> Tick:
        """TF Serving request_latency: bucket rates by le (cumulative), busy, per-pod totals."""
        labels = {"namespace": namespace, "service": service, "revision": revision}
        for le, rate in cumulative.items():
            self._add("latency", "rate", rate, {**labels, "le": _le(le)})
        if count is not None:
            self._add("latency", "count", count, labels)
        if busy is not None:
            self._add("latency", "busy", busy, labels)
        for pod, buckets in (totals or {}).items():
            for le, count in buckets.items():
                self._add("latency", "total", count, {**labels, "pod": pod, "le": _le(le)})
        if sample_time is not None:
            self._add("latency", "sample_time", sample_time, labels)
        return self

    def results(self, **override: list[Sample] | Problem) -> dict[str, list[Sample] | Problem]:
        out: dict[str, list[Sample] | Problem] = {
            signal: parse_vector(items) for signal, items in self.items.items()
        }
        out.update(override)
        return out


def cumulative_in(low: float, high: float, rate: float) -> dict[float, float]:
    """Every observation in (low, high]: cumulative bucket rates on TF Serving's layout."""
    return {le: (rate if le >= high else 0.0) for le in [*BOUNDS, math.inf]} | {low: 0.0}


def healthy(tick: Tick, revision: str = "r1", *, service: str = SVC, rps: float = 10.0) -> Tick:
    tick.pod(revision, f"{revision}-a", usage=0.5, request=1.0, service=service)
    tick.requests(revision, {"OK": rps}, service=service)
    tick.latency(revision, cumulative_in(10.0, 18.0, rps), busy=rps * 14.0, service=service)
    return tick


# ----------------------------------------------------------------------------- CPU


def test_cpu_utilization_per_revision_and_per_service() -> None:
    tick = Tick()
    tick.pod("r1", "a", usage=0.5, request=1.0, gpu=40.0)
    tick.pod("r1", "b", usage=0.3, request=0.5, gpu=80.0)
    tick.pod("r2", "c", usage=1.0, request=2.0)
    snap = assemble(T, tick.results(), MetricsConfig())

    r1 = snap.revision(NS, SVC, "r1")
    assert r1.signals.cpu_usage_cores == pytest.approx(0.8)
    assert r1.signals.cpu_utilization == pytest.approx(100 * 0.8 / 1.5)
    assert r1.pods == (
        PodSample(name="a", cpu_usage_cores=0.5, cpu_request_cores=1.0, gpu_duty_cycle=40.0),
        PodSample(name="b", cpu_usage_cores=0.3, cpu_request_cores=0.5, gpu_duty_cycle=80.0),
    )
    assert r1.signals.gpu_duty_cycle == pytest.approx(60.0)
    r2 = snap.revision(NS, SVC, "r2")
    assert r2.signals.cpu_utilization == pytest.approx(50.0)
    assert r2.pods == (PodSample(name="c", cpu_usage_cores=1.0, cpu_request_cores=2.0),)

    service = snap.service(NS, SVC)
    assert service.signals.cpu_usage_cores == pytest.approx(1.8)
    assert service.signals.cpu_utilization == pytest.approx(100 * 1.8 / 3.5)
    assert [p.name for p in service.pods] == ["a", "b", "c"]
    only_r2 = snap.service(NS, SVC, ["r2"])
    assert only_r2.signals.cpu_utilization == pytest.approx(50.0)
    assert snap.service_keys() == [(NS, SVC)]


def test_pod_with_a_request_but_no_usage_yet() -> None:
    tick = Tick().pod("r1", "a", usage=0.5, request=1.0).pod("r1", "new", request=1.0)
    snap = assemble(T, tick.results(), MetricsConfig())
    r1 = snap.revision(NS, SVC, "r1")
    assert r1.pods[1] == PodSample(name="new", cpu_usage_cores=None, cpu_request_cores=1.0)
    assert r1.signals.cpu_utilization == pytest.approx(50.0)  # the new pod is not averaged in
    assert snap.service(NS, SVC).signals.cpu_utilization == pytest.approx(50.0)


def test_cpu_without_requests_is_not_utilization_against_a_made_up_request() -> None:
    """kube-state-metrics timed out: usage is known, requests are not.

    Utilization is usage over request; a 1-core stand-in would make 2 cores used of 4
    requested read as 200 % (or 0.2 of 0.25 as 20 %, and scale down). The revision and
    the service must agree, and neither may invent a request.
    """
    tick = Tick().pod("r1", "a", usage=2.0).pod("r1", "b", usage=2.0)
    timeout = Problem("cpu_requests", Reason.TIMEOUT, "cpu_requests: Prometheus did not answer")
    snap = assemble(T, tick.results(cpu_requests=timeout), MetricsConfig())
    r1 = snap.revision(NS, SVC, "r1")
    service = snap.service(NS, SVC)
    assert r1.signals.cpu_utilization is None
    assert service.signals.cpu_utilization is None
    assert all(p.cpu_usage_cores is None for p in r1.pods)  # no utilization for the HPA
    assert "cpu" in r1.missing and "cpu" in service.missing
    assert service.signals.cpu_usage_cores is None
    cond = condition(snap, NS, SVC, required=["cpu"])
    assert cond.status is ConditionStatus.FALSE
    assert cond.reason == Reason.TIMEOUT
    assert "cpu_requests" in cond.message


def test_one_pod_without_a_request_makes_cpu_missing_not_skewed() -> None:
    # Before the fix: usage 1.0 over the one known request 1.0 -> 100 %, twice the truth.
    tick = Tick().pod("r1", "a", usage=0.5, request=1.0).pod("r1", "b", usage=0.5)
    snap = assemble(T, tick.results(), MetricsConfig())
    r1 = snap.revision(NS, SVC, "r1")
    assert r1.signals.cpu_utilization is None
    assert "cpu" in r1.missing
    assert snap.service(NS, SVC).signals.cpu_utilization is None
    assert r1.pods == (
        PodSample(name="a", cpu_usage_cores=0.5, cpu_request_cores=1.0),
        PodSample(name="b", cpu_usage_cores=None),
    )


def test_nan_usage_of_one_pod() -> None:
    tick = Tick().pod("r1", "a", usage=0.5, request=1.0).pod("r1", "b", usage="NaN", request=1.0)
    snap = assemble(T, tick.results(), MetricsConfig())
    r1 = snap.revision(NS, SVC, "r1")
    assert r1.signals.cpu_utilization == pytest.approx(50.0)
    assert r1.pods[1].cpu_usage_cores is None
    assert snap.service(NS, SVC).signals.cpu_utilization == pytest.approx(50.0)


def test_zero_request_gives_no_utilization() -> None:
    tick = Tick().pod("r1", "a", usage=0.5, request=0.0)
    r1 = assemble(T, tick.results(), MetricsConfig()).revision(NS, SVC, "r1")
    assert r1.signals.cpu_utilization is None
    assert r1.signals.cpu_usage_cores == 0.5


def test_gpu_memory_and_remapped_gpu_labels() -> None:
    config = MetricsConfig(
        gpu_labels=SeriesLabels(namespace="exported_namespace", pod="exported_pod")
    )
    gpu = [
        Sample(
            {
                "exported_namespace": NS,
                "exported_pod": pod,
                "service": SVC,
                "revision": "r1",
                PART_LABEL: part,
            },
            value,
            T,
        )
        for pod, part, value in [
            ("a", "util", 30.0),
            ("b", "util", 50.0),
            ("a", "memory", 1000.0),
            ("b", "memory", 500.0),
            ("a", "sample_time", T - 5),
        ]
    ]
    tick = Tick().pod("r1", "a", usage=0.1, request=1.0).pod("r1", "b", usage=0.1, request=1.0)
    snap = assemble(T, tick.results(gpu=gpu), config)
    r1 = snap.revision(NS, SVC, "r1")
    assert r1.signals.gpu_duty_cycle == pytest.approx(40.0)
    assert r1.gpu_memory_mib == pytest.approx(1500.0)
    assert [p.gpu_duty_cycle for p in r1.pods] == [30.0, 50.0]
    assert r1.ages["gpu"] == pytest.approx(5.0)
    assert "gpu" not in r1.missing
    assert snap.problem("gpu") is None and snap.problem("cpu") is None


# ----------------------------------------------------------------------------- labels


def test_pod_info_without_revision_label_names_the_ksm_allowlist() -> None:
    tick = Tick()
    tick.items["cpu"].append(
        {
            "metric": {"namespace": NS, "pod": "a", "service": SVC, PART_LABEL: "value"},
            "value": [T, "0.5"],
        }
    )
    snap = assemble(T, tick.results(), MetricsConfig())
    problem = snap.problem("cpu")
    assert problem is not None
    assert problem.reason == Reason.LABEL_MISSING == "LabelMissing"
    assert "'revision' label" in problem.message
    assert 'pod="a"' in problem.message and PART_LABEL not in problem.message
    assert "label_servectl_io_revision" in problem.message
    assert "--metric-labels-allowlist=pods=[servectl.io/service,servectl.io/revision]" in (
        problem.message
    )
    assert snap.revisions == {}
    cond = condition(snap, NS, SVC)
    assert cond.status is ConditionStatus.FALSE
    assert cond.reason == Reason.LABEL_MISSING
    assert "metric-labels-allowlist" in cond.message


def test_pod_info_without_service_label_names_the_service_label() -> None:
    tick = Tick()
    tick.items["cpu_requests"].append(
        {"metric": {"namespace": NS, "pod": "a", PART_LABEL: "value"}, "value": [T, "1"]}
    )
    problem = assemble(T, tick.results(), MetricsConfig()).problem("cpu_requests")
    assert problem is not None and problem.reason == Reason.LABEL_MISSING
    assert "'service' label" in problem.message
    assert "label_servectl_io_service" in problem.message


def test_tf_serving_series_without_revision_names_tf_serving_labels() -> None:
    tick = healthy(Tick())
    tick.items["requests"].append(
        {
            "metric": {"namespace": NS, "service": "other", "status": "OK", PART_LABEL: "rate"},
            "value": [T, "3"],
        }
    )
    snap = assemble(T, tick.results(), MetricsConfig())
    problem = snap.problem("requests")
    assert problem is not None and problem.reason == Reason.LABEL_MISSING
    assert "'revision' label" in problem.message
    assert "tfServingLabels.revision" in problem.message
    assert "scrape-config.yaml" in problem.message
    # The well-labelled series still count.
    assert snap.revision(NS, SVC, "r1").signals.rps == pytest.approx(10.0)


def test_custom_tf_serving_label_names() -> None:
    config = MetricsConfig(
        tf_serving_labels=ServingLabels(namespace="ns", service="svc", revision="rev")
    )
    samples = parse_vector(
        [
            {
                "metric": {"ns": NS, "svc": SVC, "rev": "r1", "status": "OK", PART_LABEL: "rate"},
                "value": [T, "4"],
            },
            {
                "metric": {"ns": NS, "svc": SVC, "status": "OK", PART_LABEL: "rate"},
                "value": [T, "1"],
            },
        ]
    )
    snap = assemble(T, {"requests": samples}, config)
    assert snap.revision(NS, SVC, "r1").signals.rps == 4.0
    problem = snap.problem("requests")
    assert problem is not None and "tfServingLabels.revision" in problem.message
    assert "'rev' label" in problem.message


# ----------------------------------------------------------------------------- requests


def test_error_rate_by_status() -> None:
    tick = Tick().requests("r1", {"OK": 9.0, "INTERNAL": 0.5, "UNAVAILABLE": 0.5})
    r1 = assemble(T, tick.results(), MetricsConfig()).revision(NS, SVC, "r1")
    assert r1.signals.rps == pytest.approx(10.0)
    assert r1.signals.error_rate == pytest.approx(0.1)
    assert r1.rate_by_status == {"OK": 9.0, "INTERNAL": 0.5, "UNAVAILABLE": 0.5}


def test_no_traffic_zero_rps_and_no_error_rate() -> None:
    tick = Tick().requests("r1", {"OK": 0.0, "INTERNAL": 0.0})
    tick.latency("r1", {le: 0.0 for le in [*BOUNDS, math.inf]}, busy=0.0)
    tick.pod("r1", "a", usage=0.01, request=1.0)
    snap = assemble(T, tick.results(), MetricsConfig())
    r1 = snap.revision(NS, SVC, "r1")
    assert r1.signals.rps == 0.0
    assert r1.signals.error_rate is None
    assert r1.signals.latency_ms == {}
    assert r1.signals.concurrency == 0.0
    assert "requests" not in r1.missing and "latency" not in r1.missing
    service = snap.service(NS, SVC)
    assert service.signals.error_rate is None and service.signals.latency_ms == {}
    cond = condition(snap, NS, SVC)
    assert cond.status is ConditionStatus.TRUE, cond.message  # idle is not missing


def test_gateway_codes_give_the_clients_error_rate() -> None:
    tick = healthy(Tick(), rps=8.0)
    gateway = parse_vector(
        [
            {
                "metric": {"namespace": NS, "service": SVC, "revision": "r1", "code": code},
                "value": [T, rate],
            }
            for code, rate in [("2xx", "8"), ("5xx", "1.5"), ("503", "0.5"), ("4xx", "0")]
        ]
    )
    snap = assemble(T, tick.results(gateway=gateway), MetricsConfig())
    r1 = snap.revision(NS, SVC, "r1")
    assert r1.signals.rps == pytest.approx(10.0)
    assert r1.signals.error_rate == pytest.approx(0.2)
    assert r1.rate_by_status == {"OK": 8.0}  # TF Serving's own view is kept
    assert snap.service(NS, SVC).signals.error_rate == pytest.approx(0.2)
    assert snap.problem("gateway") is None


def test_gateway_without_traffic() -> None:
    gateway = parse_vector(
        [
            {
                "metric": {"namespace": NS, "service": SVC, "revision": "r1", "code": "5xx"},
                "value": [T, "0"],
            }
        ]
    )
    r1 = assemble(T, {"gateway": gateway}, MetricsConfig()).revision(NS, SVC, "r1")
    assert r1.signals.rps == 0.0 and r1.signals.error_rate is None


def test_empty_gateway_is_not_a_problem() -> None:
    snap = assemble(T, healthy(Tick()).results(gateway=[]), MetricsConfig())
    assert snap.problem("gateway") is None


# ----------------------------------------------------------------------------- latency


def test_latency_percentiles_follow_histogram_quantile() -> None:
    # Every request took between 10 and 18 µs: Prometheus interpolates linearly inside
    # the bucket, so p50 = 10 + 8 x 0.5 = 14 µs.
    tick = Tick().latency("r1", cumulative_in(10.0, 18.0, 5.0), busy=5.0 * 14.0)
    snap = assemble(T, tick.results(), MetricsConfig())
    r1 = snap.revision(NS, SVC, "r1")
    assert r1.signals.latency(50) == pytest.approx(0.014)
    assert r1.signals.latency(90) == pytest.approx(0.0172)
    assert r1.signals.latency(99) == pytest.approx(0.01792)
    assert set(r1.signals.latency_ms) == {"p50", "p90", "p95", "p99"}
    assert r1.signals.concurrency == pytest.approx(70e-6)  # 70 µs busy per second
    assert snap.latency_bounds_us == BOUNDS
    assert len(r1.latency_rates) == len(BOUNDS) + 1
    assert r1.latency_rates[1] == 5.0 and sum(r1.latency_rates) == 5.0


def test_latency_rank_in_the_first_and_the_inf_bucket() -> None:
    top = BOUNDS[-1]
    cumulative = {le: 0.0 for le in BOUNDS} | {BOUNDS[0]: 1.0, math.inf: 10.0}
    config = MetricsConfig(percentiles=(5.0, 50.0))
    r1 = assemble(T, Tick().latency("r1", cumulative).results(), config).revision(NS, SVC, "r1")
    # 5 % of 10 = rank 0.5 in the first bucket (0, 10]: 5 µs. The median is in +Inf:
    # the highest finite bound.
    assert r1.signals.latency(5) == pytest.approx(0.005)
    assert r1.signals.latency(50) == pytest.approx(top / 1000.0)


def test_service_latency_sums_the_revisions_buckets() -> None:
    tick = Tick()
    tick.latency("r1", cumulative_in(10.0, 18.0, 3.0))
    tick.latency("r2", cumulative_in(BOUNDS[1], BOUNDS[2], 1.0))  # (18, 32.4]
    service = assemble(T, tick.results(), MetricsConfig()).service(NS, SVC)
    # 4 requests: 3 in (10, 18], 1 in (18, 32.4]; rank 2 of the median is in the first,
    # rank 3.6 of p90 in the second.
    assert service.signals.latency(50) == pytest.approx((10 + 8 * 2 / 3) / 1000)
    assert service.signals.latency(90) == pytest.approx((18 + (BOUNDS[2] - 18) * 0.6) / 1000)


def test_non_monotonic_buckets_never_give_negative_counts() -> None:
    cumulative = {10.0: 5.0, 18.0: 3.0, math.inf: 6.0}
    r1 = assemble(T, Tick().latency("r1", cumulative).results(), MetricsConfig()).revision(
        NS, SVC, "r1"
    )
    assert all(v >= 0 for v in r1.latency_rates)
    assert sum(r1.latency_rates) == pytest.approx(6.0)


def test_nan_bucket_and_empty_histogram() -> None:
    tick = Tick()
    tick.latency("r1", {le: "NaN" for le in [10.0, 18.0, math.inf]}, busy="NaN")
    tick.latency("r2", {10.0: 0.0, math.inf: 0.0}, busy=0.0)
    snap = assemble(T, tick.results(), MetricsConfig())
    r1 = snap.revision(NS, SVC, "r1")
    assert r1.signals.latency_ms == {} and r1.signals.concurrency is None
    assert "latency" in r1.missing
    r2 = snap.revision(NS, SVC, "r2")
    assert r2.signals.latency_ms == {} and "latency" not in r2.missing


def test_histogram_quantile_matches_prometheus(tmp_path: Path) -> None:
    """The hand example above, evaluated by Prometheus' own engine (promtool test rules)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("SERVECTL_REQUIRE_PROMETHEUS") == "1":
            pytest.fail("promtool not on PATH (Debian package `prometheus`), required here")
        pytest.skip("promtool not installed (Debian package `prometheus`)")
    # 300 requests a minute, all between 10 and 18 µs; and 300 spread over a few buckets.
    # Both on TF Serving's layout (a revision's percentiles are read on the bounds of all).
    spread = {le: 297 for le in [*BOUNDS, math.inf]}
    spread.update({BOUNDS[0]: 0, BOUNDS[1]: 60, BOUNDS[2]: 240, BOUNDS[3]: 294, math.inf: 300})
    series = []
    for le in [*BOUNDS, math.inf]:
        narrow = 0 if le < 18.0 else 300
        series.append(
            {"series": f'lat_bucket{{h="narrow", le="{_le(le)}"}}', "values": f"0+{narrow}x10"}
        )
    for le, count in spread.items():
        series.append(
            {"series": f'lat_bucket{{h="spread", le="{_le(le)}"}}', "values": f"0+{count}x10"}
        )
    config = MetricsConfig(percentiles=(1.0, 50.0, 90.0, 99.0))
    tick = Tick()
    tick.latency("narrow", {le: (0.0 if le < 18.0 else 5.0) for le in [*BOUNDS, math.inf]})
    tick.latency("spread", {le: n / 60.0 for le, n in spread.items()})
    snap = assemble(T, tick.results(), config)
    tests = []
    for h in ("narrow", "spread"):
        for p in config.percentiles:
            ours = snap.revision(NS, SVC, h).signals.latency(p)
            assert ours is not None
            rate = f'sum by (le) (rate(lat_bucket{{h="{h}"}}[5m]))'
            tests.append(
                {
                    "expr": f"histogram_quantile({p / 100}, {rate})",
                    "eval_time": "10m",
                    "exp_samples": [{"labels": "{}", "value": ours * 1000.0}],
                }
            )
    doc = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": tests}],
    }
    path = tmp_path / "test.yaml"
    path.write_text(yaml.safe_dump(doc))
    done = subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert snap.revision(NS, SVC, "narrow").signals.latency(50) == pytest.approx(0.014)


# ----------------------------------------------------------------------------- freshness


def test_stale_signal_is_dropped_and_named() -> None:
    tick = Tick(time=T)
    tick.pod("r1", "a", usage=0.5, request=1.0, cpu_time=T - 90)
    tick.requests("r1", {"OK": 10.0}, sample_time=T - 5)
    tick.latency("r1", cumulative_in(10.0, 18.0, 10.0), sample_time=T - 61)
    config = MetricsConfig(stale_after_seconds=60)
    snap = assemble(T, tick.results(), config)
    r1 = snap.revision(NS, SVC, "r1")
    assert r1.stale == ("cpu", "latency")
    assert set(r1.missing) >= {"cpu", "latency"}
    assert "requests" not in r1.missing
    assert r1.signals.cpu_utilization is None and r1.signals.cpu_usage_cores is None
    assert r1.pods == ()
    assert r1.signals.latency_ms == {} and r1.latency_rates == ()
    assert r1.signals.rps == 10.0
    assert r1.ages == {"cpu": 90.0, "requests": 5.0, "latency": 61.0}
    assert r1.signals.age_s == 5.0  # the kept signals' age
    cond = condition(snap, NS, SVC)
    assert cond.type is ConditionType.METRICS_AVAILABLE
    assert cond.status is ConditionStatus.FALSE
    assert cond.reason == Reason.STALE == "MetricsStale"
    assert "cpu stale for r1 (90 s old)" in cond.message
    assert "latency stale for r1 (61 s old)" in cond.message
    assert "never down" in cond.message


def test_fresh_within_the_limit() -> None:
    tick = healthy(Tick())
    tick.items["cpu"] = [i for i in tick.items["cpu"] if i["metric"][PART_LABEL] != "sample_time"]
    tick.pod("r1", "a", usage=0.5, request=1.0, cpu_time=T - 60)  # exactly the limit
    snap = assemble(T, tick.results(), MetricsConfig(stale_after_seconds=60))
    assert snap.revision(NS, SVC, "r1").stale == ()
    assert snap.revision(NS, SVC, "r1").signals.age_s == 60.0


def test_sample_time_in_the_future_is_age_zero() -> None:
    tick = Tick().pod("r1", "a", usage=0.5, request=1.0, cpu_time=T + 3)
    r1 = assemble(T, tick.results(), MetricsConfig()).revision(NS, SVC, "r1")
    assert r1.ages["cpu"] == 0.0


def test_all_fresh_condition_true() -> None:
    tick = healthy(healthy(Tick(), "r1"), "r2")
    snap = assemble(T, tick.results(), MetricsConfig())
    cond = condition(snap, NS, SVC)
    assert cond.status is ConditionStatus.TRUE
    assert cond.reason == Reason.OK
    assert cond.message == "cpu, requests, latency fresh for 2 revision(s)"
    assert snap.problems == (Problem("gpu", Reason.NO_DATA, "gpu: the query returned no series"),)


# ----------------------------------------------------------------------------- failures


def test_unreachable_prometheus() -> None:
    message = "Prometheus at http://prom:9090 is unreachable (connection refused)"
    results: dict[str, list[Sample] | Problem] = {
        s: Problem(s, Reason.UNREACHABLE, f"{s}: {message}")
        for s in ("cpu", "cpu_requests", "gpu", "requests", "latency")
    }
    snap = assemble(T, results, MetricsConfig(), expected=[(NS, SVC, "r1")])
    assert {p.signal for p in snap.problems} == set(results)
    r1 = snap.revision(NS, SVC, "r1")
    assert r1.missing == ALL_SIGNALS
    cond = condition(snap, NS, SVC)
    assert cond.status is ConditionStatus.FALSE
    assert cond.reason == Reason.UNREACHABLE == "PrometheusUnreachable"
    assert "Prometheus at http://prom:9090" in cond.message
    # Without any revision known at all, it still says False.
    alone = condition(assemble(T, results, MetricsConfig()), NS, SVC)
    assert alone.status is ConditionStatus.FALSE and alone.reason == Reason.UNREACHABLE


def test_expected_revision_without_data() -> None:
    tick = healthy(Tick(), "r1")
    snap = assemble(T, tick.results(), MetricsConfig(), expected=[(NS, SVC, "r2")])
    r2 = snap.revision(NS, SVC, "r2")
    assert r2.missing == ("cpu", "gpu", "latency", "requests")
    assert r2.signals.rps is None and r2.signals.cpu_utilization is None
    assert r2.pods == ()
    cond = condition(snap, NS, SVC)
    assert cond.status is ConditionStatus.FALSE
    assert cond.reason == Reason.PARTIAL == "SignalsMissing"
    for signal in ("cpu", "requests", "latency"):
        assert f"{signal} missing for r2" in cond.message
    assert "r1" not in cond.message
    # The service misses what one of its revisions misses, and does not report a partial
    # sum as if it were the whole service.
    service = snap.service(NS, SVC)
    assert set(service.missing) >= {"cpu", "requests", "latency"}
    assert service.signals.rps is None
    assert service.signals.cpu_usage_cores is None
    assert service.signals.latency_ms == {}
    # Only r1: everything there.
    assert condition(snap, NS, SVC, ["r1"]).status is ConditionStatus.TRUE


def test_unknown_revision_is_all_missing() -> None:
    snap = assemble(T, {}, MetricsConfig())
    r9 = snap.revision(NS, SVC, "r9")
    assert r9.missing == ALL_SIGNALS and r9.signals.rps is None
    cond = condition(snap, NS, SVC, ["r9"])
    assert cond.status is ConditionStatus.FALSE
    assert "cpu missing for r9" in cond.message
    nothing = condition(snap, NS, SVC)
    assert "(no revision seen)" in nothing.message


def test_empty_signal_names_no_data() -> None:
    tick = healthy(Tick())
    tick.items["latency"] = []
    snap = assemble(T, tick.results(), MetricsConfig())
    problem = snap.problem("latency")
    assert problem == Problem("latency", Reason.NO_DATA, "latency: the query returned no series")
    cond = condition(snap, NS, SVC)
    assert cond.status is ConditionStatus.FALSE
    assert cond.reason == Reason.NO_DATA
    assert "latency missing for r1 (latency: the query returned no series)" in cond.message


def test_query_error_on_one_signal() -> None:
    tick = healthy(Tick())
    error = Problem("latency", Reason.QUERY_ERROR, "latency: Prometheus rejected the query")
    snap = assemble(T, tick.results(latency=error), MetricsConfig())
    cond = condition(snap, NS, SVC)
    assert cond.status is ConditionStatus.FALSE and cond.reason == Reason.QUERY_ERROR
    assert cond.message.startswith("latency: Prometheus rejected the query")
    assert condition(snap, NS, SVC, required=["cpu", "requests"]).status is ConditionStatus.TRUE


def test_gpu_missing_is_not_required_by_default() -> None:
    snap = assemble(T, healthy(Tick()).results(), MetricsConfig())
    r1 = snap.revision(NS, SVC, "r1")
    assert r1.missing == ("gpu",)
    assert r1.signals.gpu_duty_cycle is None
    assert condition(snap, NS, SVC).status is ConditionStatus.TRUE
    with_gpu = condition(snap, NS, SVC, required=["cpu", "gpu"])
    assert with_gpu.status is ConditionStatus.FALSE
    assert "gpu missing for r1" in with_gpu.message


def test_other_services_do_not_leak() -> None:
    tick = healthy(healthy(Tick(), "r1"), "x1", service="other")
    snap = assemble(T, tick.results(), MetricsConfig())
    assert snap.service_keys() == [(NS, "other"), (NS, SVC)]
    assert snap.service(NS, SVC).signals.rps == 10.0
    assert [p.name for p in snap.service(NS, "other").pods] == ["x1-a"]


# ----------------------------------------------------------------------------- NaN


_VALUE = st.one_of(
    st.just("NaN"),
    st.just("+Inf"),
    st.just("-Inf"),
    st.just(0.0),
    st.floats(min_value=1e-3, max_value=1e6),
)
_TIME = st.one_of(st.just("NaN"), st.just("-Inf"), st.floats(min_value=T - 300, max_value=T + 5))


@st.composite
def _ticks(draw: st.DrawFn) -> Tick:
    tick = Tick()
    for revision in draw(st.lists(st.sampled_from(["r1", "r2", "r3"]), max_size=3, unique=True)):
        for pod in draw(st.lists(st.sampled_from("abc"), max_size=3, unique=True)):
            tick.pod(
                revision,
                f"{revision}-{pod}",
                usage=draw(st.none() | _VALUE),
                request=draw(st.none() | _VALUE),
                cpu_total=draw(st.none() | _VALUE),
                cpu_time=draw(_TIME),
                gpu=draw(st.none() | _VALUE),
                gpu_memory=draw(st.none() | _VALUE),
                gpu_time=draw(_TIME),
            )
        statuses = draw(st.lists(st.sampled_from(["OK", "INTERNAL"]), max_size=2, unique=True))
        tick.requests(
            revision,
            {s: draw(_VALUE) for s in statuses},
            totals={("p", s): draw(st.floats(0, 1e6)) for s in statuses},
            sample_time=draw(_TIME),
        )
        bounds = draw(st.lists(st.sampled_from([*BOUNDS[:6], math.inf]), max_size=7, unique=True))
        tick.latency(
            revision,
            {le: draw(_VALUE) for le in bounds},
            busy=draw(st.none() | _VALUE),
            totals={"p": {le: draw(st.floats(0, 1e6)) for le in bounds}},
            sample_time=draw(_TIME),
        )
    return tick


def _floats(value: Any, where: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, float | int) and not isinstance(value, bool):
        yield where, value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _floats(v, f"{where}[{k!r}]")
    elif isinstance(value, tuple | list):
        for i, v in enumerate(value):
            yield from _floats(v, f"{where}[{i}]")
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _floats(getattr(value, f.name), f"{where}.{f.name}")


def _all_finite(snap: MetricsSnapshot) -> None:
    for key, revision in snap.revisions.items():
        for where, value in _floats(revision, str(key)):
            assert math.isfinite(value), f"{where} = {value}"
    for namespace, service in snap.service_keys():
        for where, value in _floats(snap.service(namespace, service), service):
            assert math.isfinite(value), f"{where} = {value}"


@settings(max_examples=150, deadline=None)
@given(_ticks(), st.lists(st.floats(0.1, 99.9), min_size=1, max_size=4, unique=True))
def test_no_nan_or_infinity_ever_reaches_the_signals(tick: Tick, percentiles: list[float]) -> None:
    config = MetricsConfig(percentiles=tuple(percentiles))
    tracker = CounterTracker()
    for _ in range(2):  # the second tick exercises the counters' deltas
        snap = assemble(T, tick.results(), config, tracker)
        _all_finite(snap)
        for revision in snap.revisions.values():
            for value in revision.signals.latency_ms.values():
                assert value >= 0
            if revision.signals.error_rate is not None:
                assert 0 <= revision.signals.error_rate <= 1
        condition(snap, NS, SVC)  # never raises


def test_parse_vector() -> None:
    samples = parse_vector(
        [
            {"metric": {"a": "1"}, "value": [1000.5, "2.5"]},
            {"metric": {}, "value": [1000, "NaN"]},
            {"value": [1000, "+Inf"]},
            {"metric": {}, "value": [1000, "-Inf"]},
        ]
    )
    assert samples[0] == Sample({"a": "1"}, 2.5, 1000.5)
    assert [s.value for s in samples[1:]] == [None, None, None]
    assert samples[2].labels == {}


@pytest.mark.parametrize(
    "result",
    [
        [1000, "1"],  # a scalar's result
        [{"metric": {}, "values": [[1000, "1"]]}],  # a range vector (matrix)
        [{"metric": {}, "value": [1000]}],
        [{"metric": {}, "value": [1000, "one"]}],
    ],
)
def test_parse_vector_refuses_what_is_not_an_instant_vector(result: Any) -> None:
    # A ValueError (not a TypeError/KeyError): the source turns it into a QueryError.
    with pytest.raises(ValueError):
        parse_vector(result)


# ----------------------------------------------------------------------------- counters


KEY = (NS, SVC, "r1")


def test_counter_tracker_under_pod_churn() -> None:
    tracker = CounterTracker()
    assert tracker.total(KEY, "requests") is None
    tracker.add(KEY, "requests", ("a",), 100.0)  # a new pod counts its full value
    tracker.add(KEY, "requests", ("b",), 50.0)
    assert tracker.total(KEY, "requests") == 150.0
    tracker.add(KEY, "requests", ("a",), 110.0)  # b is gone: the total keeps its 50
    assert tracker.total(KEY, "requests") == 160.0
    tracker.add(KEY, "requests", ("a",), 5.0)  # a restarted: 5 since the restart
    assert tracker.total(KEY, "requests") == 165.0
    tracker.add(KEY, "requests", ("c",), 7.0)
    tracker.add(KEY, "requests", ("a",), 5.0)  # unchanged
    assert tracker.total(KEY, "requests") == 172.0
    # Series are told apart by their labels, and counters by name.
    tracker.add(KEY, "errors", ("a", "INTERNAL"), 1.0)
    tracker.add(KEY, "errors", ("a", "UNAVAILABLE"), 2.0)
    assert tracker.total(KEY, "errors") == 3.0
    assert tracker.total(KEY, "requests") == 172.0


def test_counter_tracker_forget() -> None:
    tracker = CounterTracker()
    other = (NS, SVC, "r2")
    tracker.add(KEY, "requests", ("a",), 10.0)
    tracker.add(other, "requests", ("a",), 20.0)
    tracker.forget([KEY])
    assert tracker.total(KEY, "requests") == 10.0
    assert tracker.total(other, "requests") is None
    tracker.add(other, "requests", ("a",), 25.0)  # its last value is gone too: counted in full
    assert tracker.total(other, "requests") == 25.0
    tracker.forget([])
    assert tracker.total(KEY, "requests") is None


_ACTION = st.tuples(st.sampled_from(["inc", "restart", "hidden", "gone"]), st.integers(0, 50))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(_ACTION, min_size=4, max_size=4), min_size=1, max_size=25))
def test_counter_tracker_totals_only_grow_and_count_every_increment(
    ticks: list[list[tuple[str, int]]],
) -> None:
    """Per-pod cumulative counters with restarts, pods hidden for a while, pods gone.

    ``inc``: the counter grows by d and is scraped; ``restart``: the pod restarts (from 0)
    and serves d requests; ``hidden``: it grows by d but is not in this tick's answer;
    ``gone``: the pod is dead from now on. A restart is only visible (and so countable,
    for Prometheus too) when the new value is below the last one seen; the generator
    only restarts pods seen in the previous tick, and a restart is kept only if visible.
    """
    tracker = CounterTracker()
    value = [0, 0, 0, 0]  # the pods' true cumulative counters
    seen = [0, 0, 0, 0]  # the last value scraped
    counted = [0, 0, 0, 0]  # increments up to the last scrape: what the total must be
    since_seen = [0, 0, 0, 0]  # increments not scraped yet
    was_seen = [False] * 4
    gone = [False] * 4
    previous = 0.0
    for actions in ticks:
        for pod, (action, d) in enumerate(actions):
            if gone[pod]:
                continue
            if action == "gone":
                gone[pod] = True
                continue
            if action == "restart" and was_seen[pod] and d < seen[pod]:
                value[pod] = d
                since_seen[pod] = d
            else:
                value[pod] += d
                since_seen[pod] += d
            if action == "hidden":
                was_seen[pod] = False
                continue
            tracker.add(KEY, "requests", (f"pod-{pod}",), float(value[pod]))
            counted[pod] += since_seen[pod]
            since_seen[pod] = 0
            seen[pod] = value[pod]
            was_seen[pod] = True
        total = tracker.total(KEY, "requests") or 0.0
        assert total >= previous
        assert total == sum(counted)
        previous = total


def _churn_tick(pods: Mapping[str, float]) -> Tick:
    tick = Tick()
    for pod, count in pods.items():
        tick.pod("r1", pod, usage=0.1, request=1.0, cpu_total=count / 10)
    tick.requests("r1", {"OK": 1.0}, totals={(pod, "OK"): count for pod, count in pods.items()})
    tick.latency(
        "r1",
        {10.0: 0.0, 18.0: 1.0, math.inf: 1.0},
        totals={pod: {10.0: 0.0, 18.0: count, math.inf: count} for pod, count in pods.items()},
    )
    return tick


def test_assembled_counters_survive_pod_churn() -> None:
    tracker = CounterTracker()
    config = MetricsConfig(latencyBoundsUs=(10.0, 18.0))  # a two-bucket layout
    history = [{"a": 100.0, "b": 50.0}, {"a": 120.0}, {"a": 10.0, "c": 5.0}]
    totals = []
    for i, pods in enumerate(history):
        snap = assemble(T + 15 * i, _churn_tick(pods).results(), config, tracker)
        counters = snap.revision(NS, SVC, "r1").counters
        assert counters is not None and counters.time == T + 15 * i
        totals.append(counters)
    assert [c.requests for c in totals] == [150.0, 170.0, 185.0]
    assert [c.errors for c in totals] == [0.0, 0.0, 0.0]
    assert [c.cpu_seconds for c in totals] == pytest.approx([15.0, 17.0, 18.5])
    # Per bucket (not cumulative), on the layout plus +Inf: all in (10, 18].
    assert [c.latency_buckets for c in totals] == [
        (0.0, 150.0, 0.0),
        (0.0, 170.0, 0.0),
        (0.0, 185.0, 0.0),
    ]


def test_errors_are_requests_with_a_status_other_than_ok() -> None:
    tick = Tick().requests(
        "r1",
        {"OK": 1.0},
        totals={("a", "OK"): 90.0, ("a", "INTERNAL"): 7.0, ("b", "DEADLINE_EXCEEDED"): 3.0},
    )
    counters = (
        assemble(T, tick.results(), MetricsConfig(), CounterTracker())
        .revision(NS, SVC, "r1")
        .counters
    )
    assert counters is not None
    assert (counters.requests, counters.errors) == (100.0, 10.0)


def test_no_counters_without_a_tracker_or_totals() -> None:
    snap = assemble(T, _churn_tick({"a": 1.0}).results(), MetricsConfig())
    assert snap.revision(NS, SVC, "r1").counters is None
    tick = Tick().requests("r1", {"OK": 1.0})
    snap = assemble(T, tick.results(), MetricsConfig(), CounterTracker())
    assert snap.revision(NS, SVC, "r1").counters is None


def test_counters_survive_a_tick_without_answers() -> None:
    """Prometheus unreachable for one tick must not reset the totals.

    The tracker forgets revisions absent from a tick; absent because every query failed
    is not dead. Forgetting then, with pod b gone meanwhile, made the total drop from 150
    to 120, which the analysis reads as a counter reset.
    """
    tracker = CounterTracker()
    config = MetricsConfig()
    first = assemble(T, _churn_tick({"a": 100.0, "b": 50.0}).results(), config, tracker)
    down: dict[str, list[Sample] | Problem] = {
        s: Problem(s, Reason.UNREACHABLE, f"{s}: unreachable")
        for s in ("cpu", "cpu_requests", "gpu", "requests", "latency")
    }
    assemble(T + 15, down, config, tracker)
    later = assemble(T + 30, _churn_tick({"a": 120.0}).results(), config, tracker)
    before = first.revision(NS, SVC, "r1").counters
    after = later.revision(NS, SVC, "r1").counters
    assert before is not None and after is not None
    assert before.requests == 150.0
    assert after.requests == 170.0
    # A revision that is really gone (a complete tick without it) is forgotten.
    assemble(T + 45, healthy(Tick(), "r2").results(), config, tracker)
    assert tracker.total((NS, SVC, "r1"), "requests") is None


def test_tracker_keeps_expected_revisions() -> None:
    tracker = CounterTracker()
    config = MetricsConfig()
    assemble(T, _churn_tick({"a": 100.0}).results(), config, tracker)
    assemble(T + 15, {}, config, tracker, expected=[KEY])
    assert tracker.total(KEY, "requests") == 100.0


# --- the compact latency query: only buckets between empty and full come back


def _full(shares: Mapping[int, float], total: float) -> dict[float, float]:
    """A whole cumulative histogram on TF Serving's layout: ``shares`` by bucket index."""
    out, running = {}, 0.0
    for index, le in enumerate([*TFS_LATENCY_BOUNDS_US, math.inf]):
        running += shares.get(index, 0.0) * total
        out[le] = running
    return out


def test_compact_latency_equals_the_full_histogram() -> None:
    full = _full({12: 0.5, 13: 0.3, 14: 0.2}, 40.0)
    compact = {le: v for le, v in full.items() if 0 < v < 40.0}
    assert len(compact) == 2  # what the query returns: buckets 12 and 13
    whole = assemble(T, Tick().latency("r1", full, busy=1.0).results(), MetricsConfig())
    short = assemble(
        T, Tick().latency("r1", compact, busy=1.0, count=40.0).results(), MetricsConfig()
    )
    a, b = whole.revision(NS, SVC, "r1"), short.revision(NS, SVC, "r1")
    assert b.signals.latency_ms == a.signals.latency_ms and a.signals.latency_ms
    assert b.latency_rates == a.latency_rates
    assert "latency" not in b.missing


def test_every_request_in_one_bucket_is_placed_by_the_mean() -> None:
    # Nothing lies strictly between empty and full: the mean (busy / count) says where.
    bounds = TFS_LATENCY_BOUNDS_US
    mean_us = (bounds[15] + bounds[16]) / 2  # inside bucket 16
    tick = Tick().latency("r1", {}, busy=20.0 * mean_us, count=20.0)
    r = assemble(T, tick.results(), MetricsConfig()).revision(NS, SVC, "r1")
    assert r.latency_rates[16] == pytest.approx(20.0) and sum(r.latency_rates) == 20.0
    p50 = r.signals.latency(50)
    assert p50 is not None and bounds[15] / 1000 < p50 <= bounds[16] / 1000


def test_no_traffic_in_the_compact_form_is_no_latency_not_nan() -> None:
    tick = Tick().latency("r1", {}, busy=0.0, count=0.0)
    r = assemble(T, tick.results(), MetricsConfig()).revision(NS, SVC, "r1")
    assert r.signals.latency_ms == {} and r.signals.concurrency == 0.0
    assert "latency" not in r.missing
