"""deploy/ against a real API server (the ``control_plane`` fixture): everything the Helm
chart renders is accepted by server-side apply in dry-run, the controller's pod passes the
"restricted" Pod Security Standard, kubectl shows ModelServices with the CRD's printer
columns and explains their spec, and servectl's controller does its work under exactly the
chart's RBAC, with its service account's token.

Helm and kubectl come from ``scripts/k8s-clients``; without them (or without the control
plane's binaries) the tests skip, or fail with ``SERVECTL_REQUIRE_K8S=1``. What needs no
API server is in tests/unit/test_deploy_chart.py.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from kubernetes.client import CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from servectl.testing.k8s import CONTEXT, ControlPlane, wait_for

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "deploy" / "helm" / "servectl"
CRD = ROOT / "deploy" / "crds" / "modelservices.servectl.io.yaml"
EXAMPLE = ROOT / "deploy" / "examples" / "half-plus-two-minimal.yaml"
RELEASE = "servectl"
CONTROLLER = "servectl-controller"
FIELD_MANAGER = "servectl-deploy-test"
REQUIRE_ENV = "SERVECTL_REQUIRE_K8S"
# Rendered only when their values are on, typed by CRDs of other projects.
MONITORING = [
    "--set",
    "metrics.serviceMonitor.enabled=true",
    "--set",
    "prometheusRule.enabled=true",
]
MONITORING += ["--set", "grafanaDashboard.enabled=true"]
OPERATOR_KINDS = {"PrometheusRule", "ServiceMonitor"}


def _run(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=120, check=False
    )


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    command = shlex.join(str(a) for a in result.args)
    assert result.returncode == 0, f"{command}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def clients() -> Path:
    """helm and kubectl from scripts/k8s-clients (skip, or fail in CI, without them)."""
    result = _run("bash", ROOT / "scripts" / "k8s-clients")
    if result.returncode != 0:
        message = f"scripts/k8s-clients could not provide helm/kubectl: {result.stderr[-500:]}"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{message} ({REQUIRE_ENV}=1)")
        pytest.skip(message)
    return Path(result.stdout.strip().splitlines()[-1])


def _render(clients: Path, namespace: str, *values: str) -> list[dict[str, Any]]:
    # The Gateway's name is required with the default traffic provider (values may set it).
    gateway = ("--set", "traffic.gateway.parentRef=infra/public")
    out = _ok(
        _run(
            clients / "helm",
            "template",
            RELEASE,
            CHART,
            "--namespace",
            namespace,
            *gateway,
            *values,
        )
    )
    return [d for d in yaml.safe_load_all(out) if d]


def _key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return "/".join(p for p in (obj["kind"], meta.get("namespace", ""), meta["name"]) if p)


def _dynamic(api: kubernetes.client.ApiClient) -> DynamicClient:
    return DynamicClient(api)  # type: ignore[no-untyped-call]


def _dry_run_apply(dynamic: DynamicClient, obj: dict[str, Any]) -> Any:
    """Server-side apply with dryRun=All: admission, validation and defaulting run, nothing
    is stored. Raises ResourceNotFoundError when the API server does not serve the kind."""
    resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    return dynamic.server_side_apply(  # type: ignore[no-untyped-call]
        resource,
        body=obj,
        namespace=obj["metadata"].get("namespace"),
        field_manager=FIELD_MANAGER,
        dry_run="All",
        force_conflicts=True,
    )


def _apply_all(dynamic: DynamicClient, objects: list[dict[str, Any]]) -> dict[str, Any]:
    """Dry-run every object; fail naming each one the API server refused."""
    accepted: dict[str, Any] = {}
    refused: list[str] = []
    for obj in objects:
        try:
            accepted[_key(obj)] = _dry_run_apply(dynamic, obj)
        except ApiException as error:
            refused.append(f"{_key(obj)}: {error.status} {error.body}")
    assert not refused, "refused by the API server:\n" + "\n".join(refused)
    return accepted


@pytest.fixture
def watched(k8s_api: kubernetes.client.ApiClient) -> Iterator[list[str]]:
    """Two real namespaces for watchNamespaces (a Role in a namespace that does not exist
    is refused even in dry-run)."""
    core = CoreV1Api(k8s_api)
    names = [f"watched-{uuid.uuid4().hex[:8]}-{s}" for s in ("a", "b")]
    for name in names:
        body: Any = {"metadata": {"name": name}}
        core.create_namespace(body)
    try:
        yield names
    finally:
        for name in names:
            core.delete_namespace(name)


def test_every_default_object_and_the_crds_are_accepted(
    clients: Path, k8s_api: kubernetes.client.ApiClient, namespace: str
) -> None:
    objects = _render(clients, namespace, "--include-crds")
    kinds = {o["kind"] for o in objects}
    assert {"CustomResourceDefinition", "ClusterRole", "Deployment", "Service"} <= kinds
    accepted = _apply_all(_dynamic(k8s_api), objects)
    # The API server's own view, defaults filled in: the Deployment kept its lockdown.
    deployment = accepted[f"Deployment/{namespace}/{CONTROLLER}"].to_dict()
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    # Dry-run: nothing was stored.
    with pytest.raises(ApiException) as missing:
        kubernetes.client.AppsV1Api(k8s_api).read_namespaced_deployment(CONTROLLER, namespace)
    assert missing.value.status == 404


def test_namespaced_variant_is_accepted(
    clients: Path, k8s_api: kubernetes.client.ApiClient, namespace: str, watched: list[str]
) -> None:
    objects = _render(clients, namespace, "--set", "watchNamespaces={" + ",".join(watched) + "}")
    roles = [o for o in objects if o["kind"] == "Role" and o["metadata"]["name"] == CONTROLLER]
    assert sorted(r["metadata"]["namespace"] for r in roles) == sorted(watched)
    assert not [o for o in objects if o["kind"].startswith("Cluster")]
    _apply_all(_dynamic(k8s_api), objects)


def test_a_broken_object_is_refused(
    clients: Path, k8s_api: kubernetes.client.ApiClient, namespace: str
) -> None:
    # The dry-run is not vacuous: the API server judges what it would store.
    [service] = [o for o in _render(clients, namespace) if o["kind"] == "Service"]
    service["spec"]["ports"][0]["targetPort"] = "not_a_port_name!"
    with pytest.raises(ApiException) as refused:
        _dry_run_apply(_dynamic(k8s_api), service)
    assert refused.value.status == 422


def test_monitoring_objects_are_accepted_where_their_crds_are(
    clients: Path, k8s_api: kubernetes.client.ApiClient, namespace: str
) -> None:
    dynamic = _dynamic(k8s_api)
    objects = [
        o
        for o in _render(clients, namespace, *MONITORING)
        if o["kind"] in OPERATOR_KINDS or o["kind"] == "ConfigMap"
    ]
    assert sorted(o["kind"] for o in objects) == ["ConfigMap", "PrometheusRule", "ServiceMonitor"]
    missing = []
    for obj in objects:
        try:
            _dry_run_apply(dynamic, obj)
        except ResourceNotFoundError:
            missing.append(f"{obj['kind']} ({obj['apiVersion']})")
        except ApiException as error:
            pytest.fail(f"{_key(obj)} refused: {error.status} {error.body}")
    if missing:
        pytest.skip(
            "the dashboard ConfigMap was accepted; not judged, since the Prometheus "
            f"Operator's CRDs are not installed here: {', '.join(missing)}"
        )


def test_the_controller_pod_passes_pod_security_restricted(
    clients: Path, k8s_api: kubernetes.client.ApiClient, namespace: str
) -> None:
    core = CoreV1Api(k8s_api)
    core.patch_namespace(
        namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    )
    objects = _render(clients, namespace)
    # The pod's service account must exist for admission; create it for real.
    account: Any = next(o for o in objects if o["kind"] == "ServiceAccount")
    core.create_namespaced_service_account(namespace, account)
    [deployment] = [o for o in objects if o["kind"] == "Deployment"]
    template = deployment["spec"]["template"]
    pod: Any = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**template["metadata"], "name": "controller-psa", "namespace": namespace},
        "spec": template["spec"],
    }
    # Control: a pod without the lockdown is refused, so PodSecurity admission is on.
    plain: Any = {
        "metadata": {"name": "plain"},
        "spec": {"containers": [{"name": "c", "image": "servectl.test/plain:1"}]},
    }
    try:
        core.create_namespaced_pod(namespace, plain, dry_run="All")
    except ApiException as error:
        assert error.status == 403 and "PodSecurity" in str(error.body), error.body
    else:
        pytest.skip("PodSecurity admission is off on this API server: nothing to judge with")
    try:
        core.create_namespaced_pod(namespace, pod, dry_run="All")
    except ApiException as error:
        pytest.fail(f"the controller's pod violates 'restricted': {error.body}")


# --- kubectl ------------------------------------------------------------------------------


def _kubectl(clients: Path, plane: ControlPlane, cache: Path, *args: str) -> str:
    return _ok(
        _run(
            clients / "kubectl",
            f"--kubeconfig={plane.kubeconfig}",
            f"--context={CONTEXT}",
            f"--cache-dir={cache}",
            *args,
        )
    )


def _printer_columns() -> list[dict[str, Any]]:
    crd = yaml.safe_load(CRD.read_text())
    [version] = [v for v in crd["spec"]["versions"] if v.get("served")]
    columns: list[dict[str, Any]] = version["additionalPrinterColumns"]
    return columns


def _cells(header: str, row: str) -> dict[str, str]:
    """A kubectl table row by the header's column offsets (an empty cell stays empty)."""
    starts = [i for i, ch in enumerate(header) if ch != " " and (i == 0 or header[i - 1] == " ")]
    ends = [*starts[1:], None]
    return {header[a:b].strip(): row[a:b].strip() for a, b in zip(starts, ends, strict=True)}


def test_kubectl_get_shows_the_crds_printer_columns(
    clients: Path,
    control_plane: ControlPlane,
    k8s_api: kubernetes.client.ApiClient,
    namespace: str,
    tmp_path: Path,
) -> None:
    _kubectl(clients, control_plane, tmp_path, "apply", "-n", namespace, "-f", str(EXAMPLE))
    name = yaml.safe_load(EXAMPLE.read_text())["metadata"]["name"]
    columns = _printer_columns()
    # Give the columns something to show: the status a controller would write.
    crd = yaml.safe_load(CRD.read_text())
    status_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    phases = status_schema["properties"]["rollout"]["properties"]["phase"].get("enum", [])
    phase = "Progressing" if "Progressing" in phases or not phases else phases[0]
    CustomObjectsApi(k8s_api).patch_namespaced_custom_object_status(
        "servectl.io",
        "v1alpha1",
        namespace,
        "modelservices",
        name,
        {
            "status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "Serving"}],
                "autoscaling": {"desiredReplicas": 3},
                "rollout": {"phase": phase},
                "traffic": f"{name}-v123:90 {name}-v124:10",
            }
        },
    )
    for wide in (False, True):
        out = _kubectl(
            clients,
            control_plane,
            tmp_path,
            "get",
            "modelservices",
            "-n",
            namespace,
            *(["-o", "wide"] if wide else []),
        )
        header, *rows = out.strip("\n").splitlines()
        shown = [c["name"].upper() for c in columns if wide or not c.get("priority")]
        assert header.split() == ["NAME", *shown], out
        [row] = rows
        cells = _cells(header, row)
        assert cells["NAME"] == name
        assert cells["READY"] == "True" and cells["DESIRED"] == "3" and cells["PHASE"] == phase
        assert cells["TRAFFIC"] == f"{name}-v123:90 {name}-v124:10", out  # README: weights
        assert cells["STRATEGY"] in ("", "<none>"), out  # the minimal example sets no rollout
    # The short name works too.
    assert name in _kubectl(clients, control_plane, tmp_path, "get", "ms", "-n", namespace)


def test_kubectl_explain_describes_the_spec(
    clients: Path, control_plane: ControlPlane, tmp_path: Path
) -> None:
    out = _kubectl(clients, control_plane, tmp_path, "explain", "modelservice.spec")
    assert "KIND:" in out and "ModelService" in out
    assert "servectl.io" in out
    crd = yaml.safe_load(CRD.read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    for field in spec["properties"]:
        assert f"\n  {field}\t" in out or f"\n  {field} " in out, f"{field} missing:\n{out}"


# --- the controller under exactly the chart's RBAC ----------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _controller_has_kubernetes() -> bool:
    import typer.main

    from servectl.cli.main import app

    group: Any = typer.main.get_command(app)
    return "kubernetes" in {p.name for p in group.commands["controller"].params}


@pytest.mark.parametrize("traffic", ["gateway", "service"])
def test_the_controller_works_with_exactly_the_charts_rbac(
    traffic: str,
    clients: Path,
    control_plane: ControlPlane,
    k8s_api: kubernetes.client.ApiClient,
    namespace: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """Least privilege that is also enough: the chart's objects applied for real (namespaced
    to this test's namespace, so that no cluster-wide grant outlives it), then servectl's
    controller run here with the chart's own arguments and the chart's service account's
    token. It must elect itself, create a revision, route it, write status and events,
    and clean up behind a deleted ModelService, without one request refused. The chart's
    ValidatingAdmissionPolicy (cluster-scoped, per release namespace, deleted after) is
    applied too: the same token is then refused whatever servectl does not own."""
    if not _controller_has_kubernetes():
        pytest.skip("servectl controller has no --kubernetes yet")
    probe, metrics = _free_port(), _free_port()
    objects = _render(
        clients,
        namespace,
        "--set",
        f"watchNamespaces={{{namespace}}}",
        "--set",
        f"ports.probe={probe}",
        "--set",
        f"ports.metrics={metrics}",
        "--set",
        "period=1",
        "--set",
        f"traffic.provider={traffic}",
    )
    assert not [o for o in objects if o["kind"].startswith("Cluster")]
    policies = [o for o in objects if o["kind"].startswith("ValidatingAdmissionPolicy")]
    assert len(policies) == 2, [o["kind"] for o in objects]
    dynamic = _dynamic(k8s_api)
    request.addfinalizer(lambda: _delete_all(dynamic, policies))
    for obj in objects:
        if obj["kind"] == "Deployment":
            continue  # the controller runs here instead
        resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        dynamic.server_side_apply(  # type: ignore[no-untyped-call]
            resource,
            body=obj,
            namespace=namespace,
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
        )
    [deployment] = [o for o in objects if o["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    # The service account's own token (the Python client has no impersonation).
    token_request: Any = {"spec": {"expirationSeconds": 3600}}
    token = CoreV1Api(k8s_api).create_namespaced_service_account_token(
        account, namespace, token_request
    )
    assert token.status is not None
    config = yaml.safe_load(control_plane.kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"token": token.status.token}
    kubeconfig = tmp_path / "controller.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    log_path = tmp_path / "controller.log"
    command = [sys.executable, "-m", "servectl.cli.main", "controller", "--kubernetes"]
    command += [f"--kubeconfig={kubeconfig}", f"--context={CONTEXT}", *args]
    env = {**os.environ, "POD_NAMESPACE": namespace, "POD_NAME": "controller-0"}
    with log_path.open("w") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        _exercise_the_controller(k8s_api, namespace, process, log_path, routes=traffic == "gateway")
        _refused_what_is_not_servectls(k8s_api, kubeconfig, namespace)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        # Checked even when the exercise failed: a refusal is then the likely cause.
        # The namespace's random suffix is taken out first: "74403d23" once read as a 403.
        lines = log_path.read_text().replace(namespace, "<namespace>").splitlines()
        refused = [line for line in lines if re.search(r"\b403\b|forbidden", line, re.IGNORECASE)]
        assert not refused, "refused under the chart's RBAC:\n" + "\n".join(refused[:10])


def _delete_all(dynamic: DynamicClient, objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        with contextlib.suppress(kubernetes.dynamic.exceptions.NotFoundError):
            resource.delete(name=obj["metadata"]["name"])


def _refused(call: Any, *args: Any) -> str:
    """The API server's message refusing ``call(*args)`` (a 403); fails if it is allowed."""
    try:
        call(*args)
    except ApiException as error:
        assert error.status == 403, (error.status, error.body)
        return str(error.body)
    pytest.fail(f"{call.__name__}{args[:2]} was allowed")


def _refused_what_is_not_servectls(
    admin_api: kubernetes.client.ApiClient, kubeconfig: Path, namespace: str
) -> None:
    """Issue 27, item 3: RBAC lets the controller patch pods and write Services and
    Deployments in the namespace; the admission policy refuses its token everything but
    servectl's own objects, and on pods everything but their deletion cost."""
    admin_core, admin_apps = CoreV1Api(admin_api), kubernetes.client.AppsV1Api(admin_api)
    mine = {"app.kubernetes.io/managed-by": "servectl"}

    def pod(name: str, labels: dict[str, str]) -> Any:
        container = {"name": "main", "image": "registry.example/app:1"}
        return {"metadata": {"name": name, "labels": labels}, "spec": {"containers": [container]}}

    admin_core.create_namespaced_pod(namespace, pod("foreign", {"app": "other"}))
    admin_core.create_namespaced_pod(namespace, pod("owned", mine))
    service: Any = {"metadata": {"name": "foreign"}, "spec": {"ports": [{"port": 80}]}}
    admin_core.create_namespaced_service(namespace, service)
    api = kubernetes.config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig), context=CONTEXT
    )
    try:
        core, apps = CoreV1Api(api), kubernetes.client.AppsV1Api(api)
        image = {"spec": {"containers": [{"name": "main", "image": "attacker.example/x:1"}]}}
        cost = {"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "7"}}}
        said = _refused(core.patch_namespaced_pod, "foreign", namespace, image)
        assert "managed-by=servectl" in said, said
        _refused(core.patch_namespaced_pod, "foreign", namespace, cost)
        said = _refused(core.patch_namespaced_pod, "owned", namespace, image)
        assert "pod-deletion-cost" in said, said
        relabel = {"metadata": {"labels": {"app.kubernetes.io/managed-by": "someone"}}}
        _refused(core.patch_namespaced_pod, "owned", namespace, relabel)
        core.patch_namespaced_pod("owned", namespace, cost)  # its own work: allowed
        _refused(core.delete_namespaced_service, "foreign", namespace)
        adopt = {"metadata": {"labels": mine}}
        _refused(core.patch_namespaced_service, "foreign", namespace, adopt)
        deployment = {
            "metadata": {"name": "foreign"},
            "spec": {
                "selector": {"matchLabels": {"app": "x"}},
                "template": pod("x", {"app": "x"}),
            },
        }
        _refused(apps.create_namespaced_deployment, namespace, deployment)
    finally:
        api.close()
    owned = admin_core.read_namespaced_pod("owned", namespace)
    assert owned.spec is not None and owned.spec.containers[0].image == "registry.example/app:1"
    assert owned.metadata is not None and owned.metadata.annotations
    assert owned.metadata.annotations["controller.kubernetes.io/pod-deletion-cost"] == "7"
    assert admin_core.read_namespaced_service("foreign", namespace).metadata is not None
    assert not admin_apps.list_namespaced_deployment(
        namespace, field_selector="metadata.name=foreign"
    ).items


def _exercise_the_controller(
    api: kubernetes.client.ApiClient,
    namespace: str,
    process: subprocess.Popen[bytes],
    log_path: Path,
    *,
    routes: bool,
) -> None:
    core = CoreV1Api(api)
    apps = kubernetes.client.AppsV1Api(api)
    custom = CustomObjectsApi(api)
    leases = kubernetes.client.CoordinationV1Api(api)

    def alive() -> None:
        if process.poll() is not None:
            tail = "\n".join(log_path.read_text().splitlines()[-15:])
            pytest.fail(f"the controller exited {process.returncode}:\n{tail}")

    model: Any = yaml.safe_load(EXAMPLE.read_text())
    model["spec"]["model"]["version"] = 1  # the Kubernetes controller cannot list basePath
    name = model["metadata"]["name"]
    custom.create_namespaced_custom_object(
        "servectl.io", "v1alpha1", namespace, "modelservices", model
    )
    selector = f"servectl.io/service={name}"

    def reconciled() -> bool:
        alive()
        ms: Any = custom.get_namespaced_custom_object(
            "servectl.io", "v1alpha1", namespace, "modelservices", name
        )
        has_status = bool((ms.get("status") or {}).get("conditions"))
        has_deployment = bool(
            apps.list_namespaced_deployment(namespace, label_selector=selector).items
        )
        found: Any = custom.list_namespaced_custom_object(
            "gateway.networking.k8s.io", "v1", namespace, "httproutes"
        )
        # Routes with Gateway traffic, none without (it may not even list them then).
        return has_status and has_deployment and bool(found["items"]) == routes

    wait_for(reconciled, timeout_s=90, what="the ModelService's revision, routes and status")
    lease = leases.read_namespaced_lease("servectl-controller", namespace)
    assert lease.spec is not None and lease.spec.holder_identity
    events = core.list_namespaced_event(namespace).items
    assert [e for e in events if e.involved_object.kind == "ModelService"], "no event written"
    custom.delete_namespaced_custom_object(
        "servectl.io", "v1alpha1", namespace, "modelservices", name
    )

    def cleaned_up() -> bool:
        alive()
        try:
            custom.get_namespaced_custom_object(
                "servectl.io", "v1alpha1", namespace, "modelservices", name
            )
        except ApiException as error:
            if error.status == 404:
                return not apps.list_namespaced_deployment(namespace, label_selector=selector).items
            raise
        return False

    wait_for(cleaned_up, timeout_s=60, what="the finalizer's clean-up")
