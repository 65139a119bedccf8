"""The CLI with ``--context``, against the real control plane: what ``deploy``, ``get``,
``rollout``, ``scale`` and ``delete`` write to the ModelService and read back, the input
they refuse (naming the field, the object untouched), the cluster's errors as one line,
and one run with the controller in-process: ``rollout status`` shows what it wrote.

No controller runs in the other tests, so they check the resource, not status progress.
"""

from __future__ import annotations

import json
import socket
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import Result
from typer.testing import CliRunner

from servectl.backends.kubernetes import objects as obj
from servectl.backends.kubernetes.kube import (
    MODELSERVICES,
    SCALINGPOLICIES,
    Kube,
    KubeError,
    load_api_client,
)
from servectl.cli import main as cli_main
from servectl.testing.k8s import CONTEXT, ControlPlane, wait_for

from .test_kube_controller import Harness


@pytest.fixture
def kube(control_plane: ControlPlane) -> Iterator[Kube]:
    api = load_api_client(str(control_plane.kubeconfig), CONTEXT)
    try:
        yield Kube(api)
    finally:
        api.close()


@pytest.fixture(autouse=True)
def no_context_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SERVECTL_CONTEXT", raising=False)


def servectl(
    plane: ControlPlane, namespace: str, *args: str | Path, kubeconfig: Path | None = None
) -> Result:
    """``servectl ARGS --kubeconfig K --context servectl-test -n NAMESPACE``, in-process."""
    return CliRunner().invoke(
        cli_main.app,
        [
            *(str(a) for a in args),
            "--kubeconfig",
            str(kubeconfig or plane.kubeconfig),
            "--context",
            CONTEXT,
            "-n",
            namespace,
        ],
    )


def spec_file(tmp_path: Path, version: int | None = 1, **autoscaling: Any) -> Path:
    """A ModelService (no namespace: -n places it) and the ScalingPolicy it refers to."""
    model: dict[str, Any] = {"name": "x", "basePath": "s3://models/x"}
    if version is not None:
        model["version"] = version
    auto: dict[str, Any] = {"minReplicas": 1, "maxReplicas": 4, "policy": {"ref": "steady"}}
    auto.update(autoscaling)
    docs = [
        {
            "apiVersion": "servectl.io/v1alpha1",
            "kind": "ScalingPolicy",
            "metadata": {"name": "steady"},
            "spec": {"description": "what the engine recommends", "cel": "recommended"},
        },
        {
            "apiVersion": "servectl.io/v1alpha1",
            "kind": "ModelService",
            "metadata": {"name": "x"},
            "spec": {"model": model, "autoscaling": auto},
        },
    ]
    path = tmp_path / f"x-{version}.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def ok(result: Result) -> str:
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    return result.output


def refused(result: Result, code: int = 2) -> str:
    assert result.exit_code == code, result.output
    lines = result.output.strip().splitlines()
    assert lines and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
    return result.output


# ---------------------------------------------------------------------------------------


def test_deploy_get_abort_redeploy_scale_delete(
    control_plane: ControlPlane, namespace: str, kube: Kube, tmp_path: Path
) -> None:
    run = lambda *args: servectl(control_plane, namespace, *args)  # noqa: E731

    out = ok(run("deploy", "-f", spec_file(tmp_path, 1)))
    assert out.splitlines() == ["scalingpolicy/steady applied", "modelservice/x created"]
    live = kube.get(MODELSERVICES, namespace, "x")
    assert live["spec"]["model"] == {"name": "x", "basePath": "s3://models/x", "version": 1}
    assert kube.get(SCALINGPOLICIES, namespace, "steady")["spec"]["cel"] == "recommended"
    managers = {(m["manager"], m["operation"]) for m in live["metadata"]["managedFields"]}
    assert ("servectl-cli", "Apply") in managers

    listed = [json.loads(line) for line in ok(run("get", "-o", "json")).splitlines()]
    assert [d["metadata"]["name"] for d in listed] == ["x"]
    assert listed[0]["spec"]["model"]["version"] == 1
    assert "managedFields" not in listed[0]["metadata"]
    table = ok(run("get"))
    assert "NAME" in table and "x" in table and "Idle" in table

    aborted = ok(run("rollout", "abort", "x", "--no-wait"))  # no controller runs here
    annotation = kube.get(MODELSERVICES, namespace, "x")["metadata"]["annotations"][obj.COMMAND]
    command = json.loads(annotation)
    assert command["op"] == "abort" and command["version"] is None
    assert len(command["id"]) == 32 and int(command["id"], 16) >= 0
    assert aborted.strip() == f"modelservice/x: abort requested, command {command['id']}"

    moved = ok(run("deploy", "-f", spec_file(tmp_path, 2)))
    assert "modelservice/x configured; rollout to v2 requested" in moved
    live = kube.get(MODELSERVICES, namespace, "x")
    assert live["spec"]["model"]["version"] == 2
    assert live["metadata"]["generation"] == 2
    # The apply owns the spec, not the command annotation: it is still there.
    assert json.loads(live["metadata"]["annotations"][obj.COMMAND])["id"] == command["id"]
    again = ok(run("deploy", "-f", spec_file(tmp_path, 2)))
    assert "modelservice/x unchanged" in again

    assert ok(run("scale", "x", "--max", "6")).strip() == "modelservice/x scaled: min 1, max 6"
    assert kube.get(MODELSERVICES, namespace, "x")["spec"]["autoscaling"]["maxReplicas"] == 6

    assert ok(run("events", "x", "-o", "json")) == ""  # no controller, no events
    assert ok(run("rollout", "status", "x")).strip().endswith("Idle step None")

    assert ok(run("delete", "x", "--wait", "--timeout", "30")).strip() == "modelservice/x deleted"
    with pytest.raises(KubeError) as gone:
        kube.get(MODELSERVICES, namespace, "x")
    assert gone.value.not_found
    missing = refused(run("get", "x"))
    assert f"no ModelService {namespace}/x; `servectl get -n {namespace}" in missing


def test_bad_input_is_refused_with_the_field_and_the_object_unchanged(
    control_plane: ControlPlane, namespace: str, kube: Kube, tmp_path: Path
) -> None:
    run = lambda *args: servectl(control_plane, namespace, *args)  # noqa: E731
    ok(run("deploy", "-f", spec_file(tmp_path, 1)))
    before = kube.get(MODELSERVICES, namespace, "x")["metadata"]["resourceVersion"]

    bounds = refused(run("deploy", "-f", spec_file(tmp_path, 1, minReplicas=5, maxReplicas=2)))
    assert "spec.autoscaling.minReplicas" in bounds
    no_version = refused(run("deploy", "-f", spec_file(tmp_path, None)))
    assert "spec.model.version: required on Kubernetes" in no_version
    flags = refused(run("deploy", "y", "--model-path", "s3://models/y"))
    assert "spec.model.version" in flags
    broken = tmp_path / "cel.yaml"
    broken.write_text(
        textwrap.dedent(
            """\
            apiVersion: servectl.io/v1alpha1
            kind: ModelService
            metadata: {name: x}
            spec:
              model: {name: x, basePath: s3://models/x, version: 3}
              autoscaling: {policy: {cel: "signals.cpu_utilization >"}}
            """
        )
    )
    assert "spec.autoscaling.policy.cel" in refused(run("deploy", "-f", broken))
    local_path = refused(run("deploy", "y", "--model-path", "models/y", "--version", "1"))
    assert "spec.model.basePath" in local_path
    scale = refused(run("scale", "x", "--min", "9"))
    assert "spec.autoscaling.minReplicas" in scale
    elsewhere = tmp_path / "elsewhere.yaml"
    elsewhere.write_text(
        "apiVersion: servectl.io/v1alpha1\nkind: ModelService\n"
        "metadata: {name: x, namespace: somewhere-else}\n"
        "spec: {model: {name: x, basePath: s3://models/x, version: 3}}\n"
    )
    assert "metadata.namespace is somewhere-else but -n says" in refused(
        run("deploy", "-f", elsewhere)
    )

    assert kube.get(MODELSERVICES, namespace, "x")["metadata"]["resourceVersion"] == before
    names = [d["metadata"]["name"] for d in kube.list(MODELSERVICES, namespace)["items"]]
    assert names == ["x"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_clusters_errors_are_one_line(
    control_plane: ControlPlane, namespace: str, kube: Kube, tmp_path: Path
) -> None:
    config = yaml.safe_load(control_plane.kubeconfig.read_text())

    unknown = CliRunner().invoke(
        cli_main.app, ["get", "--kubeconfig", str(control_plane.kubeconfig), "--context", "nope"]
    )
    assert unknown.exit_code == 2
    assert f"--context nope: no such context in {control_plane.kubeconfig}" in unknown.output
    assert f"(it has {CONTEXT})" in unknown.output

    down = tmp_path / "down.kubeconfig"
    config_down = json.loads(json.dumps(config))
    config_down["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{_closed_port()}"
    down.write_text(yaml.safe_dump(config_down))
    unreachable = refused(servectl(control_plane, namespace, "get", kubeconfig=down), code=1)
    assert "cannot reach the Kubernetes API server https://127.0.0.1:" in unreachable

    absent = refused(servectl(control_plane, "no-such-ns", "deploy", "-f", spec_file(tmp_path)))
    assert "namespace no-such-ns does not exist" in absent

    # A service account with no role: 403, said as one line with what the CLI needs.
    kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        body={"metadata": {"name": "nobody"}},
    )
    token = kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/nobody/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )["status"]["token"]
    nobody = json.loads(json.dumps(config))
    nobody["users"][0]["user"] = {"token": token}
    forbidden_config = tmp_path / "nobody.kubeconfig"
    forbidden_config.write_text(yaml.safe_dump(nobody))
    forbidden = refused(
        servectl(control_plane, namespace, "get", kubeconfig=forbidden_config), code=1
    )
    assert forbidden.startswith(f"error: forbidden (context {CONTEXT}): ")
    assert f"system:serviceaccount:{namespace}:nobody" in forbidden
    assert "the CLI needs get, list, create, patch and delete on modelservices" in forbidden


def test_rollout_status_shows_the_phase_the_controller_wrote(
    control_plane: ControlPlane, namespace: str, kube: Kube, tmp_path: Path
) -> None:
    """The controller in-process (no Prometheus: with metrics missing a canary starts but
    holds its weight at 0, so the phase it writes stays Progressing until told)."""
    run = lambda *args: servectl(control_plane, namespace, *args)  # noqa: E731
    harness = Harness(control_plane, namespace, kube)
    harness.controller()
    try:

        def write(version: int) -> Path:
            path = tmp_path / f"canary-{version}.yaml"
            doc = {
                "apiVersion": "servectl.io/v1alpha1",
                "kind": "ModelService",
                "metadata": {"name": "cn"},
                "spec": {
                    "model": {"name": "cn", "basePath": "s3://models/cn", "version": version},
                    "autoscaling": {"minReplicas": 2, "maxReplicas": 6},
                    "rollout": {
                        "strategy": "canary",
                        "steps": [{"setWeight": 25}, {"pause": {}}, {"setWeight": 100}],
                        "drainSeconds": 1,
                    },
                },
            }
            path.write_text(yaml.safe_dump(doc))
            return path

        def status() -> dict[str, Any]:
            record: dict[str, Any] = json.loads(ok(run("rollout", "status", "cn", "-o", "json")))
            return record

        ok(run("deploy", "-f", write(1)))
        wait_for(
            lambda: harness.ready_pods("cn-v1") == 2 or None,
            timeout_s=45,
            what="cn-v1 ready",
            interval_s=0.2,
        )
        assert "modelservice/cn configured; rollout to v2 requested" in ok(
            run("deploy", "-f", write(2))
        )
        progressing = wait_for(
            lambda: ((s := status())["phase"] == "Progressing" and s) or None,
            timeout_s=45,
            what="the controller to start the rollout to v2",
            interval_s=0.3,
        )
        written = kube.get(MODELSERVICES, namespace, "cn")["status"]["rollout"]
        assert progressing["phase"] == written["phase"] == "Progressing"
        assert (progressing["stableVersion"], progressing["canaryVersion"]) == (1, 2)
        assert progressing["step"] == written["step"] == 0
        assert progressing["message"] == written["message"]
        assert set(progressing["weights"]) <= {"cn-v1", "cn-v2"}
        table = ok(run("get"))
        assert "Progressing (step 0)" in table

        # A command through the annotation: carried out once, its id in status.loop.command.
        aborted = ok(run("rollout", "abort", "cn", "--no-wait"))
        ident = aborted.strip().rsplit(" ", 1)[-1]
        wait_for(
            lambda: (
                (
                    kube.get(MODELSERVICES, namespace, "cn")["status"]
                    .get("loop", {})
                    .get("command")
                    == ident
                )
                or None
            ),
            timeout_s=30,
            what="the controller to carry the abort out",
            interval_s=0.3,
        )
        back = wait_for(
            lambda: ((s := status())["phase"] == "Aborted" and s) or None,
            timeout_s=30,
            what="the rollout aborted",
            interval_s=0.3,
        )
        assert back["stableVersion"] == 1
        events = ok(run("events", "cn"))
        assert "Progressing" in events and "Aborted" in events

        # What the rollout's state refuses is refused at once, nothing written (issue 25,
        # item 3); a command it allows waits until the controller has carried it out.
        before = kube.get(MODELSERVICES, namespace, "cn")["metadata"]["annotations"]
        assert "abort refused: no rollout is running" in refused(run("rollout", "abort", "cn"))
        assert kube.get(MODELSERVICES, namespace, "cn")["metadata"]["annotations"] == before
        retried = ok(run("rollout", "retry", "cn", "--timeout", "60"))
        assert "modelservice/cn: retry carried out: Progressing" in retried
    finally:
        for running in harness.running:
            running.stop()
