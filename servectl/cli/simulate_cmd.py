"""``servectl simulate``: replay a load trace through policies on simulated replicas."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from servectl.cli import console
from servectl.cli.console import Output, err, fail, out

# --------------------------------------------------------------------------- simulate


def _load_trace(name: str | None, csv: Path | None, seed: int, minutes: float | None) -> Any:
    from servectl.sim import traces

    if csv is not None:
        try:
            trace = traces.from_csv(csv)
        except (OSError, ValueError) as exc:
            raise fail(f"--csv {csv}: {exc}") from exc
    else:
        chosen = name or "diurnal"
        known: list[str] = []
        # Built one suite at a time: the forecasting suite holds four real-time days.
        for build in (traces.standard_suite, traces.production_suite, traces.forecast_suite):
            suite = {t.name: t for t in build(seed)}
            if chosen in suite:
                trace = suite[chosen]
                break
            known += suite
        else:
            raise fail(
                f"--trace {chosen!r}: unknown; choose one of {', '.join(known)} or --csv FILE"
            )
    if minutes is not None:
        if minutes * 60 < 1:
            raise fail(f"--minutes {minutes:g}: simulate at least one second, e.g. --minutes 5")
        trace = traces.truncate(trace, int(minutes * 60))
    return trace


def simulate(
    trace_name: Annotated[
        str | None,
        typer.Option(
            "--trace",
            help="A built-in trace. Standard: steady_noisy, step, spike, ramp, diurnal, "
            "bursty. Production-shaped: flash_crowd, heavy_tailed, slow_ramp, business_day. "
            "Multi-day (forecasting): week_business, week_compressed.",
        ),
    ] = None,
    csv: Annotated[
        Path | None,
        typer.Option(
            "--csv",
            help="Replay a load trace from a CSV: header t,rps (rates) or timestamp (one "
            "request per row, arrival time in seconds).",
        ),
    ] = None,
    policy: Annotated[str, typer.Option(help="The policy under test.")] = "servectl",
    compare: Annotated[
        str,
        typer.Option(
            help="Comma-separated policies to run beside it (servectl, hpa, kpa, oracle)."
        ),
    ] = "hpa,kpa,oracle",
    plot: Annotated[
        Path | None, typer.Option(help="Write a PNG timeline (load, replicas, p99 vs SLO) here.")
    ] = None,
    minutes: Annotated[
        float | None, typer.Option(help="Simulate only the first N minutes of the trace.")
    ] = None,
    seed: Annotated[int, typer.Option(min=0, help="Seed for arrivals and service times.")] = 0,
    standby: Annotated[
        int,
        typer.Option(
            min=0,
            help="Also run servectl with a warm standby pool of N replicas (loaded, parked, "
            "taken first by a scale-up and serving 1 s later; docs/standby.md): a row "
            "'servectl standby=N', its cost counting the pool.",
        ),
    ] = 0,
    output: console.OutputOption = Output.TABLE,
    as_json: console.JsonAlias = False,
) -> None:
    """Replay a load trace through policies on simulated TF Serving replicas.

    Every policy sees the same arrivals, cold start and Prometheus-like metrics. The
    table shows SLO attainment (share of requests under the latency SLO), replica-seconds
    (cost) and scale actions.

    \b
    Examples:
      servectl simulate --trace step --compare hpa,kpa --plot out/step.png
      servectl simulate --trace flash_crowd --compare oracle --standby 8
    """
    from servectl.backends.sim.run import simulate
    from servectl.cli import format as fmt
    from servectl.sim import plot as sim_plot
    from servectl.sim import suite

    output = console.resolve(output, as_json)
    quiet = output.machine
    if plot is not None:
        console.output_file(plot, "--plot")
    svc = suite.service()
    trace = _load_trace(trace_name, csv, seed, minutes)
    names = [policy] + [n.strip() for n in compare.split(",") if n.strip() and n.strip() != policy]
    try:
        factories = suite.policies(svc, names)
    except ValueError as exc:
        raise fail(f"--policy/--compare: {exc}") from exc
    pools = {name: 0 for name in factories}
    if standby:
        pooled = f"servectl standby={standby}"
        factories[pooled] = suite.policies(svc, ["servectl"], standby=standby)["servectl"]
        pools[pooled] = standby
    results = {}
    for name, factory in factories.items():
        if not quiet:
            err.print(
                f"simulating {trace.name} ({len(trace.rps) // 60} min) with {name} ...",
                highlight=False,
                markup=False,
            )
        started = time.perf_counter()
        results[name] = simulate(
            trace,
            factory(trace),
            svc,
            min_replicas=suite.MIN_REPLICAS,
            max_replicas=suite.MAX_REPLICAS,
            seed=seed,
            standby=pools[name],
        )
        if not quiet:
            err.print(f"  done in {time.perf_counter() - started:.1f} s")
    console.emit(
        output,
        title=f"{trace.name}: share of requests within the {svc.slo_ms:g} ms SLO; cost relative "
        f"to {policy}; flips = scale direction reversals",
        header=fmt.SIMULATE_HEADER,
        rows=fmt.simulate_rows(results, subject=policy),
        records=[
            {**result.to_record(), "trace": trace.name, "policy": name}
            for name, result in results.items()
        ],
        wide_header=fmt.SIMULATE_WIDE_HEADER,
        wide_rows=fmt.simulate_wide_rows(results),
    )
    if plot is not None:
        try:
            sim_plot.plot_timeline(
                results, plot, svc.slo_ms, title=f"{trace.name} — {trace.description}"
            )
        except OSError as exc:
            raise fail(f"--plot {plot}: cannot write it ({exc.strerror or exc})", 1) from exc
        if not quiet:
            out.print(f"timeline written to {plot}", highlight=False, markup=False)
