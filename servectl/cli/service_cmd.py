"""The verbs on ModelServices: ``deploy``, ``get``, ``describe``, ``explain``, ``scale``,
``delete``, ``events``, ``logs``, ``top`` and ``rollout start|status|promote|...``.

They work on the local runtime's store (``--state-dir``); the controller applies a change
at its next tick (1 s). Every write checks first and changes nothing on error.

With ``--context`` (or ``--kubeconfig``, or ``$SERVECTL_CONTEXT``; see ``target``) the same
verbs work on ModelService resources in a cluster through
``servectl.backends.kubernetes.client.KubeClient``: they write the resource (server-side
apply, merge patches of the rollout-command annotation and of the replica bounds) and read
its status and Events; ``logs`` and ``top`` print the kubectl command to use instead.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from servectl.cli import console, target
from servectl.cli.console import Output, err, fail, out
from servectl.cli.local_cmd import StateDirOption, _client, state_dir
from servectl.cli.target import Cluster, ContextOption, KubeconfigOption

NamespaceOption = Annotated[
    str | None,
    typer.Option(
        "-n",
        "--namespace",
        help="The service's namespace (default: default; on a cluster, the context's).",
        show_default=False,
    ),
]
NameArg = Annotated[str, typer.Argument(help="The ModelService's name.")]
KUBE_POLL_S = 2.0
"""How often --watch and --follow read a cluster (the controller's cycle is 5 s)."""
_LABEL_SERVICE = "servectl.io/service"
"""The label every pod of a service carries in a cluster (objects.LABEL_SERVICE); kept
here so that `logs` and `top` do not import the Kubernetes client to print a command."""


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
        str | None,
        typer.Option(
            "--model-path",
            help="Directory of numbered versions (<dir>/<N>/saved_model.pb); on a cluster "
            "s3://, gs://, pvc://<claim>/<path> or a path in the image.",
            show_default=False,
        ),
    ] = None,
    model_name: Annotated[
        str | None,
        typer.Option("--model-name", help="TF Serving model name (default: the directory's name)."),
    ] = None,
    version: Annotated[
        int | None,
        typer.Option(
            "--version",
            min=0,
            help="Version to serve (default: the latest; required on a cluster).",
            show_default=False,
        ),
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
    namespace: NamespaceOption = None,
    state: StateDirOption = None,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
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

    \b
    On a cluster (--context): the ModelService is applied (server-side apply) and the
    controller in the cluster acts on it; the version is required and not looked for:
      servectl deploy -f service.yaml --context prod -n ml
    """
    from servectl import specfile
    from servectl.api import models, validation

    on_cluster = target.wanted(context, kubeconfig, state)
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
        if on_cluster:
            # A location in the cluster, not on this machine: taken as written.
            model: dict[str, Any] = {
                "name": model_name or model_path.rstrip("/").rsplit("/", 1)[-1],
                "basePath": model_path,
            }
        else:
            local_path = Path(model_path)
            model = {
                "name": model_name or local_path.resolve().name,
                "basePath": str(local_path.expanduser().resolve()),
            }
        if version is not None:
            model["version"] = version
        doc = {
            "apiVersion": "servectl.io/v1alpha1",
            "kind": "ModelService",
            # On a cluster, no -n: the context's namespace, filled in by _deploy_kube.
            "metadata": {"name": name}
            if on_cluster and namespace is None
            else {"name": name, "namespace": namespace or "default"},
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
    if on_cluster:
        cluster = target.cluster(context, kubeconfig, namespace, state)
        assert cluster is not None
        _deploy_kube(cluster, services, policies, namespace)
        return
    from servectl.backends.local.client import ClientError

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


def _in_namespace(resource: Any, namespace: str, flag: str | None) -> Any:
    """``resource`` placed in the namespace it names, else ``namespace`` (-n or the
    context's); a file's namespace that -n contradicts is refused, as kubectl does."""
    meta = resource.metadata
    if "namespace" in meta.model_fields_set:
        if flag is not None and flag != meta.namespace:
            raise fail(
                f"{resource.kind} {meta.name}: metadata.namespace is {meta.namespace} but -n "
                f"says {flag}; drop one of them"
            )
        return resource
    return resource.model_copy(
        update={"metadata": meta.model_copy(update={"namespace": namespace})}
    )


def _deploy_kube(
    cluster: Cluster, services: list[Any], policies: list[Any], flag: str | None
) -> None:
    from servectl.backends.kubernetes.client import ClientError

    services = [_in_namespace(s, cluster.namespace, flag) for s in services]
    policies = [_in_namespace(p, cluster.namespace, flag) for p in policies]
    try:
        done = cluster.client.deploy_all(services, policies)
    except ClientError as exc:
        raise target.refused(exc) from None
    finally:
        cluster.close()
    for policy in policies:
        out.print(f"scalingpolicy/{policy.metadata.name} applied", highlight=False)
    for d in done:
        what = "created" if d.created else "configured" if d.changed else "unchanged"
        if d.rollout_to is not None:
            what += f"; rollout to v{d.rollout_to} requested"
        out.print(f"modelservice/{d.name} {what}", highlight=False)


# --------------------------------------------------------------------------- get


def _summary(client: Any, row: Any) -> dict[str, Any]:
    status = client.status(row.namespace, row.name) or {}
    record = client.record(row.namespace, row.name)
    return _summary_of(row, status, record)


def _summary_of(row: Any, status: dict[str, Any], record: Any) -> dict[str, Any]:
    """One service's row for ``get``: ``row`` as ``services()`` lists it (namespace, name,
    spec, updated, generation), its status and the local runtime's record (ports) if any."""
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
    """List services: ready replicas, weights, rollout phase, endpoints.

    -o wide adds the bounds, the deciding signal and the gRPC port; -o json|yaml print
    the whole resource (spec and status)."""
    from servectl.backends.local.client import ClientError

    cluster = target.cluster(context, kubeconfig, namespace, state)
    if cluster is not None:
        _get_kube(cluster, name, None if all_namespaces else cluster.namespace, output)
        return
    if all_namespaces:
        namespace = None
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
    _emit_services(output, summaries)


def _get_kube(cluster: Cluster, name: str | None, namespace: str | None, output: Output) -> None:
    from servectl.backends.kubernetes import client as kube_client

    try:
        if name is not None and namespace is not None:
            rows = [kube_client.row(cluster.client.object(namespace, name))]
        else:
            rows = [r for r in cluster.client.services(namespace) if name in (None, r.name)]
            if name is not None and not rows:
                raise kube_client.ClientError(f"no ModelService {name} in any namespace")
    except kube_client.ClientError as exc:
        raise target.refused(exc) from None
    finally:
        cluster.close()
    if output.machine:
        console.print_records([r.document for r in rows], output)
        return
    if not rows:
        where = f"namespace {namespace}" if namespace is not None else "any namespace"
        out.print(
            f"no ModelServices in {where}; deploy one with "
            f"`{cluster.servectl('deploy', '-f', 'FILE')}`",
            highlight=False,
            markup=False,
        )
        return
    _emit_services(output, [_summary_of(r, r.status, None) for r in rows])


def _emit_services(output: Output, summaries: list[dict[str, Any]]) -> None:
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
    namespace: NamespaceOption = None,
    output: console.OutputOption = Output.TABLE,
    state: StateDirOption = None,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Everything about one service: endpoints, revisions, rollout, autoscaling,
    conditions and the latest events. -o yaml|json prints spec and status."""
    from servectl.backends.local.client import ClientError

    cluster = target.cluster(context, kubeconfig, namespace, state)
    if cluster is not None:
        _describe_kube(cluster, name, output)
        return
    namespace = namespace or "default"
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
    _print_description(
        name,
        namespace,
        doc,
        status,
        record,
        events,
        "no status yet: the controller has not reconciled it (is it up? `servectl status`)",
    )


def _describe_kube(cluster: Cluster, name: str, output: Output) -> None:
    from servectl.backends.kubernetes import client as kube_client

    namespace = cluster.namespace
    try:
        live = cluster.client.object(namespace, name)
        events = cluster.client.events(namespace, name, limit=10)
    except kube_client.ClientError as exc:
        raise target.refused(exc) from None
    finally:
        cluster.close()
    listed = kube_client.row(live)
    if output.machine:
        console.print_records([listed.document], output)
        return
    try:
        service = kube_client.parse(live)
    except ValueError as exc:  # another writer's spec that servectl would refuse
        raise fail(f"{namespace}/{name}: servectl cannot read its spec: {exc}", 1) from None
    doc = service.model_dump(mode="json", by_alias=True, exclude_none=True)
    _print_description(
        name,
        namespace,
        doc,
        listed.status,
        None,
        events,
        "no status yet: the controller has not reconciled it (is servectl's controller "
        "running in the cluster? "
        + cluster.kubectl("get", "pods", "-A", "-l", "app.kubernetes.io/name=servectl", ns=False)
        + ")",
    )


def _print_description(
    name: str,
    namespace: str,
    doc: dict[str, Any],
    status: dict[str, Any],
    record: Any,
    events: list[Any],
    no_status: str,
) -> None:
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
        p(escape(no_status))


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
    from servectl.backends.local.client import ClientError

    cluster = target.cluster(context, kubeconfig, namespace, state)
    if cluster is not None:
        _explain_kube(cluster, name, output)
        return
    namespace = namespace or "default"
    client = _client(state_dir(state))
    try:
        try:
            client.get(namespace, name)
        except ClientError as exc:
            raise fail(str(exc)) from None
        cycle = client.store.get_cycle(namespace, name)
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
    if decision.get("forecast"):
        p(f"forecast:  {decision['forecast']}", highlight=False, markup=False)
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


EXPLAIN_CONDITIONS = ("MetricsAvailable", "ScalingLimited", "Ready")


def _explain_kube(cluster: Cluster, name: str, output: Output) -> None:
    from servectl.backends.kubernetes import client as kube_client

    namespace = cluster.namespace
    try:
        live = cluster.client.object(namespace, name)
    except kube_client.ClientError as exc:
        raise target.refused(exc) from None
    finally:
        cluster.close()
    listed = kube_client.row(live)
    status = listed.status
    auto = status.get("autoscaling") or {}
    if not auto:
        raise fail(
            f"no decision recorded for {namespace}/{name} yet (is servectl's controller "
            "running in the cluster?)",
            1,
        )
    bounds = (listed.spec.get("spec") or {}).get("autoscaling") or {}
    record = {
        "source": "status",
        "observedGeneration": status.get("observedGeneration"),
        "autoscaling": auto,
        "min": bounds.get("minReplicas"),
        "max": bounds.get("maxReplicas"),
        "mode": bounds.get("mode", "active"),
        "revisions": status.get("revisions", []),
        "conditions": [
            c for c in status.get("conditions", []) if c.get("type") in EXPLAIN_CONDITIONS
        ],
    }
    if output.machine:
        console.print_records([record], output)
        return
    p = out.print
    p(
        "from status: the cluster's controller writes its last decision there; the signals "
        "and each signal's proposal are recorded by the local runtime only",
        highlight=False,
        markup=False,
    )
    last = kube_client.timestamp(auto.get("lastScaleTime"))
    p(
        f"decision:  {auto.get('desiredReplicas')} replicas, decided by {auto.get('decidedBy')} "
        f"({auto.get('reason')}): {auto.get('message') or ''}"
        + (f"; last scaled at {_when(last)}" if last is not None else ""),
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
            f"{c.get('type')}: {c.get('status')} ({c.get('reason', '')}) {c.get('message', '')}",
            highlight=False,
            markup=False,
        )
    revisions = record["revisions"]
    if revisions:
        console.print_table(
            "Revisions",
            ["REVISION", "DESIRED", "READY", "WEIGHT", "MODEL"],
            [
                [
                    r["name"],
                    str(r.get("desiredReplicas", 0)),
                    str(r.get("readyReplicas", 0)),
                    f"{r.get('weight', 0)}%",
                    str(r.get("modelState", "-")),
                ]
                for r in revisions
            ],
        )


# --------------------------------------------------------------------------- scale, delete


def scale(
    name: NameArg,
    replicas: Annotated[
        int | None, typer.Option("--replicas", min=1, help="Pin the count (min = max = N).")
    ] = None,
    min_replicas: Annotated[int | None, typer.Option("--min", min=1, help="New minimum.")] = None,
    max_replicas: Annotated[int | None, typer.Option("--max", min=1, help="New maximum.")] = None,
    namespace: NamespaceOption = None,
    state: StateDirOption = None,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Change the replica bounds the autoscaler works within (--replicas pins them)."""
    from servectl.backends.local.client import ClientError

    if replicas is None and min_replicas is None and max_replicas is None:
        raise fail("give --replicas N, or --min and/or --max")
    if replicas is not None and (min_replicas is not None or max_replicas is not None):
        raise fail("--replicas pins both bounds: give it alone, or --min/--max")
    cluster = target.cluster(context, kubeconfig, namespace, state)
    if cluster is not None:
        from servectl.backends.kubernetes.client import ClientError as KubeClientError

        try:
            updated = cluster.client.scale(
                cluster.namespace,
                name,
                replicas=replicas,
                min_replicas=min_replicas,
                max_replicas=max_replicas,
            )
        except KubeClientError as exc:
            raise target.refused(exc) from None
        finally:
            cluster.close()
        a = updated.spec.autoscaling
        out.print(f"modelservice/{name} scaled: min {a.min_replicas}, max {a.max_replicas}")
        return
    namespace = namespace or "default"
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
    namespace: NamespaceOption = None,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="On a cluster: wait until it is gone (the controller's finalizer has "
            "removed what it ran). The local runtime's store forgets it at once.",
        ),
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=1, help="Seconds --wait waits at most.")
    ] = 120.0,
    state: StateDirOption = None,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Delete a service: its replicas stop (in-flight requests finish) and its ports close."""
    from servectl.backends.local.client import ClientError

    cluster = target.cluster(context, kubeconfig, namespace, state)
    if cluster is not None:
        _delete_kube(cluster, name, wait, timeout)
        return
    namespace = namespace or "default"
    client = _client(state_dir(state))
    try:
        client.delete(namespace, name)
    except ClientError as exc:
        raise fail(str(exc)) from None
    finally:
        client.close()
    out.print(f"modelservice/{name} deleted")


def _delete_kube(cluster: Cluster, name: str, wait: bool, timeout_s: float) -> None:
    from servectl.backends.kubernetes.client import ClientError

    try:
        cluster.client.delete(cluster.namespace, name)
        out.print(f"modelservice/{name} deleted", highlight=False)
        if wait and not cluster.client.wait_deleted(cluster.namespace, name, timeout_s):
            raise fail(
                f"{cluster.namespace}/{name} is still there after {timeout_s:g} s: its "
                "finalizer (servectl.io/cleanup) waits for servectl's controller to remove "
                "what it ran; is the controller running in the cluster?",
                1,
            )
    except ClientError as exc:
        raise target.refused(exc) from None
    finally:
        cluster.close()


# --------------------------------------------------------------------------- events, logs


def events(
    name: NameArg,
    namespace: NamespaceOption = None,
    follow: Annotated[
        bool, typer.Option("-f", "--follow", help="Keep printing new events.")
    ] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, help="How many of the newest.")] = 50,
    output: console.OutputOption = Output.TABLE,
    state: StateDirOption = None,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """The service's events: scaling, weight changes, rollout phases, refused commands.

    On a cluster: the core v1 Events whose involvedObject is the ModelService (the
    cluster keeps them for an hour by default)."""
    from servectl.backends.local.client import ClientError

    cluster = target.cluster(context, kubeconfig, namespace, state)
    if cluster is not None:
        _events_kube(cluster, name, follow, limit, output)
        return
    namespace = namespace or "default"
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


def _event_record(e: Any) -> dict[str, Any]:
    return {"id": e.id, "time": e.time, "type": e.type, "reason": e.reason, "message": e.message}


def _events_kube(cluster: Cluster, name: str, follow: bool, limit: int, output: Output) -> None:
    from servectl.backends.kubernetes.client import ClientError

    namespace = cluster.namespace
    seen: set[tuple[str, int, float]] = set()

    def show(batch: list[Any]) -> None:
        fresh = [e for e in batch if (e.id, e.count, e.time) not in seen]
        if output.machine:
            console.print_records([_event_record(e) for e in fresh], output)
        else:
            for e in fresh:
                out.print(
                    f"{_when(e.time)}  {e.type:<7} {e.reason:<20} {e.message}",
                    highlight=False,
                    markup=False,
                )
        seen.update((e.id, e.count, e.time) for e in fresh)

    try:
        cluster.client.object(namespace, name)
        show(cluster.client.events(namespace, name, limit=limit))
        while follow:
            time.sleep(KUBE_POLL_S)
            show(cluster.client.events(namespace, name, limit=limit))
    except ClientError as exc:
        raise target.refused(exc) from None
    except KeyboardInterrupt:
        pass
    finally:
        cluster.close()


def _not_on_a_cluster(cluster: Cluster, verb: str, command: str) -> typer.Exit:
    cluster.close()
    return fail(
        f"servectl {verb} reads the local runtime; on a cluster use:\n  {command}",
        1,
    )


def logs(
    name: NameArg,
    namespace: NamespaceOption = None,
    replica: Annotated[
        str | None, typer.Option("--replica", help="One replica (default: every replica).")
    ] = None,
    tail: Annotated[int, typer.Option("--tail", min=1, help="Lines per replica.")] = 20,
    state: StateDirOption = None,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """The model servers' logs (each replica's, newest lines), from the state directory.

    On a cluster it prints the kubectl command that shows them."""
    cluster = target.cluster(context, kubeconfig, namespace, state)
    if cluster is not None:
        args = (
            ["logs", replica, "--all-containers", f"--tail={tail}"]
            if replica is not None
            else [
                "logs",
                "-l",
                f"{_LABEL_SERVICE}={name}",
                "--all-containers",
                "--prefix",
                f"--tail={tail}",
            ]
        )
        raise _not_on_a_cluster(cluster, "logs", cluster.kubectl(*args))
    namespace = namespace or "default"
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
    namespace: NamespaceOption = None,
    output: console.OutputOption = Output.TABLE,
    state: StateDirOption = None,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Per revision: replicas, CPU, GPU duty cycle, requests/s, p99 (last tick's metrics).

    On a cluster it prints the kubectl command that shows the pods' CPU and memory."""
    cluster = target.cluster(context, kubeconfig, namespace, state)
    if cluster is not None:
        selector = f"{_LABEL_SERVICE}={name}" if name is not None else _LABEL_SERVICE
        command = cluster.kubectl("top", "pods", "-l", selector)
        raise _not_on_a_cluster(cluster, "top", command)
    namespace = namespace or "default"
    client = _client(state_dir(state))
    try:
        rows = [r for r in client.services(namespace) if name is None or r.name == name]
        cycles = {r.name: client.store.get_cycle(r.namespace, r.name) for r in rows}
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
                    "cpuCores": s.get("cpuUsageCores"),
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
    name: str,
    namespace: str | None,
    state: Path | None,
    op: str,
    version: int | None = None,
    context: str | None = None,
    kubeconfig: Path | None = None,
) -> None:
    from servectl.backends.local.client import ClientError
    from servectl.rollout.machine import Op

    cluster = target.cluster(context, kubeconfig, namespace, state)
    if cluster is not None:
        _request_kube(cluster, name, Op(op), version)
        return
    namespace = namespace or "default"
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


def _request_kube(cluster: Cluster, name: str, op: Any, version: int | None) -> None:
    from servectl.backends.kubernetes.client import ClientError

    try:
        request = cluster.client.rollout(cluster.namespace, name, op, version)
    except ClientError as exc:
        raise target.refused(exc) from None
    finally:
        cluster.close()
    if request.id is None:
        out.print(
            f"modelservice/{name}: rollout to v{version} requested (spec.model.version)",
            highlight=False,
        )
        return
    out.print(
        f"modelservice/{name}: {op} requested"
        + (f" (version {version})" if version is not None else "")
        + f", command {request.id}",
        highlight=False,
    )
    if request.replaced is not None:
        err.print(
            f"note: the previous command ({request.replaced}) had not been carried out yet; "
            "this one replaces it",
            highlight=False,
        )


def rollout_start(
    name: NameArg,
    version: Annotated[int, typer.Option("--version", min=0, help="The version to roll out.")],
    namespace: NamespaceOption = None,
    state: StateDirOption = None,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Start a rollout to VERSION with the service's strategy (canary, abTest, blueGreen).

    On a cluster, VERSION becomes spec.model.version (as a deploy of it would do)."""
    _queue(name, namespace, state, "start", version, context, kubeconfig)


def rollout_promote(
    name: NameArg,
    full: Annotated[bool, typer.Option("--full", help="Skip the remaining steps.")] = False,
    namespace: NamespaceOption = None,
    state: StateDirOption = None,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Go past the current pause or analysis (--full: straight to 100 %)."""
    _queue(name, namespace, state, "promote-full" if full else "promote", None, context, kubeconfig)


def _simple(op: str, doc: str) -> Any:
    def command(
        name: NameArg,
        namespace: NamespaceOption = None,
        state: StateDirOption = None,
        context: ContextOption = None,
        kubeconfig: KubeconfigOption = None,
    ) -> None:
        _queue(name, namespace, state, op, None, context, kubeconfig)

    command.__doc__ = doc
    return command


rollout_abort = _simple("abort", "Stop the rollout: all traffic back to the stable revision.")
rollout_pause = _simple("pause", "Hold the rollout at its current step.")
rollout_resume = _simple("resume", "Continue a paused rollout.")
rollout_retry = _simple("retry", "Start an aborted rollout again from its first step.")
rollout_undo = _simple("undo", "Roll back to the previous version (a rollout back to it).")


def _rollout_record(status: dict[str, Any]) -> dict[str, Any]:
    """``rollout status``'s record from a ModelService status."""
    rollout = status.get("rollout") or {}
    return {
        "phase": rollout.get("phase", "Idle"),
        "step": rollout.get("step"),
        "stableVersion": rollout.get("stableVersion"),
        "canaryVersion": rollout.get("canaryVersion"),
        "weights": {r["name"]: r.get("weight", 0) for r in status.get("revisions", [])},
        "message": rollout.get("message", ""),
        "verdicts": rollout.get("verdicts", []),
    }


def _rollout_line(record: dict[str, Any]) -> str:
    return (
        f"{record['phase']} step {record['step']}  "
        + " ".join(f"{k}:{v}%" for k, v in record["weights"].items())
        + f"  {record['message']}"
    )


ROLLOUT_OVER = ("Idle", "Completed", "Aborted", "Degraded")


def rollout_status(
    name: NameArg,
    namespace: NamespaceOption = None,
    watch: Annotated[bool, typer.Option("-w", "--watch", help="Follow until it finishes.")] = False,
    output: console.OutputOption = Output.TABLE,
    state: StateDirOption = None,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Where the rollout stands: phase, step, weights, verdicts (--watch to follow)."""
    from servectl.backends.local.client import ClientError

    cluster = target.cluster(context, kubeconfig, namespace, state)
    if cluster is not None:
        _rollout_status_kube(cluster, name, watch, output)
        return
    namespace = namespace or "default"
    client = _client(state_dir(state))
    last = None
    try:
        try:
            client.get(namespace, name)
        except ClientError as exc:
            raise fail(str(exc)) from None
        while True:
            status = client.status(namespace, name) or {}
            record = _rollout_record(status)
            line = _rollout_line(record)
            if output.machine and not watch:
                console.print_records([record], output)
                return
            if line != last:
                out.print(f"{_when(time.time())}  {line}", highlight=False, markup=False)
                last = line
            if not watch or record["phase"] in ROLLOUT_OVER:
                return
            time.sleep(1.0)
    except KeyboardInterrupt:
        pass
    finally:
        client.close()


def _rollout_status_kube(cluster: Cluster, name: str, watch: bool, output: Output) -> None:
    from servectl.backends.kubernetes.client import ClientError

    last = None
    try:
        while True:
            status = cluster.client.status(cluster.namespace, name) or {}
            record = _rollout_record(status)
            if output.machine and not watch:
                console.print_records([record], output)
                return
            line = _rollout_line(record)
            if line != last:
                out.print(f"{_when(time.time())}  {line}", highlight=False, markup=False)
                last = line
            if not watch or record["phase"] in ROLLOUT_OVER:
                return
            time.sleep(KUBE_POLL_S)
    except ClientError as exc:
        raise target.refused(exc) from None
    except KeyboardInterrupt:
        pass
    finally:
        cluster.close()


def rollout_history(
    name: NameArg,
    namespace: NamespaceOption = None,
    output: console.OutputOption = Output.TABLE,
    state: StateDirOption = None,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Finished rollouts, oldest first: versions, outcome, verdicts.

    On a cluster: the current (or last) rollout from status; the history of finished
    rollouts is kept by the local runtime only."""
    cluster = target.cluster(context, kubeconfig, namespace, state)
    if cluster is not None:
        _rollout_history_kube(cluster, name, output)
        return
    namespace = namespace or "default"
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


def _rollout_history_kube(cluster: Cluster, name: str, output: Output) -> None:
    from servectl.backends.kubernetes import client as kube_client

    try:
        records = cluster.client.history(cluster.namespace, name)
    except kube_client.ClientError as exc:
        raise target.refused(exc) from None
    finally:
        cluster.close()
    err.print(f"note: {kube_client.HISTORY_NOTE}", highlight=False, markup=False)
    console.emit(
        output,
        title=f"Rollouts of {name} (status.rollout)",
        header=["#", "TIME", "FROM", "TO", "OUTCOME", "MESSAGE"],
        rows=[
            [
                "-",
                "-",
                f"v{r.get('stableVersion')}",
                f"v{r['canaryVersion']}" if r.get("canaryVersion") is not None else "-",
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
