"""``servectl rollout ...``: rehearse a rollout in the simulator before running it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from servectl.cli import console
from servectl.cli.console import Output, err, fail, out

rollout_app = typer.Typer(
    help=(
        "Rollouts: start, watch, promote, abort, pause, resume, retry or undo a canary, A/B "
        "or blue/green rollout on the local runtime or, with --context, a cluster; rehearse "
        "one in the simulator beside Argo-style and Flagger-style controllers (rollout "
        "simulate)."
    ),
    no_args_is_help=True,
)


@rollout_app.command("simulate")
def simulate_rollout_cmd(
    spec_file: Annotated[
        Path | None,
        typer.Argument(
            help="A ModelService YAML whose spec.rollout is rehearsed (default: the bench's "
            "4-step canary with two analyses).",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    trace_name: Annotated[
        str, typer.Option("--trace", help="A standard trace: step, spike, diurnal, ...")
    ] = "spike",
    at: Annotated[
        float | None,
        typer.Option(
            help="Second the new version arrives (default: 2 min before the load change)."
        ),
    ] = None,
    canary_cost: Annotated[
        float, typer.Option(min=0.1, help="New version's CPU per request, x the stable's.")
    ] = 1.0,
    canary_error_rate: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Share of the new version's requests that fail.")
    ] = 0.0,
    compare: Annotated[
        str, typer.Option(help="Controllers beside servectl: argo-style, flagger-style, or ''.")
    ] = "argo-style,flagger-style",
    plot: Annotated[
        Path | None, typer.Option(help="Write a PNG (load, canary weight, replicas, p99) here.")
    ] = None,
    minutes: Annotated[
        float | None, typer.Option(min=1, help="Simulate only the first N minutes.")
    ] = None,
    seed: Annotated[int, typer.Option(min=0, help="Seed for arrivals and service times.")] = 0,
    output: console.OutputOption = Output.TABLE,
    as_json: console.JsonAlias = False,
) -> None:
    """Replay a trace with a new model version arriving mid-way; score each controller.

    servectl's loop (autoscaler + rollout + planner) drives both revisions; the same
    rollout spec is given to the emulated peers. Reported: SLO attainment, requests
    lost to unready capacity or cut by a shrink, peak replicas, the rollout's duration and
    its final phase, plus servectl's phase timeline (on stdout, to keep).

    \b
    Example:
      servectl rollout simulate --trace step --canary-error-rate 0.05 \\
          --plot out/abort.png
    """
    from servectl import specfile
    from servectl.api import models, validation
    from servectl.backends.sim import rollout_bench
    from servectl.backends.sim.run import simulate_rollout
    from servectl.cli.simulate_cmd import _load_trace
    from servectl.rollout.machine import Op
    from servectl.sim import model, suite
    from servectl.sim import scenario as control
    from servectl.sim.world import RolloutSimResult

    output = console.resolve(output, as_json)
    quiet = output.machine
    if plot is not None:
        console.output_file(plot, "--plot")
    svc = suite.service()
    if spec_file is not None:
        try:
            loaded = specfile.load_file(spec_file)
        except (validation.SpecError, specfile.SpecFileError) as exc:
            raise fail(str(exc)) from exc
        services = [r for r in loaded if isinstance(r, models.ModelService)]
        if not services:
            raise fail(f"{spec_file}: no ModelService in the file")
        service = services[0]
        if service.spec.rollout is None:
            raise fail(f"{spec_file}: spec.rollout is missing; add one (see docs/rollouts.md)")
        spec: models.RolloutSpec = service.spec.rollout
    else:
        spec = rollout_bench.bench_rollout_spec()
    trace = _load_trace(trace_name, None, seed, minutes)
    start = float(at) if at is not None else float(rollout_bench.start_time(trace))
    if not 0 <= start < trace.duration_s:
        raise fail(f"--at {start:g}: must be within the trace (0-{trace.duration_s - 1} s)")
    canary = model.ServiceModel(service_time_ms=svc.service_time_ms * canary_cost)
    scenario = control.RolloutScenario(
        name=trace.name,
        trace=trace,
        revisions={
            1: control.RevisionModel(1, svc),
            2: control.RevisionModel(2, canary, error_rate=canary_error_rate),
        },
        stable_version=1,
        events=(control.Event(start, Op.START, 2),),
        service_name="model",
        header_share=0.2 if spec.strategy is models.RolloutStrategy.AB_TEST else 0.0,
        min_replicas=suite.MIN_REPLICAS,
        max_replicas=suite.MAX_REPLICAS,
    )
    factories = rollout_bench.controller_factories(svc, spec)
    names = ["servectl"] + [c.strip() for c in compare.split(",") if c.strip()]
    unknown = [n for n in names if n not in factories]
    if unknown:
        raise fail(
            f"--compare: unknown {', '.join(unknown)}; choose from argo-style, flagger-style"
        )
    results: dict[str, RolloutSimResult] = {}
    for name in names:
        if not quiet:
            err.print(
                f"simulating {trace.name} with {name}, v2 arriving at {start:.0f} s ...",
                highlight=False,
            )
        began = time.perf_counter()
        try:
            controller = factories[name](scenario)
        except ValueError as exc:
            if name == "servectl":
                raise fail(
                    f"{spec_file or 'the rollout spec'}: servectl cannot run it: {exc}"
                ) from exc
            err.print(f"  {name} cannot run this spec: {exc}", highlight=False, markup=False)
            continue
        results[name] = simulate_rollout(scenario, controller, seed=seed)
        if not quiet:
            err.print(f"  done in {time.perf_counter() - began:.1f} s")
    records = [result.to_record() for result in results.values()]
    header = [
        "controller",
        "SLO %",
        "lost unready",
        "lost cut",
        "peak replicas",
        "replica·s",
        "rollout s",
        "final phase",
    ]
    rows = []
    wide_rows = []
    for name, rec in zip(results, records, strict=True):
        duration = rec.get("rollout_duration_s")
        rows.append(
            [
                name,
                f"{rec['slo_attainment'] * 100:.3f}",
                str(rec["lost_unready"]),
                str(rec["lost_cut"]),
                str(rec.get("peak_total_replicas")),
                f"{rec['replica_seconds']:.0f}",
                "never ended" if duration is None else f"{duration:.0f}",
                str(rec.get("final_phase")),
            ]
        )
        wide_rows.append([f"{rec['requests']:,}", str(rec["failed"]), str(rec["errors"])])
    console.emit(
        output,
        title=f"{trace.name}: v2 ({canary_cost:g}x cost, {canary_error_rate:.0%} errors) from "
        f"{start:.0f} s, {spec.strategy} rollout",
        header=header,
        rows=rows,
        records=records,
        wide_header=["requests", "failed", "errors"],
        wide_rows=wide_rows,
    )
    if not quiet:
        ours = results["servectl"]
        out.print(
            "servectl's rollout: "
            + " -> ".join(f"{phase} at {when:.0f} s" for when, phase in ours.phases),
            highlight=False,
            markup=False,
        )
    if plot is not None:
        from servectl.sim import plot as sim_plot

        try:
            written = sim_plot.plot_rollouts(results, plot, svc.slo_ms, start_s=start)
        except OSError as exc:
            raise fail(f"--plot {plot}: cannot write it ({exc.strerror or exc})", 1) from exc
        if not quiet:
            err.print(f"wrote {written}", highlight=False, markup=False)
