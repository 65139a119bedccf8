"""deploy/prometheus in a real Prometheus: the recording rules over fixture exporters shaped
like cAdvisor, kube-state-metrics, dcgm-exporter and TF Serving, and the TF Serving scrape
job's relabelling fed the labels Kubernetes pod discovery would give it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from servectl.metrics.server import PrometheusServer
from servectl.testing.exporters import TFS_METRICS_PATH, Pod, Scenario, eventually
from servectl.testing.exposition import LatencyHistogram, tf_serving
from tests.integration.conftest import ExporterFactory
from tests.integration.fixtures import DEPLOY_PROMETHEUS, without_kubernetes_sd

TARGETS_TIMEOUT_S = 30
WINDOW_S = 8


def _by_revision(prometheus: PrometheusServer, promql: str) -> dict[tuple[str, str], float]:
    return {
        (s.labels.get("service", ""), s.labels.get("revision", "")): s.value
        for s in prometheus.query(promql)
    }


def test_recording_rules_per_revision(tmp_path: Path, prometheus_binary: str) -> None:
    # rate() divides by the whole window, so it reads low until a series is as old as the
    # window: with the rules' [1m] that is a minute of waiting. The joins and labels are
    # what this test is about (promtool checks the file as is), so it shortens the windows.
    rules = tmp_path / "recording-rules.yaml"
    original = (DEPLOY_PROMETHEUS / "recording-rules.yaml").read_text()
    assert "[1m]" in original
    rules.write_text(original.replace("[1m]", f"[{WINDOW_S}s]"))
    with (
        Scenario() as scenario,
        PrometheusServer(
            tmp_path / "prometheus", rule_files=[rules], binary=prometheus_binary
        ) as prometheus,
    ):
        scenario.add_pods(
            Pod("a-1", service="a", revision="v1", cpu_cores=0.5, pause_cpu_cores=0.3),
            Pod(
                "a-2",
                service="a",
                revision="v2",
                cpu_cores=0.25,
                cpu_request_cores=0.5,
                rps=20,
                error_share=0.05,
                latency_ms=25,
                gpu_util_percent=40,
            ),
            # No servectl.io/service label on the pod: it must not count for anyone.
            Pod("stray", service=None, revision="v1", cpu_cores=1.0, rps=50),
        )
        prometheus.set_targets(scenario.targets())
        prometheus.wait_for_targets(len(scenario.targets()), TARGETS_TIMEOUT_S)

        def cpu() -> None:
            usage = _by_revision(prometheus, "servectl:revision_cpu_usage_cores:rate1m")
            assert usage.keys() == {("a", "v1"), ("a", "v2")}
            assert usage["a", "v1"] == pytest.approx(0.5, abs=0.1)
            assert usage["a", "v2"] == pytest.approx(0.25, abs=0.05)
            requests = _by_revision(prometheus, "servectl:revision_cpu_requests_cores:sum")
            assert requests == {("a", "v1"): 1.0, ("a", "v2"): 0.5}
            ratio = _by_revision(prometheus, "servectl:revision_cpu_utilization:ratio_rate1m")
            assert ratio["a", "v2"] == pytest.approx(0.5, abs=0.1)

        def traffic() -> None:
            rps = _by_revision(prometheus, "servectl:revision_requests:rate1m")
            assert rps["a", "v2"] == pytest.approx(20, rel=0.2)
            assert rps["", "v1"] == pytest.approx(50, rel=0.2)  # the stray pod, apart
            assert ("a", "v1") not in rps  # a-1 has served nothing: no request series yet
            errors = _by_revision(prometheus, "servectl:revision_errors:ratio_rate1m")
            assert errors["a", "v2"] == pytest.approx(0.05, abs=0.02)
            [p50] = prometheus.query(
                'servectl:revision_request_latency_us:p50_rate1m{service="a", revision="v2"}'
            )
            assert 20823 < p50.value < 37481.3  # the bucket that holds 25 ms
            gpu = _by_revision(prometheus, "servectl:revision_gpu_utilization_percent:avg")
            assert gpu == {("a", "v2"): 40.0}

        eventually(cpu)
        eventually(traffic)


def test_tf_serving_job_relabels_pods_like_kubernetes_discovery(
    tmp_path: Path, prometheus_binary: str, exporter_factory: ExporterFactory
) -> None:
    text = tf_serving("resnet", {"OK": 7}, LatencyHistogram.of([25_000.0] * 7))
    by_port_name = exporter_factory(text, metrics_path=TFS_METRICS_PATH)
    by_annotation = exporter_factory(text, metrics_path="/custom/metrics")
    grpc = exporter_factory(text, metrics_path=TFS_METRICS_PATH)

    def pod_target(address: str, pod: str, **meta: str) -> dict[str, object]:
        labels = {
            "__meta_kubernetes_namespace": "ml",
            "__meta_kubernetes_pod_name": pod,
            "__meta_kubernetes_pod_phase": "Running",
            "__meta_kubernetes_pod_node_name": "n1",
            "__meta_kubernetes_pod_container_name": "tf-serving",
            "__meta_kubernetes_pod_container_port_name": "tfs-rest",
            "__meta_kubernetes_pod_label_servectl_io_service": "a",
            "__meta_kubernetes_pod_label_servectl_io_revision": "v1",
            **meta,
        }
        return {"targets": [address], "labels": {k: v for k, v in labels.items() if v}}

    sd_file = tmp_path / "pods.json"
    sd_file.write_text(
        json.dumps(
            [
                pod_target(by_port_name.address, "a-1"),
                # Same pod, its gRPC port: not the named REST port, dropped.
                pod_target(grpc.address, "a-1", __meta_kubernetes_pod_container_port_name="grpc"),
                # Port and path from annotations override the named port's.
                pod_target(
                    "127.0.0.1:1",
                    "a-2",
                    __meta_kubernetes_pod_label_servectl_io_revision="v2",
                    __meta_kubernetes_pod_annotation_prometheus_io_port=str(by_annotation.port),
                    __meta_kubernetes_pod_annotation_prometheus_io_path="/custom/metrics",
                ),
                pod_target(grpc.address, "a-3", __meta_kubernetes_pod_phase="Pending"),
                pod_target(
                    grpc.address, "other", __meta_kubernetes_pod_label_servectl_io_revision=""
                ),
            ]
        )
    )
    jobs = yaml.safe_load((DEPLOY_PROMETHEUS / "scrape-config.yaml").read_text())["scrape_configs"]
    with PrometheusServer(
        tmp_path / "prometheus",
        extra_scrape_configs=without_kubernetes_sd(jobs, sd_file),
        binary=prometheus_binary,
    ) as prometheus:
        targets = prometheus.wait_for_targets(2, TARGETS_TIMEOUT_S, job="servectl-tf-serving")
        assert {t.scrape_url for t in targets} == {
            f"http://{by_port_name.address}{TFS_METRICS_PATH}",
            f"http://{by_annotation.address}/custom/metrics",
        }
        series = prometheus.wait_for_series(':tensorflow:serving:request_count{status="OK"}')
        labels = sorted(
            (s.labels["namespace"], s.labels["service"], s.labels["revision"], s.labels["pod"])
            for s in series
        )
        assert labels == [("ml", "a", "v1", "a-1"), ("ml", "a", "v2", "a-2")]
        assert {s.labels["model_name"] for s in series} == {"resnet"}
        assert grpc.scrape_count == 0
