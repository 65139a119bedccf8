"""The Prometheus source: one query per signal per tick, for every service at once.

The I/O edge of ``servectl.metrics``: it sends the queries of
:mod:`servectl.metrics.promql` through ``prometheus-api-client``, all evaluated at the
same instant, and hands the answers to :func:`servectl.metrics.assemble.assemble`.

A failure never raises out of :meth:`PrometheusSource.snapshot`: Prometheus down, a
timeout or a bad query each become a :class:`~servectl.metrics.assemble.Problem` for the
signal it hit, so the snapshot says what is missing and why, and the engine holds.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import time as _time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from servectl.api.conditions import render_query
from servectl.api.models import AnalysisCheck
from servectl.metrics import names
from servectl.metrics.assemble import (
    CounterTracker,
    CustomRequest,
    MetricsSnapshot,
    Problem,
    Reason,
    RevisionKey,
    Sample,
    assemble,
    parse_vector,
)
from servectl.metrics.config import MetricsConfig
from servectl.metrics.promql import SignalQuery, build_queries, check_templates

#: What one query can fail with. KeyError/TypeError: a 200 answer that is not Prometheus'
#: JSON shape (the client indexes ``["data"]["result"]``), e.g. a proxy's or another API's.
_FAILURES = (
    requests.RequestException,
    PrometheusApiClientException,
    ValueError,
    KeyError,
    TypeError,
)


class PrometheusSource:
    """Per-revision signals from one Prometheus.

    Keep one source per controller: it remembers per-series counter values between
    ticks (:class:`CounterTracker`) so the rollout analysis gets monotonic totals.
    """

    def __init__(
        self,
        url: str,
        config: MetricsConfig | None = None,
        *,
        clock: Callable[[], float] = _time.time,
        headers: dict[str, str] | None = None,
        local_exporter: str | None = None,
    ) -> None:
        """``local_exporter``: the local runtime's replica exporter (``host:port``), which
        serves the cAdvisor, kube-state-metrics and DCGM series there: an empty signal is
        explained in its terms, not a cluster's (:meth:`_local_checks`)."""
        self.url = url.rstrip("/")
        self.local_exporter = local_exporter
        self.config = config or MetricsConfig()
        check_templates(self.config)
        self._clock = clock
        self._client = PrometheusConnect(
            url=self.url,
            headers=headers,
            disable_ssl=False,
            retry=Retry(total=0),
            timeout=self.config.timeout_seconds,
            method="POST",
        )
        self.tracker = CounterTracker()
        self.queries_sent = 0

    # ------------------------------------------------------------------ queries

    def query(self, promql: str, at: float | None = None) -> list[Sample]:
        """One instant query; raises ``requests`` / client exceptions (see :meth:`_problem`)."""
        params = {"time": f"{at:.3f}"} if at is not None else {}
        self.queries_sent += 1
        result: Any = self._client.custom_query(promql, params=params)
        return parse_vector(result)

    def _problem(self, signal: str, exc: Exception) -> Problem:
        if isinstance(exc, requests.Timeout):
            return Problem(
                signal,
                Reason.TIMEOUT,
                f"{signal}: Prometheus at {self.url} did not answer within "
                f"{self.config.timeout_seconds:g} s (raise metrics timeoutSeconds, or look at "
                "its load)",
            )
        if isinstance(exc, requests.ConnectionError):
            return Problem(
                signal,
                Reason.UNREACHABLE,
                f"{signal}: Prometheus at {self.url} is unreachable ({_short(exc)}): is it "
                "running, and is --prometheus the right URL?",
            )
        not_prometheus = _not_prometheus(exc)
        if not_prometheus is not None:
            return Problem(
                signal,
                Reason.NOT_PROMETHEUS,
                f"{signal}: {self.url} is not a Prometheus API ({not_prometheus}); "
                "--prometheus must be Prometheus' base URL, e.g. http://prometheus:9090 "
                "(with its --web.route-prefix, if it has one)",
            )
        if isinstance(exc, PrometheusApiClientException):
            text = str(exc)
            if "HTTP Status Code 5" in text and "execution" not in text:
                return Problem(
                    signal, Reason.UNREACHABLE, f"{signal}: Prometheus at {self.url}: {text}"
                )
            hint = (
                "check the query in the ModelService's spec.rollout analysis"
                if signal.startswith("analysis check")
                else f"check metrics queries.{signal}.* in your config (servectl metrics "
                "queries prints them)"
            )
            return Problem(
                signal,
                Reason.QUERY_ERROR,
                f"{signal}: Prometheus rejected the query ({_prom_error(text)}); {hint}",
            )
        return Problem(signal, Reason.QUERY_ERROR, f"{signal}: {type(exc).__name__}: {exc}")

    def _run(self, query: SignalQuery, at: float) -> Sequence[Sample] | Problem:
        try:
            return self.query(query.promql, at)
        except _FAILURES as exc:
            return self._problem(query.signal, exc)

    # ------------------------------------------------------------------ snapshot

    def snapshot(
        self,
        *,
        expected: Iterable[RevisionKey] = (),
        analysis_services: Iterable[str] | None = None,
        custom: Iterable[CustomRequest] = (),
        diagnose: bool = True,
    ) -> MetricsSnapshot:
        """This tick's signals for every service and revision.

        ``expected``: revisions the caller runs (each appears, missing signals named, even
        when Prometheus has nothing on it). ``analysis_services``: services in a rollout
        analysis, whose per-pod cumulative counters are fetched for
        :class:`~servectl.rollout.counters.Counters`. ``custom``: services whose rollout
        analysis has custom PromQL checks, measured at the same instant
        (:meth:`custom_checks`). ``diagnose``: when a signal returns no series at all, ask
        Prometheus which piece is absent (a few ``count()`` queries, only on that failure)
        to name the cause.
        """
        at = self._clock()
        queries = build_queries(self.config, analysis_services=analysis_services)
        before = self.queries_sent
        with ThreadPoolExecutor(max_workers=len(queries)) as pool:
            answers = list(pool.map(lambda q: self._run(q, at), queries))
        results: dict[str, Sequence[Sample] | Problem] = {
            q.signal: a for q, a in zip(queries, answers, strict=True)
        }
        if diagnose:
            for signal, answer in list(results.items()):
                if not isinstance(answer, Problem) and not answer:
                    found = self._diagnose(signal, at)
                    if found is not None:
                        results[signal] = found
        values: dict[tuple[str, str], dict[str, tuple[float | None, float | None]]] = {}
        custom_problems: list[Problem] = []
        for request in custom:
            measured, problems = self.custom_checks(
                request.checks,
                namespace=request.namespace,
                service=request.service,
                revision=request.revision,
                stable=request.stable,
                at=at,
            )
            values[(request.namespace, request.service)] = measured
            custom_problems += problems
        snap = assemble(
            at,
            results,
            self.config,
            self.tracker,
            queries=self.queries_sent - before,
            expected=expected,
        )
        return dataclasses.replace(snap, custom=values, custom_problems=tuple(custom_problems))

    # ------------------------------------------------------------------ analysis

    def custom_checks(
        self,
        checks: Iterable[AnalysisCheck],
        *,
        namespace: str,
        service: str,
        revision: str,
        stable: str | None,
        at: float | None = None,
    ) -> tuple[dict[str, tuple[float | None, float | None]], list[Problem]]:
        """Values of the rollout's custom PromQL checks for ``revision`` and ``stable``.

        Returns the analysis' ``custom`` mapping (metric -> (value, stable value)) and the
        problems met. A query must give one number per revision: no sample is None (the
        check is then Inconclusive, "query returned no data"); several samples, NaN, or an
        error are None too, with a Problem that says which check and why. Two queries per
        check per tick, for services in an analysis only.
        """
        when = self._clock() if at is None else at
        values: dict[str, tuple[float | None, float | None]] = {}
        problems: list[Problem] = []
        for check in checks:
            if check.query is None:
                continue
            pair: list[float | None] = []
            for rev in (revision, stable):
                if rev is None:
                    pair.append(None)
                    continue
                promql = render_query(
                    check.query, {"revision": rev, "service": service, "namespace": namespace}
                )
                where = f"analysis check {check.metric} ({rev})"
                try:
                    samples = self.query(promql, when)
                except _FAILURES as exc:
                    problems.append(self._problem(where, exc))
                    pair.append(None)
                    continue
                if len(samples) > 1:
                    problems.append(
                        Problem(
                            where,
                            Reason.QUERY_ERROR,
                            f"{where}: the query returned {len(samples)} series; aggregate it "
                            "to one number per revision (e.g. sum(...))",
                        )
                    )
                    pair.append(None)
                    continue
                pair.append(samples[0].value if samples else None)
            values[check.metric] = (pair[0], pair[1])
        return values, problems

    # ------------------------------------------------------------------ diagnosis

    def _local_checks(self, signal: str) -> list[tuple[str, str]]:
        """:meth:`_checks` on the local runtime for the signals its own exporter serves (no
        kubelet, kube-state-metrics or dcgm-exporter there). The exporter runs in the
        controller: just after the controller (re)starts, Prometheus has not scraped it."""
        metric = {
            "cpu": names.CADVISOR_CPU,
            "cpu_requests": names.KSM_REQUESTS,
            "gpu": names.DCGM_GPU_UTIL,
        }[signal]
        exporter = f"servectl's replica exporter (http://{self.local_exporter}/metrics)"
        missing = f"not scraped yet since the controller started, or {self.url} cannot reach it"
        info = self.config.pod_info.metric
        first = (
            f"no {metric} series: no GPU here, or {exporter} is {missing}"
            if signal == "gpu"
            else f"no {metric} series from {exporter}: {missing}"
        )
        return [
            (f"count({metric})", first),
            (f"count({info})", f"no {info} series from {exporter}: {missing}"),
        ]

    def _checks(self, signal: str) -> list[tuple[str, str]]:
        """(PromQL count query, what it means when it is 0) for an empty signal."""
        if self.local_exporter is not None and signal in ("cpu", "cpu_requests", "gpu"):
            return self._local_checks(signal)
        cfg = self.config
        info = cfg.pod_info
        pod_info = [
            (f"count({info.metric})", f"no {info.metric} series (is kube-state-metrics scraped?)"),
            (
                f'count({info.metric}{{{info.service_label}!=""}})',
                f"{info.metric} has no '{info.service_label}' label: allow the servectl.io pod "
                "labels in kube-state-metrics (--metric-labels-allowlist=pods=[servectl.io/"
                "service,servectl.io/revision]) or set metrics podInfo.serviceLabel",
            ),
        ]
        tfs = cfg.tf_serving_labels
        if signal == "cpu":
            return [
                (
                    f"count({names.CADVISOR_CPU})",
                    f"no cAdvisor series {names.CADVISOR_CPU} (is the kubelet's /metrics/cadvisor "
                    "scraped, or the local runtime's CPU exporter running?)",
                ),
                *pod_info,
            ]
        if signal == "cpu_requests":
            return [
                (
                    f"count({names.KSM_REQUESTS})",
                    f"no kube-state-metrics series {names.KSM_REQUESTS}",
                ),
                *pod_info,
            ]
        if signal == "gpu":
            gpu = cfg.gpu_labels
            return [
                (
                    f"count({names.DCGM_GPU_UTIL})",
                    f"no {names.DCGM_GPU_UTIL} series: no GPU, or dcgm-exporter (local: "
                    "servectl exporter gpu) is not scraped",
                ),
                (
                    f'count({names.DCGM_GPU_UTIL}{{{gpu.pod}!=""}})',
                    f"{names.DCGM_GPU_UTIL} series carry no '{gpu.pod}' label: run dcgm-exporter "
                    "in Kubernetes mode, or set metrics gpuLabels (exported_pod when scraped "
                    "through a Service without honorLabels)",
                ),
                *pod_info,
            ]
        if signal in ("requests", "latency"):
            metric = (
                names.TFS_REQUEST_COUNT
                if signal == "requests"
                else names.TFS_REQUEST_LATENCY + "_count"
            )
            return [
                (
                    f'count(up{{{tfs.service}!="", {tfs.revision}!=""}})',
                    f"no model server is scraped: Prometheus has no 'up' series with "
                    f"{tfs.service} and {tfs.revision} set; add the TF Serving scrape job "
                    "(deploy/prometheus/scrape-config.yaml), or set metrics tfServingLabels",
                ),
                (
                    f"count({{__name__={metric!r}}})".replace("'", '"'),
                    f"no TF Serving series {metric}: no model server has served a request "
                    "yet, or they run without --monitoring_config_file (prometheus_config "
                    '{enable: true, path: "/monitoring/prometheus/metrics"})',
                ),
                (
                    f'count({{__name__="{metric}", {tfs.service}!=""}})',
                    f"TF Serving series have no '{tfs.service}' label: the scrape must add "
                    "namespace, service, revision and pod from the pod's labels "
                    "(deploy/prometheus/scrape-config.yaml), or set metrics tfServingLabels",
                ),
            ]
        return []

    def _diagnose(self, signal: str, at: float) -> Problem | None:
        for promql, meaning in self._checks(signal):
            try:
                samples = self.query(promql, at)
            except _FAILURES:
                return None
            count = samples[0].value if samples else 0.0
            if not count:
                reason = Reason.LABEL_MISSING if "label" in meaning else Reason.NO_DATA
                return Problem(signal, reason, f"{signal}: {meaning}")
        return None


def _short(exc: Exception) -> str:
    text = str(exc)
    for marker in ("Connection refused", "Name or service not known", "timed out"):
        if marker in text:
            return marker.lower()
    return text[:160]


_STATUS_RE = re.compile(r"HTTP Status Code (\d{3}) \((b['\"].*)\)$", re.DOTALL)


def _not_prometheus(exc: Exception) -> str | None:
    """What gives away an answer that is not Prometheus' HTTP API, else None.

    Prometheus answers every query with JSON: ``{"status": "success", "data": {...}}``,
    or on an error ``{"status": "error", "errorType": ..., "error": ...}`` with 4xx/5xx.
    A 200 that does not parse or lacks ``data.result`` (the client raises ValueError,
    KeyError or TypeError), or a 4xx whose body is not that error JSON, comes from
    something else: a web server, another API, a wrong path. A 5xx without it is left
    to the caller: a proxy whose Prometheus is down says 502/503.
    """
    if isinstance(exc, json.JSONDecodeError):  # requests' own subclasses it too
        return "its answer is not JSON"
    if isinstance(exc, (KeyError, TypeError)):
        return "its answer has no data.result"
    if not isinstance(exc, PrometheusApiClientException):
        return None
    match = _STATUS_RE.search(str(exc))
    if match is None:
        return None
    status = int(match.group(1))
    if status >= 500 and status != 501:  # 501: the server does not take POST at all
        return None
    try:
        body = json.loads(ast.literal_eval(match.group(2)))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        body = None
    if isinstance(body, dict) and body.get("status") == "error" and "errorType" in body:
        return None  # Prometheus itself refused the query
    return f"POST /api/v1/query answered HTTP {status} without Prometheus' error JSON"


def _prom_error(text: str) -> str:
    """Prometheus' own ``"error"`` field out of the client's exception text.

    The client writes ``HTTP Status Code 400 (b'{...}')``: the body's bytes literal is
    decoded and parsed, as the error text itself often holds (escaped) quotes, e.g.
    ``unexpected "(" in grouping opts``.
    """
    start = text.find("(b")
    if start >= 0 and text.endswith(")"):
        try:
            body = ast.literal_eval(text[start + 1 : -1])
            error = json.loads(body)["error"]
        except (ValueError, SyntaxError, TypeError, KeyError, MemoryError, RecursionError):
            pass
        else:
            return str(error)[:300]
    return text[:200]
