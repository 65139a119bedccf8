"""The verbs on ModelServices: ``deploy``, ``get``, ``describe``, ``explain``, ``scale``,
``delete``, ``events``, ``logs``, ``top`` and ``rollout start|status|promote|...``.

They work on the local runtime's store (``--state-dir``); the controller applies a change
at its next tick (1 s). Every write checks first and changes nothing on error.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from servectl.cli import console
from servectl.cli.console import Output, err, fail, out
from servectl.cli.local_cmd import StateDirOption, _client, state_dir

NamespaceOption = Annotated[str, typer.Option("-n", "--namespace", help="The service's namespace.")]
NameArg = Annotated[str, typer.Argument(help="The ModelService's name.")]


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"


def _when(t: float) -> str:
    return dt.datetime.fromtimestamp(t).strftime("%H:%M:%S")


def _num(value: Any, fmt: str = "{:.1f}") -> str:
    return "-" if value is None else fmt.format(value)


# --------------------------------------------------------------------------- deploy


def deploy(
    name: Annotated[
        str | None, typer.Argument(help="Service name (flag form; omit with -f).")
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "-f", "--file", help="A YAML file of ModelService (and ScalingPolicy) documents."
        ),
    ] = None,
    model_path: Annotated[
        Path | None,
        typer.Option(
            "--model-path", help="Directory of numbered versions (<dir>/<N>/saved_model.pb)."
        ),
    ] = None,
    model_name: Annotated[
        str | None,
        typer.Option("--model-name", help="TF Serving model name (default: the directory's name)."),
    ] = None,
    version: Annotated[
        int | None, typer.Option("--version", min=0, help="Version to serve (default: the latest).")
    ] = None,
    min_replicas: Annotated[int, typer.Option("--min", min=1, help="Fewest replicas.")] = 1,
    max_replicas: Annotated[int, typer.Option("--max", min=1, help="Most replicas.")] = 4,
    cpu: Annotated[str, typer.Option("--cpu", help='CPU per replica ("1", "500m").')] = "1",
    memory: Annotated[str, typer.Option("--memory", help="Memory limit per replica.")] = "2Gi",
    target_cpu: Annotated[
        float, typer.Option("--target-cpu", min=1, help="Target CPU utilization, percent.")
    ] = 70,
    latency_p99: Annotated[
        float | None,
        typer.Option("--latency-p99", min=1, help="Also scale to hold p99 under this many ms."),
    ] = None,
    namespace: NamespaceOption = "default",
    state: StateDirOption = None,
) -> None:
    """Deploy a model, or update one (a new version starts its rollout).

    \b
    Flag form (the common case):
      servectl deploy cost --model-path ~/models/cost_model --min 1 --max 4 \\
          --latency-p99 200
    File form (everything: rollout strategy, policies, analysis):
      servectl deploy -f service.yaml

    The model path must hold the version (the latest when --version is omitted). The
    service answers TF Serving's REST and gRPC APIs on ports `servectl get` shows.
    """
    from servectl import specfile
    from servectl.api import models, validation
    from servectl.backends.local.client import ClientError

    policies: list[models.ScalingPolicy] = []
    services: list[models.ModelService] = []
    base_dir = Path.cwd()
    if file is not None:
        if name is not None or model_path is not None:
            raise fail("give either -f FILE or NAME --model-path DIR, not both")
        try:
            docs = specfile.load_file(file)
        except (OSError, validation.SpecError, ValueError) as exc:
            raise fail(f"{file}: {exc}") from None
        services = [d for d in docs if isinstance(d, models.ModelService)]
        policies = [d for d in docs if isinstance(d, models.ScalingPolicy)]
        base_dir = file.resolve().parent
        if not services:
            raise fail(f"{file}: no ModelService in it (kind: ModelService)")
    else:
        if name is None or model_path is None:
            raise fail("give NAME and --model-path DIR (or -f FILE); see --help")
        signals: list[dict[str, Any]] = [{"type": "cpu", "targetUtilization": target_cpu}]
        if latency_p99 is not None:
            signals.append({"type": "latency", "percentile": 99, "targetMs": latency_p99})
        model: dict[str, Any] = {
            "name": model_name or model_path.resolve().name,
            "basePath": str(model_path.expanduser().resolve()),
        }
        if version is not None:
            model["version"] = version
        doc = {
            "apiVersion": "servectl.io/v1alpha1",
            "kind": "ModelService",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "model": model,
                "runtime": {"resources": {"cpu": cpu, "memory": memory}},
                "autoscaling": {
                    "minReplicas": min_replicas,
                    "maxReplicas": max_replicas,
                    "signals": signals,
                },
            },
        }
        try:
            services = [validation.load_model_service(doc)]
        except validation.SpecError as exc:
            raise fail(str(exc)) from None
    client = _client(state_dir(state))
    try:
        for service in services:
            try:
                done = client.deploy(service, policies, base_dir=base_dir)
            except ClientError as exc:
                raise fail(f"{service.metadata.name}: {exc}") from None
            what = "created" if done.created else "configured"
            if done.rollout_to is not None:
                what += f"; rollout to version {done.rollout_to} queued"
            out.print(f"modelservice/{done.name} {what}", highlight=False)
        if not client.controller().alive:
            err.print("note: the controller is not running; start it with `servectl up`")
    finally:
        client.close()


# --------------------------------------------------------------------------- get


def _summary(client: Any, row: Any) -> dict[str, Any]:
    status = client.status(row.namespace, row.name) or {}
    record = client.record(row.namespace, row.name)
    revisions = status.get("revisions", [])
    rollout = status.get("rollout") or {}
    auto = status.get("autoscaling") or {}
    ready = sum(r.get("readyReplicas", 0) for r in revisions)
    desired = sum(r.get("desiredReplicas", 0) for r in revisions)
    spec = row.spec.get("spec", {})
    return {
        "namespace": row.namespace,
        "name": row.name,
        "model": spec.get("model", {}).get("name"),
        "ready": ready,
        "desired": desired,
        "weights": {r["name"]: r.get("weight", 0) for r in revisions},
        "rollout": rollout.get("phase", "Idle"),
        "step": rollout.get("step"),
        "stableVersion": rollout.get("stableVersion"),
        "canaryVersion": rollout.get("canaryVersion"),
        "decidedBy": auto.get("decidedBy"),
        "min": spec.get("autoscaling", {}).get("minReplicas"),
        "max": spec.get("autoscaling", {}).get("maxReplicas"),
        "rest": f"http://127.0.0.1:{record.rest_port}" if record else None,
        "grpc": f"127.0.0.1:{record.grpc_port}" if record else None,
        "age": time.time() - row.updated,
        "generation": row.generation,
    }


def get(
    name: Annotated[str | None, typer.Argument(help="One service (default: all).")] = None,
    namespace: Annotated[
        str | None, typer.Option("-n", "--namespace", help="Only this namespace.")
    ] = None,
    output: console.OutputOption = Output.TABLE,
    state: StateDirOption = None,
) -> None:
    """List services: ready replicas, weights, rollout phase, endpoints.

    -o wide adds the bounds, the deciding signal and the gRPC port; -o json|yaml print
    the whole resource (spec and status)."""
    from servectl.backends.local.client import ClientError

    client = _client(state_dir(state))
    try:
        rows = client.services(namespace)
        if name is not None:
            rows = [r for r in rows if r.name == name]
            if not rows:
                raise fail(str(ClientError(client._not_found(namespace or "default", name))))
        if output.machine:
            console.print_records(
                [{**r.spec, "status": client.status(r.namespace, r.name) or {}} for r in rows],
                output,
            )
            return
        summaries = [_summary(client, r) for r in rows]
    finally:
        client.close()
    if not summaries:
        out.print("no services; deploy one with `servectl deploy NAME --model-path DIR`")
        return
    console.emit(
        output,
        title="ModelServices",
        header=["NAME", "READY", "WEIGHTS", "ROLLOUT", "REST", "AGE"],
        rows=[
            [
                s["name"],
                f"{s['ready']}/{s['desired']}",
                " ".join(f"{k}:{v}" for k, v in s["weights"].items()) or "-",
                s["rollout"] + (f" (step {s['step']})" if s["rollout"] not in ("Idle",) else ""),
                s["rest"] or "-",
                _age(s["age"]),
            ]
            for s in summaries
        ],
        records=summaries,
        wide_header=["NAMESPACE", "MIN", "MAX", "DECIDED BY", "GRPC"],
        wide_rows=[
            [s["namespace"], str(s["min"]), str(s["max"]), s["decidedBy"] or "-", s["grpc"] or "-"]
            for s in summaries
        ],
    )


# --------------------------------------------------------------------------- describe


def describe(
    name: NameArg,
    namespace: NamespaceOption = "default",
    output: console.OutputOption = Output.TABLE,
    state: StateDirOption = None,
) -> None:
    """Everything about one service: endpoints, revisions, rollout, autoscaling,
    conditions and the latest events. -o yaml|json prints spec and status."""
    from servectl.backends.local.client import ClientError

    client = _client(state_dir(state))
    try:
        try:
            service = client.get(namespace, name)
        except ClientError as exc:
            raise fail(str(exc)) from None
        status = client.status(namespace, name) or {}
        record = client.record(namespace, name)
        events = client.events(namespace, name, limit=10)
        doc = service.model_dump(mode="json", by_alias=True, exclude_none=True)
    finally:
        client.close()
    if output.machine:
        console.print_records([{**doc, "status": status}], output)
        return
    spec = doc["spec"]
    p = out.print
    p(f"[bold]{escape(name)}[/]  namespace {escape(namespace)}", highlight=False)
    p(
        f"model:     {spec['model']['name']} from {spec['model']['basePath']} "
        f"(version {spec['model'].get('version', 'latest')})",
        highlight=False,
        markup=False,
    )
    if record is not None:
        p(
            f"endpoints: REST http://127.0.0.1:{record.rest_port}/v1/models/{spec['model']['name']}"
            f"   gRPC 127.0.0.1:{record.grpc_port}",
            highlight=False,
            markup=False,
        )
    auto = spec.get("autoscaling", {})
    p(
        f"replicas:  min {auto.get('minReplicas')}, max {auto.get('maxReplicas')}, "
        f"mode {auto.get('mode', 'active')}",
        highlight=False,
    )
    revisions = status.get("revisions", [])
    if revisions:
        console.print_table(
            "Revisions",
            ["NAME", "VERSION", "WEIGHT", "DESIRED", "READY", "MODEL"],
            [
                [
                    r["name"],
                    str(r["version"]),
                    f"{r.get('weight', 0)}%",
                    str(r.get("desiredReplicas", 0)),
                    str(r.get("readyReplicas", 0)),
                    str(r.get("modelState", "-")),
                ]
                for r in revisions
            ],
        )
    rollout = status.get("rollout") or {}
    if rollout:
        p(
            f"rollout:   {rollout.get('phase')} step {rollout.get('step')}"
            f" (stable v{rollout.get('stableVersion')}"
            + (f", new v{rollout['canaryVersion']}" if rollout.get("canaryVersion") else "")
            + f") {rollout.get('message', '')}",
            highlight=False,
            markup=False,
        )
    a = status.get("autoscaling") or {}
    if a:
        p(
            f"scaling:   {a.get('desiredReplicas')} replicas, decided by {a.get('decidedBy')} "
            f"({a.get('reason')}): {a.get('message', '')}",
            highlight=False,
            markup=False,
        )
    conditions = status.get("conditions", [])
    if conditions:
        console.print_table(
            "Conditions",
            ["TYPE", "STATUS", "REASON", "MESSAGE"],
            [
                [c["type"], c["status"], c.get("reason", ""), c.get("message", "")]
                for c in conditions
            ],
        )
    if events:
        console.print_table(
            "Events (newest last)",
            ["TIME", "TYPE", "REASON", "MESSAGE"],
            [[_when(e.time), e.type, e.reason, e.message] for e in events],
        )
    if not status:
        p("no status yet: the controller has not reconciled it (is it up? `servectl status`)")


# --------------------------------------------------------------------------- explain


def explain(
    name: NameArg,
    namespace: NamespaceOption = "default",
    output: console.OutputOption = Output.TABLE,
    state: StateDirOption = None,
) -> None:
    """Why this many replicas: the signals seen, each signal's proposal, the winner, the
    bounds and rails applied, and how the planner split them across revisions."""
    from servectl.backends.local.client import ClientError

    client = _client(state_dir(state))
    try:
        try:
            client.get(namespace, name)
        except ClientError as exc:
            raise fail(str(exc)) from None
        cycle = client.store.get_setting(f"cycle/{namespace}/{name}")
    finally:
        client.close()
    if cycle is None:
        raise fail(f"no decision recorded for {namespace}/{name} yet (is the controller up?)", 1)
    if output.machine:
        console.print_records([cycle], output)
        return
    p = out.print
    age = time.time() - cycle["time"]
    p(
        f"last cycle {age:.1f} s ago"
        + ("" if cycle["applied"] else " (mode recommend: not applied)")
    )
    sig = cycle["service"]
    lat = ", ".join(f"{k} {v:.1f} ms" for k, v in sig.get("latencyMs", {}).items())
    cpu = _num(sig.get("cpuUtilization"), "{:.0f}")
    p(
        f"seen:      {_num(sig.get('rps'))} req/s, CPU {cpu} % of request, "
        f"{lat or 'no latency yet'}",
        highlight=False,
        markup=False,
    )
    if not cycle["metricsOk"]:
        p(f"metrics:   MISSING: {cycle['metricsDetail']} (holding: no scale-down)", markup=False)
    decision = cycle.get("decision") or {}
    proposals = decision.get("proposals", {})
    if proposals:
        p(
            "proposals: " + ", ".join(f"{k} -> {v:.2f}" for k, v in proposals.items()),
            highlight=False,
        )
    p(
        f"decision:  {decision.get('recommended')} replicas ({decision.get('reason')}, "
        f"signal {decision.get('signal')}) {decision.get('detail', '')}",
        highlight=False,
        markup=False,
    )
    r = cycle["replicas"]
    p(
        f"bounds:    min {r['min']}, max {r['max']} -> demand {cycle['demand']} "
        f"(requested {cycle['requested']})",
        highlight=False,
    )
    limits = cycle.get("limits") or {}
    if limits.get("surge_replicas") is not None:
        p(f"surge:     at most {limits['surge_replicas']} extra replicas during a rollout")
    plan = cycle["plan"]
    console.print_table(
        f"Plan ({plan['phase']}) {plan.get('message', '')}",
        ["REVISION", "REPLICAS", "WEIGHT", "REASON", "WHY"],
        [
            [x["name"], str(x["replicas"]), f"{x['weight']}%", x["reason"], x.get("message", "")]
            for x in plan["revisions"]
        ],
    )
    for error in cycle.get("errors", []):
        p(f"refused:   {error}", markup=False)


# --------------------------------------------------------------------------- scale, delete


def scale(
    name: NameArg,
    replicas: Annotated[
        int | None, typer.Option("--replicas", min=1, help="Pin the count (min = max = N).")
    ] = None,
    min_replicas: Annotated[int | None, typer.Option("--min", min=1, help="New minimum.")] = None,
    max_replicas: Annotated[int | None, typer.Option("--max", min=1, help="New maximum.")] = None,
    namespace: NamespaceOption = "default",
    state: StateDirOption = None,
) -> None:
    """Change the replica bounds the autoscaler works within (--replicas pins them)."""
    from servectl.backends.local.client import ClientError

    if replicas is None and min_replicas is None and max_replicas is None:
        raise fail("give --replicas N, or --min and/or --max")
    if replicas is not None and (min_replicas is not None or max_replicas is not None):
        raise fail("--replicas pins both bounds: give it alone, or --min/--max")
    client = _client(state_dir(state))
    try:
        updated = client.scale(
            namespace, name, replicas=replicas, min_replicas=min_replicas, max_replicas=max_replicas
        )
    except ClientError as exc:
        raise fail(str(exc)) from None
    finally:
        client.close()
    a = updated.spec.autoscaling
    out.print(f"modelservice/{name} scaled: min {a.min_replicas}, max {a.max_replicas}")


def delete(
    name: NameArg,
    namespace: NamespaceOption = "default",
    state: StateDirOption = None,
) -> None:
    """Delete a service: its replicas stop (in-flight requests finish) and its ports close."""
    from servectl.backends.local.client import ClientError

    client = _client(state_dir(state))
    try:
        client.delete(namespace, name)
    except ClientError as exc:
        raise fail(str(exc)) from None
    finally:
        client.close()
    out.print(f"modelservice/{name} deleted")


# --------------------------------------------------------------------------- events, logs


def events(
    name: NameArg,
    namespace: NamespaceOption = "default",
    follow: Annotated[
        bool, typer.Option("-f", "--follow", help="Keep printing new events.")
    ] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, help="How many of the newest.")] = 50,
    output: console.OutputOption = Output.TABLE,
    state: StateDirOption = None,
) -> None:
    """The service's events: scaling, weight changes, rollout phases, refused commands."""
    from servectl.backends.local.client import ClientError

    client = _client(state_dir(state))
    try:
        try:
            client.get(namespace, name)
        except ClientError as exc:
            raise fail(str(exc)) from None
        batch = client.events(namespace, name, limit=limit)
        records = [
            {"id": e.id, "time": e.time, "type": e.type, "reason": e.reason, "message": e.message}
            for e in batch
        ]
        if output.machine:
            console.print_records(records, output)
        else:
            for e in batch:
                out.print(
                    f"{_when(e.time)}  {e.type:<7} {e.reason:<20} {e.message}",
                    highlight=False,
                    markup=False,
                )
        last = batch[-1].id if batch else 0
        while follow:
            time.sleep(1.0)
            more = client.events(namespace, name, since_id=last)
            for e in more:
                if output.machine:
                    console.print_records(
                        [
                            {
                                "id": e.id,
                                "time": e.time,
                                "type": e.type,
                                "reason": e.reason,
                                "message": e.message,
                            }
                        ],
                        output,
                    )
                else:
                    out.print(
                        f"{_when(e.time)}  {e.type:<7} {e.reason:<20} {e.message}",
                        highlight=False,
                        markup=False,
                    )
                last = e.id
    except KeyboardInterrupt:
        pass
    finally:
        client.close()


def logs(
    name: NameArg,
    namespace: NamespaceOption = "default",
    replica: Annotated[
        str | None, typer.Option("--replica", help="One replica (default: every replica).")
    ] = None,
    tail: Annotated[int, typer.Option("--tail", min=1, help="Lines per replica.")] = 20,
    state: StateDirOption = None,
) -> None:
    """The model servers' logs (each replica's, newest lines), from the state directory."""
    directory = state_dir(state)
    client = _client(directory)
    try:
        pods = [
            r["spec"]["pod"]
            for r in client.replicas()
            if r.get("spec", {}).get("service") == name and r["spec"].get("namespace") == namespace
        ]
    finally:
        client.close()
    logs_dir = directory / "logs"
    if replica is not None:
        pods = [replica]
    if not pods:
        pods = sorted(p.stem for p in logs_dir.glob(f"{name}-v*.log"))
    if not pods:
        raise fail(f"no replicas of {namespace}/{name} have logs in {logs_dir}", 1)
    for pod in sorted(pods):
        path = logs_dir / f"{pod}.log"
        try:
            lines = path.read_text(errors="replace").splitlines()[-tail:]
        except OSError:
            lines = ["(no log)"]
        out.print(f"==> {pod} <==", highlight=False, markup=False)
        for line in lines:
            out.print(line, highlight=False, markup=False)


# --------------------------------------------------------------------------- top


def top(
    name: Annotated[str | None, typer.Argument(help="One service (default: all).")] = None,
    namespace: NamespaceOption = "default",
    output: console.OutputOption = Output.TABLE,
    state: StateDirOption = None,
) -> None:
    """Per revision: replicas, CPU, GPU duty cycle, requests/s, p99 (last tick's metrics)."""
    client = _client(state_dir(state))
    try:
        rows = [r for r in client.services(namespace) if name is None or r.name == name]
        cycles = {r.name: client.store.get_setting(f"cycle/{r.namespace}/{r.name}") for r in rows}
    finally:
        client.close()
    records = []
    for service, cycle in sorted(cycles.items()):
        if cycle is None:
            continue
        for rev in cycle["revisions"]:
            s = rev["signals"]
            records.append(
                {
                    "service": service,
                    "revision": rev["name"],
                    "ready": rev["ready"],
                    "desired": rev["desired"],
                    "weight": rev["weight"],
                    "cpuCores": s.get("cpuCores"),
                    "cpuUtilization": s.get("cpuUtilization"),
                    "gpuDutyCycle": s.get("gpuDutyCycle"),
                    "rps": s.get("rps"),
                    "p99Ms": s.get("latencyMs", {}).get("p99"),
                    "errorRate": s.get("errorRate"),
                }
            )
    if not records:
        raise fail(
            "no metrics yet: is the controller up (`servectl status`) and a service deployed?", 1
        )
    console.emit(
        output,
        title="Revisions (last tick)",
        header=[
            "SERVICE",
            "REVISION",
            "REPLICAS",
            "WEIGHT",
            "CPU",
            "CPU%",
            "GPU%",
            "RPS",
            "P99 MS",
        ],
        rows=[
            [
                r["service"],
                r["revision"],
                f"{r['ready']}/{r['desired']}",
                f"{r['weight']}%",
                _num(r["cpuCores"], "{:.2f}"),
                _num(r["cpuUtilization"], "{:.0f}"),
                _num(r["gpuDutyCycle"], "{:.0f}"),
                _num(r["rps"]),
                _num(r["p99Ms"]),
            ]
            for r in records
        ],
        records=records,
    )


# --------------------------------------------------------------------------- rollout verbs


def _queue(
    name: str, namespace: str, state: Path | None, op: str, version: int | None = None
) -> None:
    from servectl.backends.local.client import ClientError
    from servectl.rollout.machine import Op

    client = _client(state_dir(state))
    try:
        try:
            client.rollout(namespace, name, Op(op), version)
        except ClientError as exc:
            raise fail(str(exc)) from None
        alive = client.controller().alive
    finally:
        client.close()
    out.print(f"modelservice/{name}: {op} queued" + (f" (version {version})" if version else ""))
    if not alive:
        err.print("note: the controller is not running; start it with `servectl up`")


def rollout_start(
    name: NameArg,
    version: Annotated[int, typer.Option("--version", min=0, help="The version to roll out.")],
    namespace: NamespaceOption = "default",
    state: StateDirOption = None,
) -> None:
    """Start a rollout to VERSION with the service's strategy (canary, abTest, blueGreen)."""
    _queue(name, namespace, state, "start", version)


def rollout_promote(
    name: NameArg,
    full: Annotated[bool, typer.Option("--full", help="Skip the remaining steps.")] = False,
    namespace: NamespaceOption = "default",
    state: StateDirOption = None,
) -> None:
    """Go past the current pause or analysis (--full: straight to 100 %)."""
    _queue(name, namespace, state, "promote-full" if full else "promote")


def _simple(op: str, doc: str) -> Any:
    def command(
        name: NameArg,
        namespace: NamespaceOption = "default",
        state: StateDirOption = None,
    ) -> None:
        _queue(name, namespace, state, op)

    command.__doc__ = doc
    return command


rollout_abort = _simple("abort", "Stop the rollout: all traffic back to the stable revision.")
rollout_pause = _simple("pause", "Hold the rollout at its current step.")
rollout_resume = _simple("resume", "Continue a paused rollout.")
rollout_retry = _simple("retry", "Start an aborted rollout again from its first step.")
rollout_undo = _simple("undo", "Roll back to the previous version (a rollout back to it).")


def rollout_status(
    name: NameArg,
    namespace: NamespaceOption = "default",
    watch: Annotated[bool, typer.Option("-w", "--watch", help="Follow until it finishes.")] = False,
    output: console.OutputOption = Output.TABLE,
    state: StateDirOption = None,
) -> None:
    """Where the rollout stands: phase, step, weights, verdicts (--watch to follow)."""
    from servectl.backends.local.client import ClientError

    client = _client(state_dir(state))
    last = None
    try:
        try:
            client.get(namespace, name)
        except ClientError as exc:
            raise fail(str(exc)) from None
        while True:
            status = client.status(namespace, name) or {}
            rollout = status.get("rollout") or {}
            weights = {r["name"]: r.get("weight", 0) for r in status.get("revisions", [])}
            record = {
                "phase": rollout.get("phase", "Idle"),
                "step": rollout.get("step"),
                "stableVersion": rollout.get("stableVersion"),
                "canaryVersion": rollout.get("canaryVersion"),
                "weights": weights,
                "message": rollout.get("message", ""),
                "verdicts": rollout.get("verdicts", []),
            }
            line = (
                f"{record['phase']} step {record['step']}  "
                + " ".join(f"{k}:{v}%" for k, v in weights.items())
                + f"  {record['message']}"
            )
            if output.machine and not watch:
                console.print_records([record], output)
                return
            if line != last:
                out.print(f"{_when(time.time())}  {line}", highlight=False, markup=False)
                last = line
            if not watch or record["phase"] in ("Idle", "Completed", "Aborted", "Degraded"):
                return
            time.sleep(1.0)
    except KeyboardInterrupt:
        pass
    finally:
        client.close()


def rollout_history(
    name: NameArg,
    namespace: NamespaceOption = "default",
    output: console.OutputOption = Output.TABLE,
    state: StateDirOption = None,
) -> None:
    """Finished rollouts, oldest first: versions, outcome, verdicts."""
    client = _client(state_dir(state))
    try:
        records = client.history(namespace, name)
    finally:
        client.close()
    console.emit(
        output,
        title=f"Rollouts of {name}",
        header=["#", "TIME", "FROM", "TO", "OUTCOME", "MESSAGE"],
        rows=[
            [
                str(r["id"]),
                _when(r["time"]),
                f"v{r.get('fromVersion', r.get('stableVersion'))}",
                f"v{r['toVersion']}" if r.get("toVersion") is not None else "-",
                str(r.get("phase")),
                str(r.get("message", "")),
            ]
            for r in records
        ],
        records=records,
    )


def register(app: typer.Typer, rollout_app: typer.Typer) -> None:
    for command in (deploy, get, describe, explain, scale, delete, events, logs, top):
        app.command()(command)
    rollout_app.command("start")(rollout_start)
    rollout_app.command("status")(rollout_status)
    rollout_app.command("promote")(rollout_promote)
    rollout_app.command("abort")(rollout_abort)
    rollout_app.command("pause")(rollout_pause)
    rollout_app.command("resume")(rollout_resume)
    rollout_app.command("retry")(rollout_retry)
    rollout_app.command("undo")(rollout_undo)
    rollout_app.command("history")(rollout_history)
