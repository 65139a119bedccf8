"""``servectl loadtest``: Locust against a TF-Serving-compatible server (docs/loadtest.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from servectl.cli import console
from servectl.cli.console import Output, err, fail, out

EXIT_LOCUST = 1
EXIT_FAILURE_RATE = 3


def loadtest(
    target: Annotated[
        str,
        typer.Option(help="REST base URL of the server (TF Serving's --rest_api_port)."),
    ] = "http://127.0.0.1:8501",
    grpc: Annotated[
        str | None,
        typer.Option(
            "--grpc",
            help="gRPC HOST:PORT of the server (TF Serving's --port); without --protocol it means "
            "--protocol both.",
        ),
    ] = None,
    model: Annotated[str, typer.Option(help="Model name to call.")] = "cost_model",
    version: Annotated[
        int | None, typer.Option("--model-version", min=0, help="Call this version.")
    ] = None,
    label: Annotated[
        str | None, typer.Option("--model-label", help="Call this version label (e.g. canary).")
    ] = None,
    signature: Annotated[str, typer.Option(help="Signature name.")] = "serving_default",
    payload: Annotated[
        str | None,
        typer.Option(
            help='Predict body: a JSON file or inline JSON ({"instances": ...} or '
            '{"inputs": ...}). Default: a body for half_plus_two and cost_model.',
        ),
    ] = None,
    shape: Annotated[
        str | None,
        typer.Option(
            help="Load shape: constant, step (to --peak-rps at 1/3), spike (--peak-rps "
            "from 1/3 for 1/6 of the run), ramp (--rps to --peak-rps), diurnal (one day over "
            "the run), trace (--trace). Default constant, or trace with --trace.",
        ),
    ] = None,
    rps: Annotated[float, typer.Option(min=0.0, help="Base rate, requests/s.")] = 10.0,
    peak_rps: Annotated[
        float | None, typer.Option(min=0.0, help="Peak rate, requests/s (default 3 x --rps).")
    ] = None,
    duration: Annotated[
        str | None,
        typer.Option(help="Run length: 30s, 2m, 1h (default 30s; with --trace the whole trace)."),
    ] = None,
    users: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Closed loop instead of a shape: N users sending back to back (maximum "
            "throughput at N concurrent requests).",
        ),
    ] = None,
    rps_per_user: Annotated[
        float,
        typer.Option(
            min=0.01, help="Most requests/s one user is paced at; users = ceil(rate / this)."
        ),
    ] = 5.0,
    protocol: Annotated[
        str | None, typer.Option(help="rest, grpc or both (users split between them).")
    ] = None,
    ab_header: Annotated[
        str | None,
        typer.Option(
            help="NAME=VALUE sent as an HTTP header / gRPC metadata by --ab-share of the users, "
            "e.g. x-model-variant=b (servectl's A/B route).",
        ),
    ] = None,
    ab_share: Annotated[
        float | None,
        typer.Option(help="Share of users sending --ab-header, 0-1 (default 0.5)."),
    ] = None,
    trace: Annotated[
        Path | None,
        typer.Option(
            help="Replay a load trace CSV (t,rps rates or timestamp per request; as "
            "servectl simulate --csv)."
        ),
    ] = None,
    speedup: Annotated[
        float, typer.Option(help="With --trace: replay N x faster (rates unchanged).")
    ] = 1.0,
    out_dir: Annotated[
        Path, typer.Option("--out", help="Directory for the CSV, HTML and log reports.")
    ] = Path("out/loadtest"),
    name: Annotated[str, typer.Option(help="Report file name prefix.")] = "loadtest",
    output: console.OutputOption = Output.TABLE,
    as_json: console.JsonAlias = False,
    max_failure_rate: Annotated[
        float | None,
        typer.Option(
            help="Exit 3 when more than this share of requests failed (0.01 = 1 %).",
        ),
    ] = None,
) -> None:
    """Load a TF-Serving-compatible server with Locust (REST and/or gRPC predict).

    Runs Locust headless in a subprocess for --duration, prints progress every few
    seconds, then a table per request name (requests, failures, req/s, p50/p95/p99 ms)
    and where the reports are: PREFIX_stats.csv, PREFIX_failures.csv, an HTML report
    and Locust's log, under --out. The shapes are servectl simulate's traces. Before
    Locust starts, every server it would call must accept a connection, so an
    unreachable target is said in seconds. -o json prints the summary as one JSON object.
    Exit codes: 0 done; 1 Locust could not run (not installed, bad payload, crashed) or
    the target was unreachable; 2 bad options; 3 more than --max-failure-rate of
    requests failed.

    \b
    Examples:
      servectl model export-demo models/
      servectl model-server --model_config_file=models/models.config \\
          --port=8500 --rest_api_port=8501 &
      servectl loadtest --model cost_model --shape step --rps 20 --peak-rps 60 \\
          --duration 30s
      servectl loadtest --grpc 127.0.0.1:8500 --protocol grpc --users 8 \\
          --duration 20s
      servectl loadtest --ab-header x-model-variant=b --ab-share 0.5 \\
          --max-failure-rate 0.01
      servectl loadtest --trace load.csv --speedup 60 -o json
    """
    from servectl.loadtest import runner, shapes

    output = console.resolve(output, as_json)
    try:
        duration_s = shapes.parse_duration(duration) if duration is not None else None
    except shapes.ShapeError as exc:
        raise fail(str(exc)) from exc
    if duration_s is None and trace is None:
        duration_s = 30.0
    if max_failure_rate is not None and not 0.0 <= max_failure_rate <= 1.0:
        raise fail(f"--max-failure-rate {max_failure_rate:g}: give a share 0-1, e.g. 0.01 (1 %)")
    if ab_share is not None and ab_header is None:
        raise fail("--ab-share needs --ab-header NAME=VALUE, e.g. --ab-header x-model-variant=b")
    if shape is None:
        shape = "trace" if trace is not None else "constant"
    if trace is not None and shape != "trace":
        raise fail(f"--trace replays a CSV: drop --shape {shape} (or use --shape trace)")
    if users is not None and (shape not in ("constant",) or trace is not None):
        raise fail("--users runs a closed loop without a shape: drop --shape/--trace")
    if protocol is None:
        protocol = "both" if grpc is not None else "rest"
    config = runner.LoadTestConfig(
        model=model,
        target=target,
        grpc=grpc,
        protocol=protocol,
        version=version,
        label=label,
        signature=signature,
        payload=payload,
        shape=shape,
        rps=rps,
        peak_rps=peak_rps,
        duration_s=duration_s,
        users=users,
        rps_per_user=rps_per_user,
        trace=trace,
        speedup=speedup,
        ab_header=ab_header,
        ab_share=(0.5 if ab_share is None else ab_share) if ab_header is not None else 0.0,
        out_dir=out_dir,
        name=name,
    )
    try:
        config.check()
        what = (
            f"{users} users, closed loop"
            if users is not None
            else config.load_shape().description or shape
        )
    except ValueError as exc:  # ShapeError, PayloadError, TraceError: they name the option
        raise fail(str(exc)) from exc
    err.print(f"load test: {protocol} {model}, {what}", highlight=False, markup=False)
    try:
        result = runner.run(
            config, progress=lambda p: err.print(p.line(), highlight=False, markup=False)
        )
    except ValueError as exc:
        raise fail(str(exc)) from exc
    except runner.LoadTestError as exc:
        raise fail(str(exc), EXIT_LOCUST) from exc
    except OSError as exc:  # --out not writable
        raise fail(f"--out {out_dir}: {exc.strerror or exc}", EXIT_LOCUST) from exc
    summary = result.summary
    header, rows = runner.format_rows(summary)
    console.emit(
        output,
        title=f"load test: {model} ({protocol})",
        header=header,
        rows=rows,
        records=[result.to_record()],
    )
    if not output.machine:
        for failure in summary.failures:
            out.print(
                f"  {failure.occurrences} x {failure.method} {failure.name}: {failure.message}",
                highlight=False,
                markup=False,
            )
        out.print(
            f"reports: {result.csv_prefix}_stats.csv, {result.csv_prefix}_failures.csv, "
            f"{result.html_report}, log {result.log_file}",
            highlight=False,
        )
    for note in summary.notes():
        err.print(f"note: {note}", highlight=False, markup=False)
    if summary.unreachable:
        raise typer.Exit(EXIT_LOCUST)
    if runner.failure_rate_exceeded(summary, max_failure_rate):
        err.print(
            f"[bold red]failure rate {100 * summary.failure_rate:.2f} % exceeds "
            f"--max-failure-rate {100 * (max_failure_rate or 0):.2f} %[/]",
            highlight=False,
        )
        raise typer.Exit(EXIT_FAILURE_RATE)
