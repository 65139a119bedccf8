"""``servectl policy ...``: one decision from a snapshot, policy test traces, the list."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from servectl.cli import console
from servectl.cli.console import Output, err, fail, out

policy_app = typer.Typer(
    help="Evaluate and test autoscaling policies (servectl, hpa, kpa, CEL).",
    no_args_is_help=True,
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
    from servectl.autoscaling.policy import UnknownPolicyError

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
    except (UnknownPolicyError, ValueError) as exc:
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

    A spec's policy is what every backend runs (``servectl.controller.spec``): its
    ``policy.ref`` is looked up among ScalingPolicies in the spec file itself, then in
    ./policies. ``--policy-file`` and ``--cel`` replace the spec's policy; ``--param``
    values override the policy's params.
    """
    from servectl import specfile
    from servectl.api import models, validation
    from servectl.autoscaling import cel_policy, config, engine
    from servectl.controller import spec as controller_spec

    def load(path: Path, option: str) -> list[Any]:
        try:
            return specfile.load_file(path)
        except (OSError, validation.SpecError, ValueError) as exc:
            raise fail(f"{option} {path}:\n{exc}") from exc

    def compile_policy(name: str, expression: str, defaults: dict[str, float]) -> Any:
        try:
            program = cel_policy.compile_expression(expression)
        except cel_policy.PolicyCompileError as exc:
            raise fail(f"CEL policy {name}: {exc}") from exc
        return engine.CustomPolicy(name, program, defaults)

    cfg = config.AutoscalingConfig()
    custom: engine.CustomPolicy | None = None
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
        cfg = services[0].spec.autoscaling.to_config()
        try:
            custom = controller_spec.custom_policy(services[0], library)
        except controller_spec.PolicySpecError as exc:
            raise fail(f"--spec {spec}: {exc}") from exc
    if policy_file is not None:
        policies = [
            d for d in load(policy_file, "--policy-file") if isinstance(d, models.ScalingPolicy)
        ]
        if not policies:
            raise fail(f"--policy-file {policy_file}: no ScalingPolicy document in it")
        chosen = policies[0]
        custom = compile_policy(
            chosen.metadata.name, chosen.spec.cel, dict(chosen.spec.params or {})
        )
    if cel is not None:
        custom = compile_policy("inline", cel, {})
    if custom is not None and params:
        custom = engine.CustomPolicy(custom.name, custom.program, {**custom.params, **params})
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
