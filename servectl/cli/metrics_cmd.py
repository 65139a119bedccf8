"""``servectl metrics ...``: what servectl reads from Prometheus, and the queries it sends."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from servectl.cli import console
from servectl.cli.console import Output, err, out

metrics_app = typer.Typer(
    help=(
        "Metrics: the per-revision signals servectl reads from Prometheus (CPU, GPU duty "
        "cycle, latency percentiles, request and error rates), one query per signal for all "
        "services at once. See docs/metrics.md."
    ),
    no_args_is_help=True,
)

_CONFIG_HELP = (
    "Metrics config (YAML/JSON): rateWindow, timeoutSeconds, staleAfterSeconds, percentiles, "
    "namespaces, cpuLabels, gpuLabels, podInfo, tfServingLabels, gateway, queries "
    "(docs/metrics.md)."
)


_fail = console.fail


def load_config(path: Path | None, namespaces: list[str] | None = None) -> Any:
    """Read and validate a metrics config file; errors name the field."""
    import yaml  # here, not at the top: every servectl command imports this module

    from servectl.metrics.config import MetricsConfig, MetricsConfigError, parse_config
    from servectl.metrics.promql import TemplateError, check_templates

    doc: Any = None
    if path is not None:
        try:
            doc = yaml.safe_load(path.read_text())
        except OSError as exc:
            raise _fail(f"--config {path}: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            raise _fail(f"--config {path}: not valid YAML: {exc}") from exc
    try:
        config = parse_config(doc)
        if namespaces:
            config = MetricsConfig.model_validate(
                {**config.model_dump(by_alias=True), "namespaces": tuple(namespaces)}
            )
        check_templates(config)
    except (MetricsConfigError, TemplateError, ValueError) as exc:
        where = f"--config {path}: " if path is not None else ""
        raise _fail(f"{where}{exc}") from exc
    return config


def check_url(url: str, option: str) -> None:
    """An http(s) URL with a host, or exit 2 naming the option."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise _fail(f"{option} {url!r}: not a URL ({exc}); e.g. http://127.0.0.1:9090") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _fail(f"{option} {url!r}: give an http(s) URL, e.g. http://127.0.0.1:9090")
    del port


def _num(value: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if value is None else fmt.format(value)


@metrics_app.command("show")
def show(
    prometheus: Annotated[
        str,
        typer.Option(
            "--prometheus", "-p", envvar="SERVECTL_PROMETHEUS", help="Prometheus base URL."
        ),
    ] = "http://127.0.0.1:9090",
    config_file: Annotated[
        Path | None, typer.Option("--config", help=_CONFIG_HELP, dir_okay=False)
    ] = None,
    namespace: Annotated[
        list[str] | None, typer.Option("--namespace", "-n", help="Only this namespace (repeat).")
    ] = None,
    service: Annotated[str | None, typer.Option(help="Only this service.")] = None,
    output: console.OutputOption = Output.TABLE,
    as_json: console.JsonAlias = False,
) -> None:
    """Read every service's signals now and show them per revision.

    Each row is one revision: its pods, CPU (cores and % of requests), GPU duty cycle,
    request rate, error rate, latency percentiles, and the age of its newest sample.
    Then one MetricsAvailable line per service: True, or which signal is missing and why
    (Prometheus down, a query error, a label the scrape did not add, stale samples).

    -o json and -o yaml print one document: the revisions, the problems and the
    conditions; -o wide adds p90, p95, concurrency and GPU memory.

    Exit status: 0 when Prometheus answered every query, 1 when it did not (or when what
    answers at --prometheus is not Prometheus' API).
    """
    from servectl.autoscaling.snapshot import signals_doc
    from servectl.metrics.assemble import Reason, condition
    from servectl.metrics.source import PrometheusSource

    output = console.resolve(output, as_json)
    check_url(prometheus, "--prometheus")
    config = load_config(config_file, namespace)
    source = PrometheusSource(prometheus, config)
    snap = source.snapshot()
    keys = sorted(k for k in snap.revisions if service is None or k[1] == service)
    services = sorted({(k[0], k[1]) for k in keys})
    conditions = {f"{ns}/{svc}": condition(snap, ns, svc) for ns, svc in services}
    hard = [
        p
        for p in snap.problems
        if p.reason
        in (Reason.UNREACHABLE, Reason.NOT_PROMETHEUS, Reason.TIMEOUT, Reason.QUERY_ERROR)
    ]
    if output.machine:
        doc = {
            "prometheus": prometheus,
            "time": snap.time,
            "queries": snap.queries,
            "problems": [vars(p) for p in snap.problems],
            "revisions": [
                {
                    "namespace": k[0],
                    "service": k[1],
                    "revision": k[2],
                    "signals": signals_doc(snap.revisions[k].signals),
                    "pods": [p.name for p in snap.revisions[k].pods],
                    "gpuMemoryMiB": snap.revisions[k].gpu_memory_mib,
                    "ages": dict(snap.revisions[k].ages),
                    "missing": list(snap.revisions[k].missing),
                    "stale": list(snap.revisions[k].stale),
                }
                for k in keys
            ],
            "conditions": {
                name: c.model_dump(mode="json", exclude_none=True) for name, c in conditions.items()
            },
        }
        console.print_records([doc], output)
        raise typer.Exit(1 if hard else 0)
    header = [
        "namespace/service",
        "revision",
        "pods",
        "cpu cores",
        "cpu %",
        "gpu %",
        "rps",
        "errors %",
        "p50 ms",
        "p99 ms",
        "age s",
        "missing",
    ]
    rows = []
    wide_rows = []
    for k in keys:
        r = snap.revisions[k]
        s = r.signals
        rows.append(
            [
                f"{k[0]}/{k[1]}",
                k[2],
                str(len(r.pods)),
                _num(s.cpu_usage_cores),
                _num(s.cpu_utilization, "{:.0f}"),
                _num(s.gpu_duty_cycle, "{:.0f}"),
                _num(s.rps, "{:.1f}"),
                _num(None if s.error_rate is None else 100 * s.error_rate, "{:.2f}"),
                _num(s.latency(50)),
                _num(s.latency(99)),
                _num(s.age_s, "{:.1f}"),
                ", ".join(r.missing + tuple(f"{x} (stale)" for x in r.stale if x not in r.missing)),
            ]
        )
        wide_rows.append(
            [
                _num(s.latency(90)),
                _num(s.latency(95)),
                _num(s.concurrency),
                _num(r.gpu_memory_mib, "{:.0f}"),
            ]
        )
    if keys:
        console.emit(
            output,
            title=f"signals from {prometheus} ({snap.queries} queries)",
            header=header,
            rows=rows,
            records=[],
            wide_header=["p90 ms", "p95 ms", "concurrency", "gpu MiB"],
            wide_rows=wide_rows,
        )
    else:
        out.print("no servectl revisions found in Prometheus")
    for name, c in conditions.items():
        colour = "green" if c.status == "True" else "red"
        out.print(
            f"{escape(name)}: MetricsAvailable=[{colour}]{c.status.value}[/] "
            f"{escape(c.reason)}: {escape(c.message)}",
            highlight=False,
        )
    for reason, text, signals in _grouped(snap.problems):
        err.print(
            f"[yellow]{escape(reason)}[/] ({escape(', '.join(signals))}): {escape(text)}",
            highlight=False,
        )
    raise typer.Exit(1 if hard else 0)


def _grouped(problems: Any) -> list[tuple[str, str, list[str]]]:
    """Problems with the same cause once, listing the signals it hit."""
    groups: dict[tuple[str, str], list[str]] = {}
    for p in problems:
        prefix = f"{p.signal}: "
        text = p.message[len(prefix) :] if p.message.startswith(prefix) else p.message
        groups.setdefault((p.reason, text), []).append(p.signal)
    return [(reason, text, signals) for (reason, text), signals in groups.items()]


@metrics_app.command("queries")
def queries(
    config_file: Annotated[
        Path | None, typer.Option("--config", help=_CONFIG_HELP, dir_okay=False)
    ] = None,
    analysis: Annotated[
        list[str] | None,
        typer.Option(
            "--analysis",
            help="Include the per-pod counter parts for these services (as in a rollout).",
        ),
    ] = None,
) -> None:
    """Print the PromQL servectl sends each tick: one query per signal, all services at once.

    Paste one into Prometheus' UI to see what servectl sees. Each query is an `or` of
    parts tagged with the servectl_part label (a rate, a cumulative total, the newest
    sample's timestamp), so one round trip answers them all.
    """
    from servectl.metrics.promql import build_queries

    config = load_config(config_file)
    for query in build_queries(config, analysis_services=analysis):
        out.print(f"# {query.signal} ({', '.join(query.parts)})", highlight=False)
        print(query.promql)
        print()
