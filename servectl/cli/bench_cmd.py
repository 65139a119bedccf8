"""``servectl bench``: the standard suite, rollouts under load, metrics and micro benchmarks."""

from __future__ import annotations

import enum
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from servectl.cli import console
from servectl.cli.console import Output, err, fail
from servectl.cli.policy_cmd import _policy_config

# --------------------------------------------------------------------------- bench


class Routing(enum.StrEnum):
    """--routing: how a revision's replicas share its requests in the simulation."""

    ROUND_ROBIN = "round-robin"
    LEAST_REQUEST = "least-request"
    BOTH = "both"

    def choices(self) -> list[Any]:
        from servectl.sim import model

        if self is Routing.BOTH:
            return [model.Routing.ROUND_ROBIN, model.Routing.LEAST_REQUEST]
        if self is Routing.LEAST_REQUEST:
            return [model.Routing.LEAST_REQUEST]
        return [model.Routing.ROUND_ROBIN]


class Suite(enum.StrEnum):
    """--suite: which traces the bench runs."""

    STANDARD = "standard"
    PRODUCTION = "production"
    ALL = "all"


ROUTING_WORDS = {"round_robin": "round robin", "least_request": "least request"}

BACKEND_ROUTING = (
    "what each backend really does within a revision: the local runtime's HAProxy "
    "(balance leastconn) and the Kubernetes backend's Gateway API routes (Envoy Gateway "
    "and Istio default to least-request) send each request to the replica with the fewest "
    "in flight; a plain Kubernetes Service (kube-proxy) spreads connections evenly, like "
    "round robin. The simulator models both (--routing); see docs/benchmarks.md."
)


def _routing_note(routing: Routing, output: Output) -> None:
    if not output.machine:
        err.print(f"routing: {routing.value}; {BACKEND_ROUTING}", highlight=False, markup=False)


def bench(
    traces_opt: Annotated[
        str | None, typer.Option("--traces", help="Comma-separated subset of the standard suite.")
    ] = None,
    policies_opt: Annotated[
        str, typer.Option("--policies", help="Comma-separated policies.")
    ] = "servectl,hpa,kpa,oracle",
    suite_opt: Annotated[
        Suite,
        typer.Option(
            "--suite",
            help=(
                "Which traces: standard (six one-hour traces, the published table), "
                "production (flash crowd, heavy-tailed bursts, slow ramp, business day) or "
                "all; docs/simulator.md describes each."
            ),
        ),
    ] = Suite.STANDARD,
    seed: Annotated[int, typer.Option(min=0, help="Seed for the suite and the arrivals.")] = 0,
    routing: Annotated[
        Routing,
        typer.Option(
            help=(
                "How a revision's replicas share its requests: round-robin (a Kubernetes "
                "Service), least-request (HAProxy leastconn: the local runtime; Envoy "
                "Gateway's default LeastRequest) or both (each run twice; least-request "
                "costs ~4x the time)."
            ),
        ),
    ] = Routing.ROUND_ROBIN,
    standby_opt: Annotated[
        str | None,
        typer.Option(
            "--standby",
            help=(
                "Also run servectl with a warm standby pool of each size, comma-separated "
                "(e.g. 8,16): replicas loaded and parked beside the serving ones, taken "
                "first by a scale-up and serving one activation (1 s) later. Rows "
                "'servectl standby=N'; their pool's replica-seconds are shown apart and "
                "the cost counts them (parked at a tenth; docs/standby.md)."
            ),
        ),
    ] = None,
    output: console.OutputOption = Output.TABLE,
    as_json: console.JsonAlias = False,
    micro: Annotated[
        bool,
        typer.Option("--micro", help="Instead: time one simulated hour and one policy decision."),
    ] = False,
    rollouts: Annotated[
        bool,
        typer.Option(
            "--rollouts",
            help=(
                "Instead: a canary rollout in the middle of step, spike and diurnal load, "
                "servectl beside Argo-style and Flagger-style controllers (--traces picks "
                "traces, --policies picks controllers: servectl,argo-style,flagger-style)."
            ),
        ),
    ] = False,
    metrics: Annotated[
        bool,
        typer.Option(
            "--metrics",
            help=(
                "Instead: time one metrics snapshot for 10 and for --services services x 3 "
                "revisions against a real Prometheus (needs the `prometheus` binary)."
            ),
        ),
    ] = False,
    local: Annotated[
        bool,
        typer.Option(
            "--local",
            help=(
                "Instead: the local runtime's figures in one run (router split and overhead, "
                "controller CPU per tick at 1, 10 and --services services, a real replica's "
                "start and memory, the demo without and with a warm standby replica); needs "
                "haproxy, prometheus and TensorFlow. About 12 minutes."
            ),
        ),
    ] = False,
    cli: Annotated[
        bool,
        typer.Option(
            "--cli",
            help=(
                "Instead: time `servectl get` and `servectl describe NAME` (new processes, "
                "--repeat runs each) against a local runtime started in a temporary state "
                "directory, beside `servectl --help`; needs haproxy, prometheus and "
                "TensorFlow. About a minute."
            ),
        ),
    ] = False,
    parts: Annotated[
        str,
        typer.Option(
            "--parts",
            help="With --local: which parts, comma-separated (router,controller,replica,demo,"
            "standby: the demo again with one warm standby replica).",
        ),
    ] = "router,controller,replica,demo,standby",
    ticks: Annotated[
        int, typer.Option(min=3, help="With --local: controller ticks timed per service count.")
    ] = 20,
    services: Annotated[
        int | None,
        typer.Option(
            min=1,
            help=(
                "With --metrics: services in the large case (default 1000). With --local: "
                "the largest service count timed (default 50)."
            ),
        ),
    ] = None,
    repeat: Annotated[
        int,
        typer.Option(
            min=3, help="With --metrics: snapshots timed per case. With --cli: runs per command."
        ),
    ] = 15,
    frontier: Annotated[
        bool,
        typer.Option(
            "--frontier",
            help=(
                "Instead: sweep every policy over the knobs a user would tune (hpa: CPU "
                "target 40-90 %; kpa: target utilization 0.5-0.9 x panic threshold "
                "150/200/400 %; servectl: its default, the SLO alone, and with a CPU target "
                "50-90 %) on every trace, and judge servectl's default against each "
                "baseline's best configuration at its cost. "
                "Writes one plot per routing to --plot-dir. ~25 runs per trace and routing."
            ),
        ),
    ] = False,
    forecast: Annotated[
        bool,
        typer.Option(
            "--forecast",
            help=(
                "Instead: servectl with and without predictive pre-scaling (beside hpa, kpa "
                "and the oracle) on the forecasting suite's multi-day traces (--traces: "
                "week_compressed, the default, nine one-hour days; week_business, four real "
                "days, ~5 min a policy); per-day SLO and seconds of the morning ramp over the "
                "SLO, and a timeline plot of one morning ramp in --plot-dir."
            ),
        ),
    ] = False,
    plot_dir: Annotated[
        Path,
        typer.Option("--plot-dir", help="With --frontier: where the PNGs go (created if missing)."),
    ] = Path("out/frontier"),
    jobs: Annotated[
        int | None,
        typer.Option(min=1, help="With --frontier: parallel simulations (default: CPU count)."),
    ] = None,
    minutes: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="With --frontier: only each trace's first N minutes (a quick look; the "
            "published figures use whole traces).",
        ),
    ] = None,
) -> None:
    """Run every trace of the standard suite through every policy and compare.

    servectl's default policy is compared with Kubernetes HPA v2 and Knative KPA (run
    with their documented defaults and the same per-replica targets) and the
    perfect-foresight oracle. See docs/benchmarks.md for every parameter.

    With --rollouts: each controller runs each trace twice (with and without a rollout
    starting two minutes before the load change) and reports SLO attainment, requests
    lost to unready or drained capacity, extra replicas and the rollout's duration.

    Routing within a revision is a modelled choice (--routing): servectl's local runtime
    (HAProxy) and Gateway API implementations route each request to the replica with the
    fewest in flight; a plain Kubernetes Service spreads them evenly.

    \b
    Examples:
      servectl bench --traces step,spike --policies servectl,kpa
      servectl bench --routing both -o json > bench.jsonl
      servectl bench --traces step,spike --standby 8,16 --routing least-request
      servectl bench --rollouts --routing least-request
      servectl bench --frontier --routing both     # baselines tuned, plotted
      servectl bench --local                       # the local runtime, measured
      servectl bench --local --parts router,controller --services 20
      servectl bench --cli --repeat 21             # get/describe latency
    """
    from servectl.backends.sim import bench as sim_bench
    from servectl.cli import format as fmt
    from servectl.sim import suite

    output = console.resolve(output, as_json)
    if micro:
        _micro_bench(output)
        return
    if metrics:
        _metrics_bench(services or 1000, repeat, output)
        return
    if local:
        _local_bench(parts, services or 50, ticks, output)
        return
    if cli:
        _cli_bench(repeat, output)
        return
    if forecast:
        _forecast_bench(traces_opt or "week_compressed", seed, routing, plot_dir, output)
        return
    if frontier:
        _frontier_bench(
            _suite_traces(traces_opt, seed, suite_opt),
            policies_opt,
            seed,
            routing,
            plot_dir,
            jobs,
            minutes,
            output,
        )
        return
    if rollouts:
        for choice in routing.choices():
            _rollout_bench(traces_opt, policies_opt, seed, output, choice)
        _routing_note(routing, output)
        return
    svc = suite.service()
    suite_traces = _suite_traces(traces_opt, seed, suite_opt)
    names = [p.strip() for p in policies_opt.split(",") if p.strip()]
    try:
        suite.policies(svc, names)
    except ValueError as exc:
        raise fail(f"--policies: {exc}") from exc
    pools = _standby_sizes(standby_opt)

    def progress(trace: str, policy: str, index: int, total: int) -> None:
        if not output.machine:
            err.print(f"[{index}/{total}] {trace} × {policy}", highlight=False, markup=False)

    for choice in routing.choices():
        factories = suite.policies(svc, names, routing=choice)
        standby: dict[str, int] = {}
        for size in pools:
            name = f"servectl standby={size}"
            pooled = suite.policies(svc, ["servectl"], routing=choice, standby=size)
            factories[name] = pooled["servectl"]
            standby[name] = size
        records = sim_bench.run_bench(
            suite_traces,
            factories,
            svc,
            seed=seed,
            progress=progress,
            routing=choice,
            standby=standby,
        )
        header, rows = fmt.bench_rows(records)
        wide_header, wide_rows = fmt.bench_wide_rows(records)
        console.emit(
            output,
            title=f"per trace ({ROUTING_WORDS[choice]} within a revision)",
            header=header,
            rows=rows,
            records=[record.to_record() for record in records],
            wide_header=wide_header,
            wide_rows=wide_rows,
        )
        if not output.machine:
            summary_header, summary_rows = fmt.bench_summary_rows(records)
            console.print_table(
                f"suite totals and ratios (servectl vs others, {ROUTING_WORDS[choice]})",
                summary_header,
                summary_rows,
            )
    _routing_note(routing, output)


def _standby_sizes(standby_opt: str | None) -> list[int]:
    """``--standby 8,16``: the pool sizes, each a whole number of replicas, 1 or more."""
    sizes: list[int] = []
    for part in (standby_opt or "").split(","):
        if not part.strip():
            continue
        try:
            size = int(part)
        except ValueError:
            size = 0
        if size < 1:
            raise fail(
                f"--standby: {part.strip()!r} is not a pool size; "
                "give whole numbers >= 1, e.g. 8,16"
            )
        if size not in sizes:
            sizes.append(size)
    return sizes


def _suite_traces(traces_opt: str | None, seed: int, which: Suite = Suite.STANDARD) -> list[Any]:
    from servectl.sim import traces

    suite_traces = []
    if which in (Suite.STANDARD, Suite.ALL):
        suite_traces += traces.standard_suite(seed)
    if which in (Suite.PRODUCTION, Suite.ALL):
        suite_traces += traces.production_suite(seed)
    if not traces_opt:
        return suite_traces
    wanted = [t.strip() for t in traces_opt.split(",") if t.strip()]
    known = {t.name for t in suite_traces}
    unknown = [t for t in wanted if t not in known]
    if unknown:
        raise fail(
            f"--traces: unknown {', '.join(unknown)}; choose from {', '.join(sorted(known))}"
        )
    return [t for t in suite_traces if t.name in wanted]


def _frontier_bench(
    suite_traces: list[Any],
    policies_opt: str,
    seed: int,
    routing: Routing,
    plot_dir: Path,
    jobs: int | None,
    minutes: int | None,
    output: Output,
) -> None:
    from servectl.backends.sim import frontier as fr
    from servectl.sim import suite, traces

    names = [p.strip() for p in policies_opt.split(",") if p.strip() and p.strip() != "oracle"]
    try:
        specs = fr.grid(names)
    except ValueError as exc:
        raise fail(f"--policies: {exc}") from exc
    if minutes is not None:
        suite_traces = [traces.truncate(t, minutes * 60) for t in suite_traces]
    choices = routing.choices()
    _make_plot_dir(plot_dir)
    began = time.monotonic()

    def progress(point: fr.Point, index: int, total: int) -> None:
        if not output.machine:
            err.print(
                f"[{index}/{total} {time.monotonic() - began:4.0f} s] {point.routing} "
                f"{point.trace} × {point.label}: SLO {100 * point.slo_attainment:.4f}%, "
                f"{point.replica_seconds:,.0f} replica·s",
                highlight=False,
                markup=False,
            )

    points = fr.run_frontier(suite_traces, specs, choices, seed=seed, jobs=jobs, progress=progress)
    records: list[dict[str, Any]] = [p.to_record() for p in points]
    for choice in choices:
        mine = [p for p in points if p.routing == choice.value]
        verdicts = fr.verdicts(mine)
        records += [v.to_record() for v in verdicts]
        summaries = fr.suite_summaries(mine)
        records += [s.to_record() for s in summaries]
        plot: Path | None = plot_dir / f"frontier-{choice.value}.png"
        try:
            fr.plot_frontiers(mine, str(plot), suite.service().slo_ms)
        except ImportError:
            plot = None
            err.print("no plot: matplotlib is not installed (pip install 'servectl[plot]')")
        if output.machine:
            continue
        if output is Output.WIDE:
            header, rows = fr.point_rows(mine)
            console.print_table(
                f"every configuration ({ROUTING_WORDS[choice.value]})", header, rows
            )
        header, rows = fr.verdict_rows(verdicts)
        console.print_table(
            f"servectl's default against each baseline's frontier ({ROUTING_WORDS[choice.value]})",
            header,
            rows,
        )
        for s in summaries:
            err.print(
                f"suite ({ROUTING_WORDS[choice.value]}): servectl {s.servectl_replica_seconds:,.0f}"
                f" replica·s = {s.oracle_ratio:.2f}x the oracle; SLO at or above every baseline"
                f" configuration on {s.traces_at_or_above_best_baseline_slo} of {s.traces}"
                f" traces{' (behind on ' + ', '.join(s.behind) + ')' if s.behind else ''}",
                highlight=False,
                markup=False,
            )
        if plot is not None:
            err.print(f"plot: {plot}", highlight=False, markup=False)
    if output.machine:
        console.emit(output, title="frontier", header=[], rows=[], records=records)
    _routing_note(routing, output)


def _make_plot_dir(plot_dir: Path) -> None:
    try:
        plot_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise fail(f"--plot-dir: cannot create {plot_dir}: {exc.strerror or exc}") from exc


def _forecast_bench(
    traces_opt: str, seed: int, routing: Routing, plot_dir: Path, output: Output
) -> None:
    from servectl.backends.sim import forecast_bench as fb
    from servectl.sim import suite, traces

    known = {t.name: t for t in traces.forecast_suite(seed)}
    wanted = [t.strip() for t in traces_opt.split(",") if t.strip()]
    unknown = [t for t in wanted if t not in known]
    if unknown or not wanted:
        raise fail(
            f"--traces: {'unknown ' + ', '.join(unknown) if unknown else 'empty'}; with "
            f"--forecast choose from {', '.join(known)}"
        )
    _make_plot_dir(plot_dir)
    began = time.monotonic()

    def progress(trace: str, policy: str, index: int, total: int) -> None:
        if not output.machine:
            err.print(
                f"[{index}/{total} {time.monotonic() - began:4.0f} s] {trace} × {policy}",
                highlight=False,
                markup=False,
            )

    records: list[dict[str, Any]] = []
    for choice in routing.choices():
        runs_records, runs = fb.run_forecast_bench(
            [known[n] for n in wanted], seed=seed, routing=choice, progress=progress
        )
        records += [r.to_record() for r in runs_records]
        plots = []
        for name in wanted:
            # The Monday after the weekend: the daily season alone would be wrong twice.
            day = 4 if name == "week_compressed" else 1
            for suffix, shown in fb.PLOTS.items():
                path = plot_dir / f"forecast-{name}{suffix}-{choice.value}.png"
                try:
                    fb.plot_ramp(
                        runs,
                        name,
                        day,
                        str(path),
                        suite.service().slo_ms,
                        shown,
                        day_s=known[name].day_s,
                    )
                    plots.append(path)
                except ImportError:
                    err.print("no plot: matplotlib is not installed (pip install 'servectl[plot]')")
                    break
        if output.machine:
            continue
        header, rows = fb.table(runs_records)
        console.print_table(
            f"forecasting, per trace ({ROUTING_WORDS[choice.value]} within a revision)",
            header,
            rows,
        )
        for path in plots:
            err.print(f"plot: {path}", highlight=False, markup=False)
    if output.machine:
        console.emit(output, title="forecast", header=[], rows=[], records=records)


def _rollout_bench(
    traces_opt: str | None, policies_opt: str, seed: int, output: Output, routing: Any
) -> None:
    from servectl.backends.sim import rollout_bench

    names = (
        [t.strip() for t in traces_opt.split(",") if t.strip()]
        if traces_opt
        else list(rollout_bench.ROLLOUT_TRACES)
    )
    default_policies = "servectl,hpa,kpa,oracle"
    controllers = (
        list(rollout_bench.CONTROLLERS)
        if policies_opt == default_policies
        else [p.strip() for p in policies_opt.split(",") if p.strip()]
    )

    def progress(trace: str, controller: str, index: int, total: int) -> None:
        if not output.machine:
            err.print(
                f"[{index}/{total}] {trace} × {controller} (with and without a rollout)",
                highlight=False,
                markup=False,
            )

    try:
        records = rollout_bench.run_rollout_bench(
            names, controllers, seed=seed, progress=progress, routing=routing
        )
    except ValueError as exc:
        raise fail(f"--traces/--policies: {exc}") from exc
    header, rows = rollout_bench.table(records)
    wide_header, wide_rows = rollout_bench.wide_columns(records)
    console.emit(
        output,
        title=(
            "rollouts under load (servectl vs emulated peers, "
            f"{ROUTING_WORDS[routing.value]} within a revision)"
        ),
        header=header,
        rows=rows,
        records=[record.to_record() for record in records],
        wide_header=wide_header,
        wide_rows=wide_rows,
    )


def _metrics_bench(services: int, repeat: int, output: Output) -> None:
    from servectl.metrics import bench as metrics_bench
    from servectl.metrics.server import PrometheusError, find_prometheus

    if find_prometheus() is None:
        raise fail("--metrics needs Prometheus: apt-get install prometheus (Debian/Ubuntu)")
    try:
        rows = metrics_bench.run_metrics_bench(
            services,
            repeat=repeat,
            progress=lambda m: err.print(m, highlight=False, markup=False),
        )
    except (PrometheusError, RuntimeError) as exc:
        raise fail(str(exc), 1) from exc
    header = [
        "case",
        "size",
        "analysed",
        "queries",
        "median ms",
        "p90 ms",
        "revisions",
        "missing",
        "rps err",
    ]
    body = [
        [
            r.case,
            f"{r.services} x {r.revisions}",
            str(r.analysed_services),
            str(r.queries_per_snapshot),
            f"{r.median_ms:.0f}",
            f"{r.p90_ms:.0f}",
            str(r.revisions_seen),
            str(r.revisions_missing_signals),
            f"{100 * r.max_rps_error:.1f} %",
        ]
        for r in rows
    ]
    console.emit(
        output,
        title=f"metrics snapshot, {repeat} per case (real Prometheus)",
        header=header,
        rows=body,
        records=metrics_bench.rows_as_records(rows),
    )


def _local_bench(parts_opt: str, services: int, ticks: int, output: Output) -> None:
    from servectl.backends.local import bench as local_bench
    from servectl.backends.local.client import ClientError

    known = {p.value: p for p in local_bench.Part}
    wanted = [p.strip() for p in parts_opt.split(",") if p.strip()]
    unknown = [p for p in wanted if p not in known]
    if unknown or not wanted:
        raise fail(
            f"--parts: {'unknown ' + ', '.join(unknown) if unknown else 'empty'}; "
            f"choose from {','.join(known)}"
        )
    counts = sorted({c for c in (1, 10, services) if c <= services})
    began = time.monotonic()

    def progress(line: str) -> None:
        err.print(f"[{time.monotonic() - began:4.0f} s] {line}", highlight=False, markup=False)

    try:
        figures = local_bench.run(
            [known[p] for p in wanted], services=counts, ticks=ticks, progress=progress
        )
    except (local_bench.BenchError, ClientError, OSError) as exc:
        raise fail(f"bench --local: {exc}", 1) from exc
    console.emit(
        output,
        title="the local runtime, measured in one run (docs/benchmarks.md)",
        header=["PART", "FIGURE", "VALUE", "MEASURED ON"],
        rows=[[f.part, f.name, f.shown(), f.detail] for f in figures],
        records=[f.to_record() for f in figures],
    )
    failed = [f.part for f in figures if f.name == local_bench.FAILED]
    if failed:
        raise fail(f"bench --local: {', '.join(failed)} failed (see the table)", 1)


def _cli_bench(runs: int, output: Output) -> None:
    import subprocess

    from servectl.backends.local import cli_bench

    began = time.monotonic()

    def progress(line: str) -> None:
        err.print(f"[{time.monotonic() - began:4.0f} s] {line}", highlight=False, markup=False)

    try:
        result = cli_bench.run(runs, progress=progress)
    except (cli_bench.CliBenchError, subprocess.TimeoutExpired, OSError) as exc:
        raise fail(f"bench --cli: {exc}", 1) from exc
    timings = [result.floor, *result.reads]
    console.emit(
        output,
        title=f"CLI latency against a running local runtime, {runs} runs each (seconds)",
        header=["COMMAND", "MEDIAN", "P90", "X --HELP"],
        rows=[
            [t.command, f"{t.median_s:.3f}", f"{t.p90_s:.3f}", f"{result.ratio(t):.2f}"]
            for t in timings
        ],
        records=[
            {
                "command": t.command,
                "runs": len(t.seconds),
                "medianS": round(t.median_s, 4),
                "p90S": round(t.p90_s, 4),
                "ratioToHelp": round(result.ratio(t), 3),
            }
            for t in timings
        ],
    )


def _micro_bench(output: Output) -> None:
    """Medians of 3: a simulated hour at 1000 req/s (fixed replicas, then servectl's
    policy deciding every 2 s) and one decision of each policy, CEL included."""
    import statistics

    import numpy as np

    from servectl.autoscaling import engine, registry
    from servectl.backends.sim import bench as sim_bench
    from servectl.backends.sim import run as sim_run
    from servectl.sim import suite, traces

    svc = suite.service()
    cfg = suite.autoscaling_config(svc)
    figures: dict[str, float] = dict(sim_bench.micro_benchmarks())
    hour = traces.Trace(name="flat-1000", rps=np.full(3600, 1000.0))
    walls = []
    for seed in range(3):
        started = time.perf_counter()
        sim_run.simulate(
            hour, registry.build("servectl", cfg), svc, seed=seed, max_replicas=suite.MAX_REPLICAS
        )
        walls.append(time.perf_counter() - started)
    figures["simulate_1h_1000rps_servectl_s"] = round(statistics.median(walls), 3)
    _, custom = _policy_config(None, None, Path("policies/latency-slo.yaml"), {})
    subjects = {
        "servectl": registry.build("servectl", cfg),
        "servectl+latency-slo (CEL)": engine.EnginePolicy(cfg, custom),
        "hpa": registry.build("hpa", suite.autoscaling_config(svc, latency=False)),
        "kpa": registry.build("kpa", suite.kpa_config(svc)),
    }
    for label, subject in subjects.items():
        figures[f"decide_us[{label}]"] = round(sim_bench.decision_us(subject), 1)
    assert cfg.forecast is not None
    figures["decide_us[servectl, full forecast history]"] = round(
        sim_bench.decision_us_full_forecast(subjects["servectl"], cfg.forecast), 1
    )
    console.emit(
        output,
        title="one simulated hour (s) and one decision (µs), medians of 3",
        header=["figure", "value"],
        rows=[[key, f"{value:g}"] for key, value in figures.items()],
        records=[figures],
    )
