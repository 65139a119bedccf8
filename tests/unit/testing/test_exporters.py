"""servectl.testing's fake exporters and exposition builders: formats, counters, exporter
lifecycle, reading exposition back. No Prometheus needed (tests/integration lints the
builders' text with promtool and scrapes them with a real Prometheus)."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from servectl.metrics import names
from servectl.testing.exporters import FixtureExporter, Pod, Scenario, scrape, wait_until
from servectl.testing.exposition import (
    TFS_BUCKETS,
    LatencyHistogram,
    go_float,
    label_set,
    latency_bucket,
    parse_samples,
    samples_named,
    tf_serving,
    tfs_le,
)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0"),
        (1.0, "1"),
        (0.25, "0.25"),
        (12.345678, "12.345678"),
        (100000.0, "100000"),
        (1234567.0, "1.234567e+06"),
        (2147483648.0, "2.147483648e+09"),
        (0.0001, "0.0001"),
        (0.00001234, "1.234e-05"),
        (-3e-7, "-3e-07"),
        (float("inf"), "+Inf"),
        (float("nan"), "NaN"),
    ],
)
def test_go_float_prints_like_strconv_g(value: float, text: str) -> None:
    assert go_float(value) == text


def test_tf_serving_bounds_print_with_six_digits() -> None:
    les = [tfs_le(b) for b in names.TFS_LATENCY_BOUNDS_US]
    assert les[:5] == ["10", "18", "32.4", "58.32", "104.976"]
    assert les[8] == "1102" and les[13:15] == ["20823", "37481.3"]
    assert les[-1] == "1.47476e+09"
    parsed = [float(le) for le in les]
    assert parsed == pytest.approx(list(names.TFS_LATENCY_BOUNDS_US), rel=1e-5)


def test_latency_buckets_have_exclusive_bounds_like_tf() -> None:
    assert latency_bucket(9.99) == 0
    assert latency_bucket(10.0) == 1  # a value on a bound counts in the next bucket
    assert latency_bucket(25_000.0) == 14  # le="37481.3"
    assert latency_bucket(1e10) == TFS_BUCKETS - 1  # +Inf


def test_tf_serving_histogram_is_cumulative_and_counts_match() -> None:
    text = tf_serving("m", {"OK": 3}, LatencyHistogram.of([25_000.0, 25_000.0, 50.0]))
    bucket = f"{names.TFS_REQUEST_LATENCY}_bucket"
    lines = [ln for ln in text.splitlines() if ln.startswith(bucket)]
    assert len(lines) == TFS_BUCKETS
    assert lines[2].endswith('le="32.4"} 0') and lines[3].endswith('le="58.32"} 1')
    assert lines[13].endswith('le="20823"} 1') and lines[14].endswith('le="37481.3"} 3')
    assert lines[-1].endswith('le="+Inf"} 3')
    head = 'model_name="m",API="predict",entrypoint="REST"'
    assert f"{names.TFS_REQUEST_LATENCY}_sum{{{head}}} 50050\n" in text
    assert f'{names.TFS_REQUEST_COUNT}{{model_name="m",status="OK"}} 3' in text
    assert "# HELP :tensorflow" not in text  # TF Serving prints TYPE lines only


def test_scenario_counters_integrate_the_rates() -> None:
    scenario = Scenario(live=False)
    scenario.add_pod(Pod("p", cpu_cores=0.5, rps=10, error_share=0.1, latency_ms=25))
    scenario.advance(10)
    scenario.update("p", cpu_cores=1.0, error_share=0.0)
    scenario.advance(10)
    counters = scenario.counters("p")
    assert counters.cpu_seconds == pytest.approx(15.0)
    assert counters.requests == {"OK": pytest.approx(190.0), "INTERNAL": pytest.approx(10.0)}
    assert counters.latency_sum_us == pytest.approx(200 * 25_000.0)
    text = scenario.render_tf_serving("p")
    assert 'status="INTERNAL"} 10\n' in text and 'status="OK"} 190\n' in text
    assert 'le="37481.3"} 200\n' in text and 'le="20823"} 0\n' in text

    cadvisor = scenario.render_cadvisor()
    assert 'container="tf-serving"' in cadvisor and 'container="POD"' in cadvisor
    assert 'container="",' in cadvisor
    scenario.remove_pod("p")
    assert 'pod="p"' not in scenario.render_cadvisor()
    with pytest.raises(RuntimeError):
        Scenario().advance(1)


def test_no_error_series_before_the_first_error() -> None:
    scenario = Scenario(live=False)
    scenario.add_pod(Pod("p", rps=5))
    scenario.advance(2)
    text = scenario.render_tf_serving("p")
    assert 'status="OK"} 10' in text and "INTERNAL" not in text
    scenario.add_pod(Pod("idle"))
    assert names.TFS_REQUEST_LATENCY not in scenario.render_tf_serving("idle").replace(
        f"# TYPE {names.TFS_REQUEST_COUNT}", ""
    )


def test_kube_state_metrics_can_omit_a_servectl_label() -> None:
    scenario = Scenario(live=False)
    scenario.add_pod(Pod("p", service=None, revision="v1"))
    text = scenario.render_kube_state_metrics()
    assert names.KSM_LABEL_REVISION in text and names.KSM_LABEL_SERVICE not in text
    assert 'resource="memory",unit="byte"} 2.147483648e+09' in text


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""


def test_exporter_serves_counts_fails_and_comes_back_on_its_port() -> None:
    with FixtureExporter("a 1\n", metrics_path="/m") as exporter:
        assert _get(exporter.url) == (200, "a 1\n")
        exporter.set_text("a 2\n")
        assert _get(exporter.url) == (200, "a 2\n")
        assert _get(f"http://{exporter.address}/other")[0] == 404
        exporter.set_status(500)
        assert _get(exporter.url)[0] == 500
        exporter.set_status(200)
        assert exporter.scrape_count == 3  # the 404 is not a scrape

        port = exporter.port
        exporter.stop()
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(exporter.url, timeout=2)
        exporter.start()
        assert exporter.port == port and _get(exporter.url) == (200, "a 2\n")
    assert not exporter.running


def test_scenario_exporters_serve_what_the_builders_print() -> None:
    with Scenario() as scenario:
        scenario.add_pod(Pod("p", service="s", revision="v1", rps=10))
        targets = {t.job: t for t in scenario.targets()}
        assert set(targets) == {"kubelet", "kube-state-metrics", "dcgm-exporter", "tf-serving"}
        assert targets["tf-serving"].labels == {
            "namespace": "default",
            "pod": "p",
            "service": "s",
            "revision": "v1",
        }
        exporter = scenario.tf_serving_exporter("p")
        _, samples = scrape(exporter.url)
        ok = samples_named(samples, f"{names.TFS_REQUEST_COUNT}_total")
        assert set(ok) == {label_set(model_name="model", status="OK")}
        assert exporter.scrape_count == 1


def test_parse_samples_keys_by_name_and_labels() -> None:
    text = tf_serving("m", {"OK": 3, "INTERNAL": 1}, LatencyHistogram.of([50.0]))
    samples = parse_samples(text)
    # prometheus_client's parser names counter samples with _total.
    counts = samples_named(samples, f"{names.TFS_REQUEST_COUNT}_total")
    assert counts == {
        label_set(model_name="m", status="OK"): 3.0,
        label_set(model_name="m", status="INTERNAL"): 1.0,
    }
    head = {"model_name": "m", "API": "predict", "entrypoint": "REST"}
    bucket = f"{names.TFS_REQUEST_LATENCY}_bucket"
    assert samples[(bucket, label_set(**head, le="+Inf"))] == 1.0


def test_wait_until_fails_like_an_assert() -> None:
    with pytest.raises(AssertionError, match=r"timed out after 0\.1 s waiting for never"):
        wait_until(lambda: False, timeout_s=0.1, what="never")
