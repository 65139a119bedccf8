"""Prometheus metrics with TF Serving's names at /monitoring/prometheus/metrics."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from servectl.metrics.names import TFS_LATENCY_BOUNDS_US, TFS_REQUEST_COUNT, TFS_REQUEST_LATENCY
from servectl.modelserver.errors import ServingError
from servectl.modelserver.models import ModelManager
from servectl.modelserver.monitoring import (
    DEFAULT_PROMETHEUS_PATH,
    ServingMetrics,
    metrics_for_flags,
    parse_monitoring_config_text,
)
from servectl.modelserver.rest import RestServer

from .conftest import MODEL

PATH = DEFAULT_PROMETHEUS_PATH


def _start(manager: ModelManager, metrics_path: str | None) -> tuple[RestServer, str]:
    server = RestServer(
        manager, "127.0.0.1", 0, metrics=ServingMetrics(), metrics_path=metrics_path
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.port}"


@pytest.fixture
def served(manager: ModelManager) -> Iterator[tuple[RestServer, str]]:
    server, url = _start(manager, PATH)
    try:
        yield server, url
    finally:
        server.stop()


def _post(url: str, body: object) -> int:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(req) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url) as resp:
            return int(resp.status), resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), "", exc.read().decode()


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def test_config_parsing() -> None:
    on = parse_monitoring_config_text(
        'prometheus_config { enable: true, path: "/monitoring/prometheus/metrics" }'
    )
    assert on.prometheus_enabled and on.prometheus_path == PATH
    assert (
        parse_monitoring_config_text("prometheus_config { enable: true }").prometheus_path == PATH
    )
    assert not parse_monitoring_config_text("").prometheus_enabled
    with pytest.raises(ServingError) as err:
        parse_monitoring_config_text("prometheus_config { bogus: 1 }")
    assert err.value.code == "INVALID_ARGUMENT"


def test_metrics_for_flags(tmp_path: Path) -> None:
    assert metrics_for_flags("")[1] is None
    cfg = tmp_path / "monitoring.config"
    cfg.write_text('prometheus_config { enable: true, path: "/m" }')
    assert metrics_for_flags(str(cfg))[1] == "/m"
    cfg.write_text("prometheus_config { enable: false }")
    assert metrics_for_flags(str(cfg))[1] is None


def test_requests_are_counted_and_timed(served: tuple[RestServer, str]) -> None:
    _, url = served
    predict = f"{url}/v1/models/{MODEL}:predict"
    for _ in range(3):
        assert _post(predict, {"instances": [1.0, 2.0]}) == 200
    assert _post(predict, {"instances": ["x"]}) == 400
    assert _post(f"{url}/v1/models/nope:predict", {"instances": [1.0]}) == 404
    assert (
        _post(
            f"{url}/v1/models/{MODEL}:regress",
            {"examples": [{"x": 1.0}], "signature_name": "regress_x_to_y"},
        )
        == 200
    )
    # Neither is inference, so neither is counted or timed (TF Serving's rule): a
    # readiness probe must not read as load.
    assert _get(f"{url}/v1/models/{MODEL}/metadata")[0] == 200
    assert _get(f"{url}/v1/models/{MODEL}/versions/1")[0] == 200

    status, ctype, text = _get(url + PATH)
    assert status == 200 and ctype.startswith("text/plain")
    assert f"# TYPE {TFS_REQUEST_COUNT} counter" in text
    assert f"{TFS_REQUEST_COUNT}_total" not in text  # TF Serving prints no _total
    samples = _samples(text)

    def count(model: str, code: str) -> float:
        # prometheus_client's parser names counter samples NAME_total; the page (and so
        # what Prometheus stores and servectl queries) has the bare name, checked below.
        key = frozenset({("model_name", model), ("status", code)})
        return samples[(f"{TFS_REQUEST_COUNT}_total", key)]

    assert count(MODEL, "OK") == 4  # 3 predicts and a regress
    assert count(MODEL, "INVALID_ARGUMENT") == 1
    assert count("nope", "NOT_FOUND") == 1
    assert f'{TFS_REQUEST_COUNT}{{model_name="{MODEL}",status="OK"}} 4' in text.splitlines()

    labels = {("model_name", MODEL), ("API", "predict"), ("entrypoint", "REST")}
    n = samples[(f"{TFS_REQUEST_LATENCY}_count", frozenset(labels))]
    total = samples[(f"{TFS_REQUEST_LATENCY}_sum", frozenset(labels))]
    assert n == 4 and total > 0
    buckets = {
        k[1]: v
        for k, v in samples.items()
        if k[0] == f"{TFS_REQUEST_LATENCY}_bucket" and labels <= set(k[1])
    }
    assert len(buckets) == len(TFS_LATENCY_BOUNDS_US) + 1 == 34
    values = sorted(buckets.values())
    assert values[-1] == n  # +Inf holds every request
    assert "GetModelMetadata" not in text and "GetModelStatus" not in text
    regress = {("model_name", MODEL), ("API", "regress"), ("entrypoint", "REST")}
    assert samples[(f"{TFS_REQUEST_LATENCY}_count", frozenset(regress))] == 1
    # The PromQL servectl runs selects these names and labels.
    assert (
        f'{TFS_REQUEST_LATENCY}_bucket{{model_name="{MODEL}",API="predict",'
        'entrypoint="REST",le="+Inf"} 4' in text
    )


def test_exposition_format_and_bucket_placement() -> None:
    metrics = ServingMetrics()
    metrics.record("m", "predict", "GRPC", "OK", 5.0)  # first bucket (< 10)
    metrics.record("m", "predict", "GRPC", "OK", 10.0)  # a bound goes to the next bucket
    metrics.record("m", "predict", "GRPC", "OK", 1e9)  # under the last bound (1.47e9)
    metrics.record('q"\\', "predict", "GRPC", "UNAVAILABLE", 100.0)
    text = metrics.exposition()
    lines = text.splitlines()
    prefix = (
        ':tensorflow:serving:request_latency_bucket{model_name="m",API="predict",entrypoint="GRPC",'
    )
    assert f'{prefix}le="10"}} 1' in lines
    assert f'{prefix}le="18"}} 2' in lines
    assert f'{prefix}le="32.4"}} 2' in lines
    assert f'{prefix}le="+Inf"}} 3' in lines
    metrics.record("m", "predict", "GRPC", "OK", 2e9)  # beyond every bound: +Inf only
    assert f'{prefix}le="+Inf"}} 4' in metrics.exposition().splitlines()
    # Bounds print with six significant digits, as TF Serving's exporter does.
    assert f'{prefix}le="8.19309e+08"}} 2' in lines
    assert f'{prefix}le="1.47476e+09"}} 3' in lines  # the last bound: 1e9 < 1.47e9
    assert (
        ':tensorflow:serving:request_latency_sum{model_name="m",API="predict",'
        'entrypoint="GRPC"} 1e+09' in lines
    )
    assert ':tensorflow:serving:request_count{model_name="m",status="OK"} 3' in lines
    assert (
        ':tensorflow:serving:request_count{model_name="q\\"\\\\",status="UNAVAILABLE"} 1' in lines
    )
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {TFS_REQUEST_COUNT, TFS_REQUEST_LATENCY} <= names


def test_disabled_config_serves_no_metrics(manager: ModelManager) -> None:
    server, url = _start(manager, None)
    try:
        assert _post(f"{url}/v1/models/{MODEL}:predict", {"instances": [1.0]}) == 200
        assert _get(url + PATH)[0] == 404
    finally:
        server.stop()


def test_made_up_model_names_cannot_grow_the_page_without_bound() -> None:
    """A client naming a new model on every request gets MAX_UNSERVED_NAMES series at
    most; the rest are counted under __unknown__, and served models keep their own."""
    metrics = ServingMetrics()
    for i in range(5000):
        metrics.record(f"made-up-{i}", "predict", "REST", "NOT_FOUND", 10.0, served=False)
    metrics.record(MODEL, "predict", "REST", "OK", 10.0)
    text = metrics.exposition()
    names = {line.split('model_name="', 1)[1].split('"', 1)[0] for line in text.splitlines()
             if 'model_name="' in line}  # fmt: skip
    assert len(names) == ServingMetrics.MAX_UNSERVED_NAMES + 2  # + __unknown__ + the model
    assert MODEL in names and ServingMetrics.UNKNOWN_MODEL in names
    unknown = f'{TFS_REQUEST_COUNT}{{model_name="__unknown__",status="NOT_FOUND"}} 4936'
    assert unknown in text.splitlines()
    for i in range(5000, 10_000):  # as many again: the page no longer grows
        metrics.record(f"made-up-{i}", "predict", "REST", "NOT_FOUND", 10.0, served=False)
    assert len(metrics.exposition()) - len(text) < 100  # a few more digits at most
