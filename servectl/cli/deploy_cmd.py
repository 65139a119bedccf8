"""``servectl deploy``: create or update ModelServices (and the ScalingPolicies they use),
on the local runtime or, with ``--context``, a cluster.

Written once against :class:`servectl.backends.client.ServiceClient` (``target.session``
picks the runtime). Every write checks first and changes nothing on error; the runtime's
controller applies the change at its next cycle.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from servectl.backends.client import Elsewhere, ServiceClient
from servectl.cli import target
from servectl.cli.console import err, fail, out
from servectl.cli.target import ContextOption, KubeconfigOption, NamespaceOption, StateDirOption


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
    service answers TF Serving's REST and gRPC APIs on its own ports, which deploy
    prints once the controller has given them (`servectl get` shows them too; `servectl
    up --rest-port` picks where they start).

    \b
    On a cluster (--context): the ModelService is applied (server-side apply) and the
    controller in the cluster acts on it; the version is required and not looked for:
      servectl deploy -f service.yaml --context prod -n ml
    """
    from servectl import specfile
    from servectl.api import models, validation

    target.wanted(context, kubeconfig, state)  # conflicting options: refused before any work
    policies: list[models.ScalingPolicy] = []
    services: list[models.ModelService] = []
    base_dir = Path.cwd()
    if file is not None:
        if name is not None or model_path is not None:
            raise fail("give either -f FILE or NAME --model-path DIR, not both")
        try:
            docs = specfile.load_file(file, probe_policies=True)
        except (OSError, ValueError) as exc:
            raise fail(specfile.error_text(file, exc)) from None
        services = [d for d in docs if isinstance(d, models.ModelService)]
        policies = [d for d in docs if isinstance(d, models.ScalingPolicy)]
        base_dir = file.resolve().parent
        if not services:
            raise fail(f"{file}: no ModelService in it (kind: ModelService)")
    elif name is None or model_path is None:
        raise fail("give NAME and --model-path DIR (or -f FILE); see --help")
    with target.session(state, context, kubeconfig) as client:
        if name is not None and model_path is not None:
            signals: list[dict[str, Any]] = [{"type": "cpu", "targetUtilization": target_cpu}]
            if latency_p99 is not None:
                signals.append({"type": "latency", "percentile": 99, "targetMs": latency_p99})
            model = client.model_source(model_path, model_name)
            if version is not None:
                model["version"] = version
            doc = {
                "apiVersion": "servectl.io/v1alpha1",
                "kind": "ModelService",
                # No -n: the runtime's default namespace (on a cluster, the context's).
                "metadata": {"name": name, **({"namespace": namespace} if namespace else {})},
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
        models_by_name = {s.metadata.name: s.spec.model.name for s in services}
        for done in client.deploy_resources(
            services, policies, base_dir=base_dir, namespace=namespace
        ):
            if done.kind != "ModelService":
                out.print(f"{done.kind.lower()}/{done.name} applied", highlight=False)
                continue
            what = "created" if done.created else "configured" if done.changed else "unchanged"
            if done.rollout_to is not None:
                what += (
                    f"; rollout to version {done.rollout_to} queued"
                    if done.queued
                    else f"; rollout to v{done.rollout_to} requested"
                )
            out.print(f"modelservice/{done.name} {what}", highlight=False)
            for note in done.notes:
                err.print(f"note: {note}", highlight=False, markup=False)
            _say_endpoints(client, done.namespace, done.name, models_by_name.get(done.name))
        warning = client.controller_warning()
    if warning is not None:
        err.print(warning, highlight=False)


ENDPOINTS_WAIT_S = 5.0
"""How long deploy waits for a running controller to give a new service its ports (it
does at its next tick, every second)."""


def _say_endpoints(client: ServiceClient, namespace: str, name: str, model: str | None) -> None:
    """Where the service answers, once its runtime has given it ports on this machine."""
    try:
        found = client.await_endpoints(namespace, name, ENDPOINTS_WAIT_S)
    except Elsewhere:  # a cluster: its Gateway routes the service
        return
    if found is None:
        err.print(
            "  ports: the controller gives them at its next tick; `servectl get` shows them",
            highlight=False,
        )
        return
    out.print(
        f"  REST {found.rest_url}/v1/models/{model or name}   gRPC {found.grpc_address}",
        highlight=False,
    )
