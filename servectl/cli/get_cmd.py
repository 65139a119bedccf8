"""``servectl get``, ``describe``, ``explain`` and ``top``: what the runtime says about
services, read through :class:`servectl.backends.client.ServiceClient` (the local
runtime's store, or a cluster with ``--context``).

These are the verbs a user runs most, so they import no resource model and no controller
when they read the local runtime (docs/benchmarks.md, "CLI latency").
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from servectl.cli import console, target
from servectl.cli import format as fmt
from servectl.cli.console import Output, fail, out
from servectl.cli.target import (
    ContextOption,
    KubeconfigOption,
    NameArg,
    NamespaceOption,
    StateDirOption,
)

if TYPE_CHECKING:
    from servectl.backends.client import Description, Endpoints, ReplicaStatus, ServiceSummary

# --------------------------------------------------------------------------- get


def _summary_of(row: Any, status: dict[str, Any], endpoints: Endpoints | None) -> dict[str, Any]:
    """One service's row for ``get``: ``row`` as listed (namespace, name, spec, updated,
    generation), its status and where it answers on this machine, if anywhere."""
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
        "standby": sum(r.get("standbyReplicas", 0) for r in revisions),
        "weights": {r["name"]: r.get("weight", 0) for r in revisions},
        "rollout": rollout.get("phase", "Idle"),
        "step": rollout.get("step"),
        "stableVersion": rollout.get("stableVersion"),
        "canaryVersion": rollout.get("canaryVersion"),
        "decidedBy": auto.get("decidedBy"),
        "min": spec.get("autoscaling", {}).get("minReplicas"),
        "max": spec.get("autoscaling", {}).get("maxReplicas"),
        "rest": f"http://127.0.0.1:{endpoints.rest_port}" if endpoints else None,
        "grpc": f"127.0.0.1:{endpoints.grpc_port}" if endpoints else None,
        "age": time.time() - row.updated,
        "generation": row.generation,
    }


def get(
    name: Annotated[str | None, typer.Argument(help="One service (default: all).")] = None,
    namespace: Annotated[
        str | None,
        typer.Option(
            "-n",
            "--namespace",
            help="Only this namespace (default: all; on a cluster, the context's).",
            show_default=False,
        ),
    ] = None,
    all_namespaces: Annotated[
        bool,
        typer.Option(
            "-A", "--all-namespaces", help="Every namespace (what -n omitted does locally)."
        ),
    ] = False,
    output: console.OutputOption = Output.TABLE,
    state: StateDirOption = None,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """List services: ready replicas, weights, rollout phase, REST and gRPC endpoints.

    -o wide adds the namespace, the bounds and the deciding signal; -o json|yaml print
    each resource as kubectl does (apiVersion, kind, metadata, spec, status), without
    the controller's internal state."""
    with target.session(state, context, kubeconfig) as client:
        listed = client.listing_namespace(namespace, all_namespaces)
        rows = client.list_services(listed, name)
        empty = client.no_services(listed, namespace or client.namespace) if not rows else ""
    stale = next((r.stale for r in rows if r.stale is not None), None)
    if stale is not None:  # on stderr: -o json|yaml stay parseable (Ready is Unknown there)
        console.err.print(f"note: {stale}", highlight=False, markup=False)
    if output.machine:
        console.print_records([r.document for r in rows], output)
        return
    if not rows:
        out.print(empty, highlight=False, markup=False)
        return
    _emit_services(output, rows)


def _emit_services(output: Output, rows: list[ServiceSummary]) -> None:
    summaries = [_summary_of(r, r.status, r.endpoints) for r in rows]
    console.emit(
        output,
        title="ModelServices",
        header=["NAME", "READY", "WEIGHTS", "ROLLOUT", "REST", "GRPC", "AGE"],
        rows=[
            [
                s["name"],
                f"{s['ready']}/{s['desired']}",
                " ".join(f"{k}:{v}" for k, v in s["weights"].items()) or "-",
                s["rollout"] + (f" (step {s['step']})" if s["rollout"] not in ("Idle",) else ""),
                s["rest"] or "-",
                s["grpc"] or "-",
                fmt.age(s["age"]),
            ]
            for s in summaries
        ],
        records=summaries,
        wide_header=["NAMESPACE", "MIN", "MAX", "STANDBY", "DECIDED BY"],
        wide_rows=[
            [s["namespace"], str(s["min"]), str(s["max"]), str(s["standby"]), s["decidedBy"] or "-"]
            for s in summaries
        ],
    )


# --------------------------------------------------------------------------- describe


def describe(
    name: NameArg,
    namespace: NamespaceOption = None,
    output: console.OutputOption = Output.TABLE,
    state: StateDirOption = None,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Everything about one service: endpoints, revisions, rollout, autoscaling,
    conditions and the latest events. -o yaml|json prints the resource as `get` does.

    Messages wrap to the terminal's width (in a pipe each row is whole), and times in
    them read as local time and how far from now."""
    with target.session(state, context, kubeconfig) as client:
        described = client.describe(namespace or client.namespace, name, events=10)
    if output.machine:
        console.print_records([described.document], output)
        return
    if described.spec is None:  # another writer's spec that servectl would refuse
        raise fail(
            f"{described.namespace}/{name}: servectl cannot read its spec: {described.spec_error}",
            1,
        )
    _print_description(described, described.spec)


def _print_description(d: Description, doc: dict[str, Any]) -> None:
    spec = doc["spec"]
    status = d.status
    p = out.print
    now = time.time()

    def text(message: str) -> str:
        return fmt.readable_times(message, now)

    p(f"[bold]{escape(d.name)}[/]  namespace {escape(d.namespace)}", highlight=False)
    p(
        f"model:     {spec['model']['name']} from {spec['model']['basePath']} "
        f"(version {spec['model'].get('version', 'latest')})",
        highlight=False,
        markup=False,
    )
    if d.endpoints is not None:
        p(
            f"endpoints: REST {d.endpoints.rest_url}/v1/models/{spec['model']['name']}   "
            f"gRPC {d.endpoints.grpc_address}",
            highlight=False,
            markup=False,
        )
    elif d.no_endpoints is not None:
        p(f"endpoints: {d.no_endpoints}", highlight=False, markup=False)
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
            ["NAME", "VERSION", "WEIGHT", "DESIRED", "READY", "STANDBY", "MODEL"],
            [
                [
                    r["name"],
                    str(r["version"]),
                    f"{r.get('weight', 0)}%",
                    str(r.get("desiredReplicas", 0)),
                    str(r.get("readyReplicas", 0)),
                    str(r.get("standbyReplicas", 0)),
                    str(r.get("modelState", "-")),
                ]
                for r in revisions
            ],
        )
    if d.replicas:  # the local runtime's: each process, its restarts and its last exit
        console.print_table(
            "Replicas",
            ["NAME", "PHASE", "PID", "REST", "GRPC", "RESTARTS", "LAST EXIT"],
            [
                [
                    r.name,
                    r.phase,
                    _or_dash(r.pid),
                    _or_dash(r.rest_port),
                    _or_dash(r.grpc_port),
                    str(r.restarts),
                    _last_exit(r),
                ]
                for r in d.replicas
            ],
        )
    rollout = status.get("rollout") or {}
    if rollout:
        p(
            f"rollout:   {rollout.get('phase')} step {rollout.get('step')}"
            f" (stable v{rollout.get('stableVersion')}"
            + (f", new v{rollout['canaryVersion']}" if rollout.get("canaryVersion") else "")
            + f") {text(rollout.get('message', ''))}".rstrip(),
            highlight=False,
            markup=False,
        )
    a = status.get("autoscaling") or {}
    if a:
        p(
            f"scaling:   {a.get('desiredReplicas')} replicas, decided by {a.get('decidedBy')} "
            f"({a.get('reason')}): {text(a.get('message') or '')}",
            highlight=False,
            markup=False,
        )
    conditions = status.get("conditions", [])
    if conditions:
        console.print_table(
            "Conditions",
            ["TYPE", "STATUS", "REASON", "MESSAGE"],
            [
                [c["type"], c["status"], c.get("reason", ""), text(c.get("message", ""))]
                for c in conditions
            ],
        )
    if d.events:
        console.print_table(
            "Events (newest last)",
            ["TIME", "TYPE", "REASON", "MESSAGE"],
            [[fmt.clock_time(e.time), e.type, e.reason, text(e.message)] for e in d.events],
        )
    if not status:
        p(escape(d.no_status))


# --------------------------------------------------------------------------- explain


def explain(
    name: NameArg,
    namespace: NamespaceOption = None,
    output: console.OutputOption = Output.TABLE,
    state: StateDirOption = None,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Why this many replicas: the signals seen, each signal's proposal, the winner, the
    bounds and rails applied, and how the planner split them across revisions.

    On a cluster: the last decision as the controller wrote it in status (the decision,
    its reason, the bounds, each revision's replicas and weight, the conditions that
    limit scaling); the per-cycle signals and proposals are the local runtime's only."""
    with target.session(state, context, kubeconfig) as client:
        ns = namespace or client.namespace
        cycle = client.last_cycle(ns, name)
        if cycle is None:
            raise client.no_decision(ns, name)
    if output.machine:
        console.print_records([cycle.record], output)
        return
    if cycle.source == "status":
        _explain_status(cycle.record)
    else:
        _explain_cycle(cycle.record)


def _explain_cycle(cycle: dict[str, Any]) -> None:
    """The loop's own record of its last cycle (the local runtime's); the times in its
    texts read as local time and how far from now."""
    p = out.print
    now = time.time()

    def text(message: str) -> str:
        return fmt.readable_times(message, now)

    age = now - cycle["time"]
    p(
        f"last cycle {age:.1f} s ago"
        + ("" if cycle["applied"] else " (mode recommend: not applied)")
    )
    sig = cycle["service"]
    lat = ", ".join(f"{k} {v:.1f} ms" for k, v in sig.get("latencyMs", {}).items())
    cpu = fmt.num(sig.get("cpuUtilization"), "{:.0f}")
    p(
        f"seen:      {fmt.num(sig.get('rps'))} req/s, CPU {cpu} % of request, "
        f"{lat or 'no latency yet'}",
        highlight=False,
        markup=False,
    )
    if not cycle["metricsOk"]:
        p(
            f"metrics:   MISSING: {text(cycle['metricsDetail'])} (holding: no scale-down)",
            markup=False,
        )
    decision = cycle.get("decision") or {}
    proposals = decision.get("proposals", {})
    if proposals:
        p(
            "proposals: " + ", ".join(f"{k} -> {v:.2f}" for k, v in proposals.items()),
            highlight=False,
        )
    if decision.get("forecast"):
        p(f"forecast:  {text(decision['forecast'])}", highlight=False, markup=False)
    p(
        f"decision:  {decision.get('recommended')} replicas ({decision.get('reason')}, "
        f"signal {decision.get('signal')}) {text(decision.get('detail', ''))}",
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
        f"Plan ({plan['phase']}) {text(plan.get('message', ''))}".rstrip(),
        ["REVISION", "REPLICAS", "WEIGHT", "COST", "REASON", "WHY"],
        [
            [
                x["name"],
                str(x["replicas"]),
                f"{x['weight']}%",
                _cost(x),
                x["reason"],
                text(x.get("message", "")),
            ]
            for x in plan["revisions"]
        ],
    )
    for error in cycle.get("errors", []):
        p(f"refused:   {text(error)}", markup=False)


def _cost(revision: dict[str, Any]) -> str:
    """Its CPU per request relative to stable as sized (rule 3), and the estimate when
    that differs: the planner holds the one it sizes at while the estimate stays within
    10 % of it (docs/rollouts.md)."""
    sized, estimate = revision.get("cost"), revision.get("costEstimate")
    if sized is None:
        return "-"
    if estimate is None or abs(estimate - sized) < 0.005:
        return f"{sized:.2f}x"
    return f"{sized:.2f}x (est. {estimate:.2f})"


def _explain_status(record: dict[str, Any]) -> None:
    """The decision a cluster's controller wrote in status."""
    from servectl.backends.client import timestamp

    p = out.print
    now = time.time()
    p(
        "from status: the cluster's controller writes its last decision there; the signals "
        "and each signal's proposal are recorded by the local runtime only",
        highlight=False,
        markup=False,
    )
    auto = record["autoscaling"]
    last = timestamp(auto.get("lastScaleTime"))
    p(
        f"decision:  {auto.get('desiredReplicas')} replicas, decided by {auto.get('decidedBy')} "
        f"({auto.get('reason')}): {fmt.readable_times(auto.get('message') or '', now)}"
        + (f"; last scaled at {fmt.moment(last, now)}" if last is not None else ""),
        highlight=False,
        markup=False,
    )
    p(
        f"bounds:    min {record['min']}, max {record['max']}, mode {record['mode']}",
        highlight=False,
    )
    for c in record["conditions"]:
        if c.get("type") == "Ready" and c.get("status") == "True":
            continue
        p(
            f"{c.get('type')}: {c.get('status')} ({c.get('reason', '')}) "
            f"{fmt.readable_times(c.get('message', ''), now)}",
            highlight=False,
            markup=False,
        )
    revisions = record["revisions"]
    if revisions:
        console.print_table(
            "Revisions",
            ["REVISION", "DESIRED", "READY", "STANDBY", "WEIGHT", "MODEL"],
            [
                [
                    r["name"],
                    str(r.get("desiredReplicas", 0)),
                    str(r.get("readyReplicas", 0)),
                    str(r.get("standbyReplicas", 0)),
                    f"{r.get('weight', 0)}%",
                    str(r.get("modelState", "-")),
                ]
                for r in revisions
            ],
        )


# --------------------------------------------------------------------------- top


def top(
    name: Annotated[str | None, typer.Argument(help="One service (default: all).")] = None,
    namespace: NamespaceOption = None,
    output: console.OutputOption = Output.TABLE,
    state: StateDirOption = None,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Per revision: replicas, CPU, GPU duty cycle, requests/s, p99 (last tick's metrics).

    -o wide adds each replica's pid, ports, restarts and last exit; -o json|yaml has them
    per revision under "replicas".

    On a cluster it prints the kubectl command that shows the pods' CPU and memory."""
    with target.session(state, context, kubeconfig) as client:
        cycles = client.cycles(namespace or client.namespace, name)
        by_revision: dict[str, list[ReplicaStatus]] = {}
        for replica in client.replica_statuses(namespace or client.namespace, name):
            by_revision.setdefault(replica.revision, []).append(replica)
    records = []
    wide_rows = []
    for service, cycle in sorted(cycles.items()):
        for rev in cycle.record["revisions"]:
            s = rev["signals"]
            replicas = by_revision.get(rev["name"], [])
            wide_rows.append(_replica_columns(replicas))
            records.append(
                {
                    "service": service,
                    "revision": rev["name"],
                    "ready": rev["ready"],
                    "desired": rev["desired"],
                    "weight": rev["weight"],
                    "cpuCores": s.get("cpuUsageCores"),
                    "cpuUtilization": s.get("cpuUtilization"),
                    "gpuDutyCycle": s.get("gpuDutyCycle"),
                    "rps": s.get("rps"),
                    "p99Ms": s.get("latencyMs", {}).get("p99"),
                    "errorRate": s.get("errorRate"),
                }
            )
            if replicas:  # the local runtime's processes (none listed on a cluster)
                records[-1]["replicas"] = [r.to_record() for r in replicas]
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
                fmt.num(r["cpuCores"], "{:.2f}"),
                fmt.num(r["cpuUtilization"], "{:.0f}"),
                fmt.num(r["gpuDutyCycle"], "{:.0f}"),
                fmt.num(r["rps"]),
                fmt.num(r["p99Ms"]),
            ]
            for r in records
        ],
        records=records,
        wide_header=["PIDS", "PORTS (REST/GRPC)", "RESTARTS", "LAST EXIT"],
        wide_rows=wide_rows,
    )


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def _last_exit(replica: ReplicaStatus) -> str:
    """``signal 9 at 14:02:11``, or ``-`` for a replica whose process never ended."""
    if replica.last_exit is None:
        return "-"
    when = replica.last_exit.get("time")
    at = f" at {fmt.clock_time(when)}" if isinstance(when, int | float) else ""
    return replica.exit_words + at


def _replica_columns(replicas: list[ReplicaStatus]) -> list[str]:
    """``top -o wide``'s columns for one revision: each replica's pid, ports, restarts and
    last exit, comma-separated in pod order."""
    if not replicas:
        return ["-", "-", "-", "-"]
    return [
        ",".join(_or_dash(r.pid) for r in replicas),
        ",".join(f"{_or_dash(r.rest_port)}/{_or_dash(r.grpc_port)}" for r in replicas),
        ",".join(str(r.restarts) for r in replicas),
        ",".join(_last_exit(r) for r in replicas),
    ]
