"""The ``servectl`` command line: thin commands over the library, formatting in ``format``."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from servectl import __version__
from servectl.cli import console
from servectl.cli.console import Output, err, fail, out
from servectl.cli.exporter_cmd import exporter_app
from servectl.cli.loadtest_cmd import loadtest
from servectl.cli.metrics_cmd import metrics_app
from servectl.cli.model_cmd import model_app
from servectl.cli.rollout_cmd import rollout_app

app = typer.Typer(
    name="servectl",
    help=(
        "Serve TensorFlow models on Kubernetes with one authority over replicas and traffic.\n\n"
        "Start with `servectl simulate` (a demo of the autoscaler against Kubernetes HPA and "
        "Knative KPA), `servectl policy eval` (one decision from a snapshot) or "
        "`servectl validate` (check a ModelService file)."
    ),
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)
policy_app = typer.Typer(
    help="Evaluate and test autoscaling policies (servectl, hpa, kpa, CEL).",
    no_args_is_help=True,
)
crds_app = typer.Typer(help="CustomResourceDefinitions for ModelService and ScalingPolicy.")
app.add_typer(policy_app, name="policy")
app.add_typer(crds_app, name="crds")
app.add_typer(rollout_app, name="rollout")
app.add_typer(exporter_app, name="exporter")
app.add_typer(metrics_app, name="metrics")
app.add_typer(model_app, name="model")
app.command("loadtest")(loadtest)


@app.callback(invoke_without_command=True)
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    if version:
        out.print(f"servectl {__version__}")
        raise typer.Exit()


# --------------------------------------------------------------------------- simulate


def _load_trace(name: str | None, csv: Path | None, seed: int, minutes: float | None) -> Any:
    from servectl.sim import traces

    if csv is not None:
        try:
            trace = traces.from_csv(csv)
        except (OSError, ValueError) as exc:
            raise fail(f"--csv {csv}: {exc}") from exc
    else:
        suite = {t.name: t for t in traces.standard_suite(seed)}
        chosen = name or "diurnal"
        if chosen not in suite:
            raise fail(
                f"--trace {chosen!r}: unknown; choose one of {', '.join(suite)} or --csv FILE"
            )
        trace = suite[chosen]
    if minutes is not None:
        if minutes * 60 < 1:
            raise fail(f"--minutes {minutes:g}: simulate at least one second, e.g. --minutes 5")
        trace = traces.truncate(trace, int(minutes * 60))
    return trace


@app.command()
def simulate(
    trace_name: Annotated[
        str | None,
        typer.Option(
            "--trace", help="A standard trace: steady_noisy, step, spike, ramp, diurnal, bursty."
        ),
    ] = None,
    csv: Annotated[
        Path | None,
        typer.Option("--csv", help="Replay a load trace from a CSV with columns t,rps."),
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
    output: console.OutputOption = Output.TABLE,
    as_json: console.JsonAlias = False,
) -> None:
    """Replay a load trace through policies on simulated TF Serving replicas.

    Every policy sees the same arrivals, cold start and Prometheus-like metrics. The
    table shows SLO attainment (share of requests under the latency SLO), replica-seconds
    (cost) and scale actions.

    \b
    Example:
      servectl simulate --trace step --compare hpa,kpa --plot out/step.png
    """
    from servectl.cli import format as fmt
    from servectl.sim import plot as sim_plot
    from servectl.sim import runner, suite

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
    results = {}
    for name, factory in factories.items():
        if not quiet:
            err.print(
                f"simulating {trace.name} ({len(trace.rps) // 60} min) with {name} ...",
                highlight=False,
                markup=False,
            )
        started = time.perf_counter()
        results[name] = runner.simulate(
            trace,
            factory(trace),
            svc,
            min_replicas=suite.MIN_REPLICAS,
            max_replicas=suite.MAX_REPLICAS,
            seed=seed,
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
            {"trace": trace.name, "policy": name, **result.to_record()}
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


_print_table = console.print_table


# --------------------------------------------------------------------------- bench


@app.command()
def bench(
    traces_opt: Annotated[
        str | None, typer.Option("--traces", help="Comma-separated subset of the standard suite.")
    ] = None,
    policies_opt: Annotated[
        str, typer.Option("--policies", help="Comma-separated policies.")
    ] = "servectl,hpa,kpa,oracle",
    seed: Annotated[int, typer.Option(min=0, help="Seed for the suite and the arrivals.")] = 0,
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
    services: Annotated[
        int, typer.Option(min=1, help="With --metrics: services in the large case.")
    ] = 1000,
    repeat: Annotated[
        int, typer.Option(min=3, help="With --metrics: snapshots timed per case.")
    ] = 15,
) -> None:
    """Run every trace of the standard suite through every policy and compare.

    servectl's default policy is compared with Kubernetes HPA v2 and Knative KPA (run
    with their documented defaults and the same per-replica targets) and the
    perfect-foresight oracle. See docs/benchmarks.md for every parameter.

    With --rollouts: each controller runs each trace twice (with and without a rollout
    starting two minutes before the load change) and reports SLO attainment, requests
    lost to unready or drained capacity, extra replicas and the rollout's duration.
    """
    from servectl.cli import format as fmt
    from servectl.sim import bench as sim_bench
    from servectl.sim import suite, traces

    output = console.resolve(output, as_json)
    if micro:
        _micro_bench(output)
        return
    if metrics:
        _metrics_bench(services, repeat, output)
        return
    if rollouts:
        _rollout_bench(traces_opt, policies_opt, seed, output)
        return
    svc = suite.service()
    suite_traces = traces.standard_suite(seed)
    if traces_opt:
        wanted = [t.strip() for t in traces_opt.split(",") if t.strip()]
        known = {t.name for t in suite_traces}
        unknown = [t for t in wanted if t not in known]
        if unknown:
            raise fail(
                f"--traces: unknown {', '.join(unknown)}; choose from {', '.join(sorted(known))}"
            )
        suite_traces = [t for t in suite_traces if t.name in wanted]
    try:
        factories = suite.policies(svc, [p.strip() for p in policies_opt.split(",") if p.strip()])
    except ValueError as exc:
        raise fail(f"--policies: {exc}") from exc

    def progress(trace: str, policy: str, index: int, total: int) -> None:
        if not output.machine:
            err.print(f"[{index}/{total}] {trace} × {policy}", highlight=False, markup=False)

    records = sim_bench.run_bench(suite_traces, factories, svc, seed=seed, progress=progress)
    header, rows = fmt.bench_rows(records)
    wide_header, wide_rows = fmt.bench_wide_rows(records)
    console.emit(
        output,
        title="per trace",
        header=header,
        rows=rows,
        records=[record.to_record() for record in records],
        wide_header=wide_header,
        wide_rows=wide_rows,
    )
    if output.machine:
        return
    summary_header, summary_rows = fmt.bench_summary_rows(records)
    _print_table("suite totals and ratios (servectl vs others)", summary_header, summary_rows)


def _rollout_bench(traces_opt: str | None, policies_opt: str, seed: int, output: Output) -> None:
    from servectl.sim import rollout_bench

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
        records = rollout_bench.run_rollout_bench(names, controllers, seed=seed, progress=progress)
    except ValueError as exc:
        raise fail(f"--traces/--policies: {exc}") from exc
    header, rows = rollout_bench.table(records)
    wide_header, wide_rows = rollout_bench.wide_columns(records)
    console.emit(
        output,
        title="rollouts under load (servectl vs emulated peers)",
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


def _micro_bench(output: Output) -> None:
    """Medians of 3: a simulated hour at 1000 req/s (fixed replicas, then servectl's
    policy deciding every 2 s) and one decision of each policy, CEL included."""
    import statistics

    import numpy as np

    from servectl.autoscaling import engine, registry
    from servectl.sim import bench as sim_bench
    from servectl.sim import runner, suite, traces

    svc = suite.service()
    cfg = suite.autoscaling_config(svc)
    figures: dict[str, float] = dict(sim_bench.micro_benchmarks())
    hour = traces.Trace(name="flat-1000", rps=np.full(3600, 1000.0))
    walls = []
    for seed in range(3):
        started = time.perf_counter()
        runner.simulate(
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
    console.emit(
        output,
        title="one simulated hour (s) and one decision (µs), medians of 3",
        header=["figure", "value"],
        rows=[[key, f"{value:g}"] for key, value in figures.items()],
        records=[figures],
    )


# --------------------------------------------------------------------------- policy


def _read_text(path: Path, what: str) -> str:
    """A text file (or stdin for ``-``), or a message naming it: never a traceback."""
    try:
        return sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
    except OSError as exc:
        raise fail(f"{what}{path}: cannot read it ({exc.strerror or exc})") from exc
    except UnicodeDecodeError as exc:
        raise fail(f"{what}{path}: not UTF-8 text (byte {exc.start}); expected JSON") from exc


def _parse_json(text: str) -> Any:
    """``json.loads``, with the ways it fails besides a syntax error turned into one:
    an int of more than 4300 digits (ValueError) and nesting too deep for the parser."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError as exc:  # int too long to convert
        raise json.JSONDecodeError(str(exc).split(";")[0], text, 0) from exc
    except RecursionError as exc:
        raise json.JSONDecodeError("nested too deeply", text, 0) from exc


def _read_json_documents(path: Path) -> list[dict[str, Any]]:
    text = _read_text(path, "")
    stripped = text.strip()
    if not stripped:
        raise fail(f"{path}: empty; expected a snapshot JSON object (see docs/snapshot.md)")
    try:
        doc = _parse_json(stripped)
    except json.JSONDecodeError as whole:
        lines = [(n, line) for n, line in enumerate(stripped.splitlines(), 1) if line.strip()]
        if len(lines) == 1:
            raise fail(f"{path}: not JSON ({whole.msg}); expected a snapshot object") from whole
        docs = []
        for lineno, line in lines:
            try:
                docs.append(_parse_json(line))
            except json.JSONDecodeError as exc:
                raise fail(
                    f"{path}:{lineno}: not JSON ({exc.msg}); expected one snapshot per line"
                ) from exc
        return docs
    if isinstance(doc, list):
        if not doc:
            raise fail(f"{path}: an empty trace; give at least one snapshot (docs/snapshot.md)")
        return doc
    return [doc]


def _read_state(path: Path) -> dict[str, Any]:
    text = _read_text(path, "--state ")
    try:
        state = _parse_json(text)
    except json.JSONDecodeError as exc:
        raise fail(f"--state {path}: not JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(state, dict):
        raise fail(
            f"--state {path}: expected a JSON object (the `state` printed by "
            "`servectl policy eval --show-state`)"
        )
    return state


def _parse_params(params: list[str]) -> dict[str, float]:
    parsed: dict[str, float] = {}
    for item in params:
        key, sep, value = item.partition("=")
        try:
            parsed[key.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not key.strip():
            raise fail(f"--param {item!r}: expected NAME=NUMBER, e.g. --param targetMs=150")
    return parsed


@policy_app.command("eval")
def policy_eval(
    snapshot_file: Annotated[
        Path,
        typer.Argument(
            help="Snapshot JSON (one object), or a trace: a JSON array or JSON lines. '-' = stdin."
        ),
    ],
    policy: Annotated[str, typer.Option(help="servectl, hpa or kpa.")] = "servectl",
    spec: Annotated[
        Path | None,
        typer.Option(help="A ModelService YAML whose spec.autoscaling configures the policy."),
    ] = None,
    cel: Annotated[str | None, typer.Option(help="An inline CEL policy expression.")] = None,
    policy_file: Annotated[
        Path | None,
        typer.Option(
            "--policy-file", help="A ScalingPolicy YAML (e.g. policies/latency-slo.yaml)."
        ),
    ] = None,
    param: Annotated[
        list[str] | None, typer.Option(help="Override a policy param: NAME=NUMBER (repeatable).")
    ] = None,
    state_file: Annotated[
        Path | None, typer.Option("--state", help="JSON policy state from an earlier decision.")
    ] = None,
    show_state: Annotated[bool, typer.Option(help="Include the new policy state.")] = False,
) -> None:
    """Print the decision (replicas, reason, winning signal) as JSON.

    With one snapshot, one JSON object; with a trace, one JSON line per snapshot, state
    carried between them and each snapshot's replicas.current set to the previous
    decision. Exits 1 (after printing) when the CEL policy failed on a snapshot (reason
    POLICY_ERROR), 2 on bad input.

    \b
    Example:
      servectl policy eval docs/examples/snapshot.json \\
          --policy-file policies/latency-slo.yaml
    """
    from servectl.autoscaling import registry, snapshot
    from servectl.autoscaling.config import SignalTarget, SignalType
    from servectl.autoscaling.decision import Reason

    docs = _read_json_documents(snapshot_file)
    snaps = []
    for i, doc in enumerate(docs):
        try:
            snaps.append(snapshot.from_dict(doc))
        except snapshot.SnapshotError as exc:
            where = f"{snapshot_file}" + (f" (snapshot {i})" if len(docs) > 1 else "")
            raise fail(f"{where}: {exc}") from exc
    cfg, custom = _policy_config(spec, cel, policy_file, _parse_params(param or []))
    if spec is None:
        # Without a spec, the snapshot's bounds are the policy's bounds.
        first = snaps[0].replicas
        cfg = dataclasses.replace(cfg, min_replicas=first.min, max_replicas=first.max)
    if policy == "kpa" and not any(t.type is SignalType.CONCURRENCY for t in cfg.signals):
        # KPA scales on concurrency only; without a target, Knative's own default applies
        # (container-concurrency-target-default: 100 in-flight requests per replica).
        cfg = dataclasses.replace(
            cfg, signals=(*cfg.signals, SignalTarget(SignalType.CONCURRENCY, 100.0))
        )
        err.print("kpa: no concurrency target given; using Knative's default of 100 per replica")
    try:
        chosen = registry.build(policy, cfg, custom)
    except (registry.UnknownPolicyError, ValueError) as exc:
        raise fail(f"--policy: {exc}") from exc
    state = _read_state(state_file) if state_file else None
    try:
        steps = registry.replay(chosen, snaps, state)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
        if state_file is None:
            raise  # a bug: policies decide on every snapshot from_dict accepts
        raise fail(
            f"--state {state_file}: not a state {chosen.name} returned "
            f"({type(exc).__name__}: {exc}); give the `state` printed by --show-state"
        ) from exc
    for step in steps:
        record: dict[str, Any] = {
            "time": step.time,
            "policy": chosen.name,
            **step.decision.to_dict(),
        }
        if show_state:
            record["state"] = step.state
        print(json.dumps(record, indent=None if len(steps) > 1 else 2))
    failed = [step for step in steps if step.decision.reason is Reason.POLICY_ERROR]
    if failed:
        where = "" if len(steps) == 1 else f" on {len(failed)} of {len(steps)} snapshots"
        raise fail(
            f"the CEL policy failed{where} (reason POLICY_ERROR): the decision fell back to "
            "the recommendation; its detail says why",
            1,
        )


def _policy_config(
    spec: Path | None, cel: str | None, policy_file: Path | None, params: dict[str, float]
) -> tuple[Any, Any]:
    """The engine config and the custom CEL policy from --spec / --policy-file / --cel.

    A spec's ``policy.ref`` is looked up among ScalingPolicies in the spec file itself,
    then in ./policies; ``--policy-file`` and ``--cel`` replace the spec's policy.
    """
    from servectl import specfile
    from servectl.api import models, validation
    from servectl.autoscaling import cel_policy, config, engine

    def load(path: Path, option: str) -> list[Any]:
        try:
            return specfile.load_file(path)
        except (OSError, validation.SpecError, ValueError) as exc:
            raise fail(f"{option} {path}:\n{exc}") from exc

    cfg = config.AutoscalingConfig()
    name, expression = "inline", None
    merged: dict[str, float] = {}
    if spec is not None:
        docs = load(spec, "--spec")
        services = [d for d in docs if isinstance(d, models.ModelService)]
        if not services:
            raise fail(f"--spec {spec}: no ModelService document in it")
        library = {
            p.metadata.name: p
            for path in sorted(Path("policies").glob("*.yaml"))
            for p in load(path, "policy library")
            if isinstance(p, models.ScalingPolicy)
        }
        library.update({d.metadata.name: d for d in docs if isinstance(d, models.ScalingPolicy)})
        autoscaling = services[0].spec.autoscaling
        cfg = autoscaling.to_config()
        try:
            resolved = autoscaling.resolve_policy(library)
        except models.UnknownPolicyError as exc:
            raise fail(f"--spec {spec}: spec.autoscaling.policy.ref: {exc}") from exc
        if resolved is not None:
            name, expression, merged = resolved.name, resolved.cel, dict(resolved.params)
    if policy_file is not None:
        policies = [
            d for d in load(policy_file, "--policy-file") if isinstance(d, models.ScalingPolicy)
        ]
        if not policies:
            raise fail(f"--policy-file {policy_file}: no ScalingPolicy document in it")
        name, expression = policies[0].metadata.name, policies[0].spec.cel
        merged = dict(policies[0].spec.params or {})
    if cel is not None:
        name, expression, merged = "inline", cel, {}
    merged.update(params)
    custom = None
    if expression is not None:
        try:
            program = cel_policy.compile_expression(expression)
        except cel_policy.PolicyCompileError as exc:
            raise fail(f"CEL policy {name}: {exc}") from exc
        custom = engine.CustomPolicy(name, program, merged)
    return cfg, custom


@policy_app.command("test")
def policy_test(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(help="ScalingPolicy YAML files (default: every policies/*.yaml)."),
    ] = None,
) -> None:
    """Run each policy's test trace (policies/tests/NAME.yaml) and report every step.

    Exits 1 if any step fails. See docs/policies.md for the test file format.
    """
    from servectl import specfile
    from servectl.autoscaling import policytest

    files = paths or sorted(Path("policies").glob("*.yaml"))
    if not files:
        raise fail("no policy files given and none found in ./policies")
    failed = 0
    for path in files:
        test_path = path.parent / "tests" / path.name
        if not test_path.exists():
            err.print(f"[yellow]{escape(str(path))}: no test trace at {escape(str(test_path))}[/]")
            failed += 1
            continue
        try:
            policy_docs = specfile.read_documents(path)
            test_docs = specfile.read_documents(test_path)
        except (OSError, ValueError) as exc:
            raise fail(str(exc)) from exc
        if not policy_docs or not test_docs:
            raise fail(f"{path if not policy_docs else test_path}: no document in it")
        policy_doc, test_doc = policy_docs[0], test_docs[0]
        report = policytest.run_policy_tests(policy_doc, test_doc)
        mark = "[green]PASS[/]" if report.passed else "[red]FAIL[/]"
        out.print(f"{mark} {escape(str(path))} ({escape(report.summary)})", highlight=False)
        for line in report.lines():
            out.print(f"    {line}", highlight=False, markup=False)
        failed += 0 if report.passed else 1
    if failed:
        raise typer.Exit(1)


@policy_app.command("list")
def policy_list(output: console.OutputOption = Output.TABLE) -> None:
    """List the built-in policies and the ready-made CEL policies in ./policies."""
    from servectl.autoscaling import registry

    records: list[dict[str, Any]] = [
        {"name": name, "kind": "built-in", "file": None} for name in registry.names()
    ]
    records += [
        {"name": path.stem, "kind": "CEL", "file": str(path)}
        for path in sorted(Path("policies").glob("*.yaml"))
    ]
    console.emit(
        output,
        title="policies (--policy NAME, or --policy-file FILE for CEL)",
        header=["name", "kind", "file"],
        rows=[[r["name"], r["kind"], r["file"] or ""] for r in records],
        records=records,
    )


# --------------------------------------------------------------------------- specs


@app.command()
def validate(
    files: Annotated[list[Path], typer.Argument(help="ModelService / ScalingPolicy YAML files.")],
) -> None:
    """Check ModelService and ScalingPolicy files; every problem names its field and fix."""
    from servectl import specfile
    from servectl.api import validation

    bad = 0
    for path in files:
        try:
            docs = specfile.load_file(path)
        except (OSError, validation.SpecError, ValueError) as exc:
            bad += 1
            err.print(f"[red]{escape(str(path))}: invalid[/]\n{escape(str(exc))}", highlight=False)
            continue
        kinds = ", ".join(f"{type(d).__name__} {d.metadata.name}" for d in docs)
        out.print(f"{path}: ok ({kinds})", highlight=False, markup=False)
    if bad:
        raise typer.Exit(1)


@crds_app.command("generate")
def crds_generate(
    out_dir: Annotated[Path, typer.Option("--out", help="Directory to write into.")] = Path(
        "deploy/crds"
    ),
) -> None:
    """Regenerate the CRD YAML from the resource model (commit the result)."""
    from servectl import specfile

    try:
        written = specfile.write_crds(out_dir)
    except OSError as exc:
        raise fail(f"--out {out_dir}: cannot write there ({exc.strerror or exc})", 1) from exc
    for path in written:
        out.print(f"wrote {path}", highlight=False, markup=False)


# --------------------------------------------------------------------------- model server


@app.command(
    "model-server",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def model_server(ctx: typer.Context) -> None:
    """A TF-Serving-compatible model server (TF Serving's flags; see docs/modelserver.md)."""
    from servectl.modelserver.server import main as server_main  # TensorFlow loads on use

    raise typer.Exit(server_main(list(ctx.args)))


# Exit status for an unexpected error (a bug), as sysexits' EX_SOFTWARE.
EXIT_INTERNAL = 70


def main() -> None:
    """The console script: bad input gets a message from its command; what still escapes
    is an environment error (one line, exit 1) or a bug (one line and how to see the
    traceback, exit 70), never a traceback on a user's terminal."""
    import os

    try:
        app()
    except OSError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        sys.exit(1)
    except Exception as exc:
        if os.environ.get("SERVECTL_DEBUG"):
            raise
        err.print(
            f"[bold red]internal error (a bug in servectl):[/] {escape(type(exc).__name__)}: "
            f"{escape(str(exc))}\nrun it again with SERVECTL_DEBUG=1 for the traceback, and "
            "please report it",
            highlight=False,
        )
        sys.exit(EXIT_INTERNAL)


if __name__ == "__main__":
    main()
