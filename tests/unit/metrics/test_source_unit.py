"""PrometheusSource without a real Prometheus: failures become problems, never exceptions.

A tiny local HTTP server stands in for Prometheus' ``/api/v1/query``; each test says how
it answers (slowly, with an error, with canned vectors).
"""

from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from servectl.api.models import ConditionStatus
from servectl.metrics import names
from servectl.metrics.assemble import Problem, Reason, condition
from servectl.metrics.config import MetricsConfig
from servectl.metrics.promql import PART_LABEL
from servectl.metrics.source import PrometheusSource

NOW = 1000.0
SIGNALS = ("cpu", "cpu_requests", "gpu", "requests", "latency")


def clock() -> float:
    return NOW


@dataclass
class Request:
    method: str
    path: str
    params: dict[str, str]


Answer = tuple[int, Any]  # HTTP status, JSON body


@dataclass
class FakePrometheus:
    """Answers each query with ``answer(query)``; records what it was sent."""

    answer: Callable[[str], Answer]
    delay_s: float = 0.0
    requests: list[Request] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    url: str = ""


@pytest.fixture
def prometheus() -> Iterator[FakePrometheus]:
    fake = FakePrometheus(answer=lambda query: (200, _vector([])))

    class Handler(http.server.BaseHTTPRequestHandler):
        def _serve(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            params = dict(urllib.parse.parse_qsl(url.query))
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                params.update(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
            fake.requests.append(Request(self.command, url.path, params))
            if fake.delay_s:
                fake.release.wait(fake.delay_s)
            status, body = fake.answer(params.get("query", ""))
            # Compact, as Prometheus writes it.
            data = (
                body
                if isinstance(body, bytes)
                else json.dumps(body, separators=(",", ":")).encode()
            )
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client gave up (timeout)
                pass

        do_GET = _serve
        do_POST = _serve

        def log_message(self, *args: Any) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield fake
    finally:
        fake.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def _vector(result: list[dict[str, Any]]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def _item(value: float | str, **labels: str) -> dict[str, Any]:
    return {"metric": labels, "value": [NOW, str(value)]}


def _signal_of(query: str) -> str:
    if query.startswith("count("):
        return "diagnosis"
    for metric, signal in [
        (names.KSM_REQUESTS, "cpu_requests"),
        (names.CADVISOR_CPU, "cpu"),
        (names.DCGM_GPU_UTIL, "gpu"),
        (names.TFS_REQUEST_COUNT, "requests"),
        (names.TFS_REQUEST_LATENCY, "latency"),
    ]:
        if metric in query:
            return signal
    return "unknown"


# ----------------------------------------------------------------------------- down


def test_unreachable_prometheus_is_a_problem_for_every_signal() -> None:
    source = PrometheusSource("http://127.0.0.1:1/", MetricsConfig(), clock=clock)
    assert source.url == "http://127.0.0.1:1"
    started = time.monotonic()
    snap = source.snapshot(expected=[("prod", "svc", "r1")])
    assert time.monotonic() - started < 5  # no retries
    assert snap.time == NOW
    assert {p.signal for p in snap.problems} == set(SIGNALS)
    for problem in snap.problems:
        assert problem.reason == Reason.UNREACHABLE
        assert "Prometheus at http://127.0.0.1:1 is unreachable" in problem.message
        assert "--prometheus" in problem.message
    assert snap.queries == 5  # no diagnosis queries against a server that is down
    assert snap.revision("prod", "svc", "r1").missing == ("cpu", "gpu", "latency", "requests")
    cond = condition(snap, "prod", "svc")
    assert cond.status is ConditionStatus.FALSE
    assert cond.reason == Reason.UNREACHABLE
    assert "Prometheus at http://127.0.0.1:1" in cond.message


def test_unreachable_with_a_gateway_query_too() -> None:
    config = MetricsConfig(gateway="sum by (namespace, service, revision, code) (rate(x[1m]))")
    snap = PrometheusSource("http://127.0.0.1:1", config, clock=clock).snapshot()
    assert {p.signal for p in snap.problems} == {*SIGNALS, "gateway"}


def test_bad_template_fails_at_construction() -> None:
    from servectl.metrics.promql import TemplateError

    config = MetricsConfig(queries={"cpu.value": "rate(x[{{windw}}])"})
    with pytest.raises(TemplateError, match=r"queries\.cpu\.value: unknown placeholder"):
        PrometheusSource("http://127.0.0.1:1", config, clock=clock)


# ----------------------------------------------------------------------------- slow, errors


def test_slow_prometheus_is_a_timeout(prometheus: FakePrometheus) -> None:
    prometheus.delay_s = 3.0
    config = MetricsConfig(timeout_seconds=0.3)
    source = PrometheusSource(prometheus.url, config, clock=clock)
    started = time.monotonic()
    snap = source.snapshot()
    elapsed = time.monotonic() - started
    assert elapsed < 2.0  # the queries run in parallel, each bounded by the timeout
    assert {p.signal for p in snap.problems} == set(SIGNALS)
    for problem in snap.problems:
        assert problem.reason == Reason.TIMEOUT == "QueryTimeout"
        assert "did not answer within 0.3 s" in problem.message
        assert "timeoutSeconds" in problem.message
    cond = condition(snap, "prod", "svc")
    assert cond.status is ConditionStatus.FALSE and cond.reason == Reason.TIMEOUT


BAD_DATA = {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"}


def test_rejected_query_is_a_query_error_with_prometheus_text(
    prometheus: FakePrometheus,
) -> None:
    prometheus.answer = lambda query: (400, BAD_DATA)
    snap = PrometheusSource(prometheus.url, clock=clock).snapshot()
    for signal in SIGNALS:
        problem = snap.problem(signal)
        assert problem is not None and problem.reason == Reason.QUERY_ERROR == "QueryError"
        assert "Prometheus rejected the query (parse error at char 3)" in problem.message
        assert f"queries.{signal}.*" in problem.message
    cond = condition(snap, "prod", "svc")
    assert cond.status is ConditionStatus.FALSE and cond.reason == Reason.QUERY_ERROR
    assert "parse error" in cond.message


def test_prometheus_error_text_with_quotes_is_kept_whole(prometheus: FakePrometheus) -> None:
    error = '1:11: parse error: unexpected "(" in grouping opts, expected "," or ")"'
    prometheus.answer = lambda query: (400, {**BAD_DATA, "error": error})
    snap = PrometheusSource(prometheus.url, clock=clock).snapshot()
    problem = snap.problem("cpu")
    assert problem is not None
    assert f"Prometheus rejected the query ({error}); check" in problem.message


def test_one_signal_rejected_the_others_fine(prometheus: FakePrometheus) -> None:
    def answer(query: str) -> Answer:
        if _signal_of(query) == "latency":
            return 400, BAD_DATA
        return 200, _vector([])

    prometheus.answer = answer
    snap = PrometheusSource(prometheus.url, clock=clock).snapshot(diagnose=False)
    assert [p.reason for p in snap.problems if p.signal == "latency"] == [Reason.QUERY_ERROR]
    assert all(p.reason == Reason.NO_DATA for p in snap.problems if p.signal != "latency")


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (503, b"Service Unavailable", Reason.UNREACHABLE),
        (502, b"<html>bad gateway</html>", Reason.UNREACHABLE),
        (
            422,
            {"status": "error", "errorType": "execution", "error": "many-to-many matching"},
            Reason.QUERY_ERROR,
        ),
        # Something that is not Prometheus' API answers: said as such (issue 11).
        (200, b"<html>not prometheus</html>", Reason.NOT_PROMETHEUS),
        (200, {"status": "success"}, Reason.NOT_PROMETHEUS),  # no data
        (404, b"<html>no such page</html>", Reason.NOT_PROMETHEUS),
        (400, {"detail": "not this API"}, Reason.NOT_PROMETHEUS),
        (501, b"Unsupported method ('POST')", Reason.NOT_PROMETHEUS),
        (
            400,
            {"status": "error", "errorType": "bad_data", "error": "parse error"},
            Reason.QUERY_ERROR,
        ),
        (
            200,
            {"status": "success", "data": {"resultType": "scalar", "result": [1000, "1"]}},
            Reason.QUERY_ERROR,
        ),
        (
            200,
            {
                "status": "success",
                "data": {"resultType": "matrix", "result": [{"metric": {}, "values": []}]},
            },
            Reason.QUERY_ERROR,
        ),
    ],
)
def test_odd_answers_never_raise(
    prometheus: FakePrometheus, status: int, body: Any, reason: str
) -> None:
    prometheus.answer = lambda query: (status, body)
    snap = PrometheusSource(prometheus.url, clock=clock).snapshot()
    assert {p.signal for p in snap.problems} == set(SIGNALS)
    assert {p.reason for p in snap.problems} == {reason}
    if reason == Reason.QUERY_ERROR and isinstance(body, dict) and "error" in body:
        assert all(str(body["error"]) in p.message for p in snap.problems)
    if reason == Reason.NOT_PROMETHEUS:
        assert all("is not a Prometheus API" in p.message for p in snap.problems)
        assert all("--prometheus must be" in p.message for p in snap.problems)
        assert not any("config" in p.message for p in snap.problems)
    assert condition(snap, "prod", "svc").status is ConditionStatus.FALSE


# ----------------------------------------------------------------------------- answers


def _healthy(query: str) -> Answer:
    rev = {"namespace": "prod", "service": "svc", "revision": "r1"}
    pod = {**rev, "pod": "r1-a"}
    signal = _signal_of(query)
    if signal == "cpu":
        return 200, _vector(
            [
                _item(0.5, **pod, **{PART_LABEL: "value"}),
                _item(NOW - 10, **pod, **{PART_LABEL: "sample_time"}),
                _item(30.0, **pod, **{PART_LABEL: "total"}),
            ]
        )
    if signal == "cpu_requests":
        return 200, _vector([_item(2.0, **pod, **{PART_LABEL: "value"})])
    if signal == "requests":
        items = [
            _item(9.0, **rev, status="OK", **{PART_LABEL: "rate"}),
            _item(1.0, **rev, status="INTERNAL", **{PART_LABEL: "rate"}),
            _item(NOW - 5, **rev, **{PART_LABEL: "sample_time"}),
        ]
        if "total" in query:
            items.append(_item(500.0, **pod, status="OK", **{PART_LABEL: "total"}))
        return 200, _vector(items)
    if signal == "latency":
        items = [
            _item(0.0, **rev, le="10", **{PART_LABEL: "rate"}),
            _item(10.0, **rev, le="18", **{PART_LABEL: "rate"}),
            _item(10.0, **rev, le="+Inf", **{PART_LABEL: "rate"}),
            _item(140.0, **rev, **{PART_LABEL: "busy"}),
            _item(NOW - 5, **rev, **{PART_LABEL: "sample_time"}),
        ]
        return 200, _vector(items)
    return 200, _vector([])  # no GPU; and the diagnosis' count() finds nothing


def test_healthy_answers_become_signals(prometheus: FakePrometheus) -> None:
    prometheus.answer = _healthy
    source = PrometheusSource(prometheus.url + "/", clock=clock)
    snap = source.snapshot(analysis_services=["svc"])
    r1 = snap.revision("prod", "svc", "r1")
    assert r1.signals.cpu_utilization == pytest.approx(25.0)
    assert r1.signals.rps == pytest.approx(10.0)
    assert r1.signals.error_rate == pytest.approx(0.1)
    assert r1.signals.latency(50) == pytest.approx(0.014)
    assert r1.signals.concurrency == pytest.approx(140e-6)
    assert r1.ages == {"cpu": 10.0, "requests": 5.0, "latency": 5.0}
    assert r1.counters is not None and r1.counters.requests == 500.0
    assert r1.counters.cpu_seconds == 30.0
    assert condition(snap, "prod", "svc").status is ConditionStatus.TRUE
    # One query per signal, all at the source's clock, POSTed to the query API; then the
    # empty GPU signal's diagnosis: a single count() that finds no DCGM series.
    main = prometheus.requests[:5]
    assert sorted(_signal_of(r.params["query"]) for r in main) == sorted(SIGNALS)
    assert all(r.method == "POST" and r.path == "/api/v1/query" for r in prometheus.requests)
    assert {r.params["time"] for r in prometheus.requests} == {"1000.000"}
    assert [r.params["query"] for r in prometheus.requests[5:]] == [f"count({names.DCGM_GPU_UTIL})"]
    assert snap.queries == 6 == source.queries_sent
    gpu = snap.problem("gpu")
    assert gpu is not None and gpu.reason == Reason.NO_DATA
    assert "no DCGM_FI_DEV_GPU_UTIL series" in gpu.message


def test_query_count_is_constant_in_services(prometheus: FakePrometheus) -> None:
    prometheus.answer = _healthy
    source = PrometheusSource(prometheus.url, clock=clock)
    one = source.snapshot(analysis_services=["svc"], diagnose=False)
    many = source.snapshot(analysis_services=[f"s{i}" for i in range(500)], diagnose=False)
    assert one.queries == many.queries == 5


def test_diagnosis_names_the_missing_label(prometheus: FakePrometheus) -> None:
    def answer(query: str) -> Answer:
        if query == f"count({names.KSM_POD_LABELS})":
            return 200, _vector([_item(12)])
        if query.startswith("count("):
            # cAdvisor is there; kube_pod_labels has no servectl label.
            found = names.CADVISOR_CPU in query and "{" not in query
            return 200, _vector([_item(40)] if found else [])
        return 200, _vector([])

    prometheus.answer = answer
    snap = PrometheusSource(prometheus.url, clock=clock).snapshot()
    cpu = snap.problem("cpu")
    assert cpu is not None and cpu.reason == Reason.LABEL_MISSING
    assert "label_servectl_io_service" in cpu.message
    assert "--metric-labels-allowlist" in cpu.message


def test_counters_accumulate_across_snapshots(prometheus: FakePrometheus) -> None:
    totals = iter([500.0, 520.0, 7.0])  # the pod restarted before the third tick

    def answer(query: str) -> Answer:
        status, body = _healthy(query)
        if _signal_of(query) == "requests" and "total" in query:
            value = next(totals)
            for item in body["data"]["result"]:
                if item["metric"][PART_LABEL] == "total":
                    item["value"] = [NOW, str(value)]
        return status, body

    prometheus.answer = answer
    source = PrometheusSource(prometheus.url, clock=clock)
    seen = []
    for _ in range(3):
        counters = (
            source.snapshot(analysis_services=["svc"], diagnose=False)
            .revision("prod", "svc", "r1")
            .counters
        )
        assert counters is not None
        seen.append(counters.requests)
    assert seen == [500.0, 520.0, 527.0]


def test_problem_passes_through_the_result_map() -> None:
    # The source hands assemble() Problems unchanged: their signal is the query's.
    source = PrometheusSource("http://127.0.0.1:1", clock=clock)
    problem = source._problem("latency", ValueError("boom"))
    assert problem == Problem("latency", Reason.QUERY_ERROR, "latency: ValueError: boom")
