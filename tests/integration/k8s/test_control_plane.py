"""The control plane itself (servectl.testing.k8s): the apiserver answers, kwok's nodes and
pods behave as documented, the controller manager's controllers run, the CRDs serve, and
nothing outlives `stop`. ModelService behaviour is tested elsewhere."""

from __future__ import annotations

import datetime
import ipaddress
import os
import time
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from kubernetes.client import AppsV1Api, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from servectl.testing.k8s import (
    COMPONENTS,
    FAIL_ANNOTATION,
    K8S_VERSION,
    NODE_RESOURCES,
    READY_AT_ANNOTATION,
    READY_DELAY_ANNOTATION,
    ControlPlane,
    ControlPlaneError,
    find_binaries,
    gateway_api_crds,
    wait_for,
)

EXAMPLES = Path(__file__).resolve().parents[3] / "deploy" / "examples"
POD_CIDR = ipaddress.ip_network("10.244.0.0/16")


def _pod(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"containers": [{"name": "server", "image": "servectl.test/model:1"}]},
    }


def _condition(pod: Any, kind: str) -> bool:
    return any(c.type == kind and c.status == "True" for c in pod.status.conditions or [])


def _ready_at(pod: Any) -> datetime.datetime:
    """When kwok makes the pod Ready (the moment it stamped when it started the pod)."""
    return datetime.datetime.fromisoformat(pod.metadata.annotations[READY_AT_ANNOTATION])


def _gone(read: Any) -> bool:
    try:
        read()
    except ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


def _processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that mention ``text`` (a control plane's root)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(f"{entry.name}: {cmdline[:200]}")
    return found


# --- the apiserver and the nodes ----------------------------------------------------------


def test_apiserver_answers_with_the_pinned_version(
    control_plane: ControlPlane, k8s_api: kubernetes.client.ApiClient
) -> None:
    timings = ", ".join(f"{name} {s:.2f} s" for name, s in control_plane.timings.items())
    print(f"control plane start-up: {timings}")
    assert set(COMPONENTS) | {"total"} <= set(control_plane.timings)
    assert control_plane.server.startswith("https://127.0.0.1:")
    version = kubernetes.client.VersionApi(k8s_api).get_code()
    assert version.git_version == K8S_VERSION


def test_fake_nodes_are_ready_schedulable_and_sized(k8s_api: kubernetes.client.ApiClient) -> None:
    core = CoreV1Api(k8s_api)

    def ready_untainted() -> list[Any] | None:
        nodes = core.list_node(label_selector="type=kwok").items
        ok = all(_condition(n, "Ready") and not n.spec.taints for n in nodes)
        return nodes if len(nodes) == 2 and ok else None

    # The node lifecycle controller lifts its not-ready taint once kwok reports Ready.
    nodes = wait_for(ready_untainted, timeout_s=30, what="2 Ready kwok nodes without taints")
    for node in nodes:
        assert node.metadata.annotations["kwok.x-k8s.io/node"] == "fake"
        assert node.status.allocatable == NODE_RESOURCES
        assert node.status.capacity == NODE_RESOURCES


# --- kwok's pods --------------------------------------------------------------------------


def test_deployment_gets_ready_pods_on_kwok_nodes(
    k8s_api: kubernetes.client.ApiClient, namespace: str
) -> None:
    apps, core = AppsV1Api(k8s_api), CoreV1Api(k8s_api)
    labels = {"app": "web"}
    apps.create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "web", "image": "servectl.test/web:1"}]},
                },
            },
        },
    )
    wait_for(
        lambda: (apps.read_namespaced_deployment("web", namespace).status.ready_replicas or 0) == 2,
        timeout_s=30,
        what="deployment web with 2 ready replicas",
    )
    pods = core.list_namespaced_pod(namespace, label_selector="app=web").items
    assert len(pods) == 2
    for pod in pods:
        assert pod.status.phase == "Running"
        assert _condition(pod, "Ready")
        assert pod.spec.node_name.startswith("kwok-node-")
        assert ipaddress.ip_address(pod.status.pod_ip) in POD_CIDR
        assert pod.metadata.owner_references[0].kind == "ReplicaSet"
    assert len({pod.status.pod_ip for pod in pods}) == 2


def test_ready_after_annotation_delays_readiness(
    k8s_api: kubernetes.client.ApiClient, namespace: str
) -> None:
    core = CoreV1Api(k8s_api)
    core.create_namespaced_pod(namespace, _pod("slow", {READY_DELAY_ANNOTATION: "3s"}))
    core.create_namespaced_pod(namespace, _pod("quick"))
    running: dict[str, float] = {}
    ready: dict[str, float] = {}
    deadline = time.monotonic() + 30
    while len(ready) < 2 and time.monotonic() < deadline:
        for name in ("slow", "quick"):
            pod = core.read_namespaced_pod(name, namespace)
            now = time.monotonic()
            if pod.status.phase == "Running":
                running.setdefault(name, now)
            if _condition(pod, "Ready"):
                ready.setdefault(name, now)
        time.sleep(0.05)
    assert set(ready) == {"slow", "quick"}, f"not Ready in 30 s: {set(running) - set(ready)}"
    slow = ready["slow"] - running["slow"]
    quick = ready["quick"] - running["quick"]
    print(f"Running to Ready: slow (3s) {slow:.2f} s, quick (default) {quick:.2f} s")
    assert 2.5 <= slow <= 5.0
    assert quick <= 2.0
    stamped = core.read_namespaced_pod("slow", namespace).metadata.annotations
    assert READY_AT_ANNOTATION in stamped


def test_ready_delay_is_not_pushed_back_by_pod_updates(
    k8s_api: kubernetes.client.ApiClient, namespace: str
) -> None:
    core = CoreV1Api(k8s_api)
    core.create_namespaced_pod(namespace, _pod("busy", {READY_DELAY_ANNOTATION: "2s"}))
    wait_for(
        lambda: core.read_namespaced_pod("busy", namespace).status.phase == "Running",
        timeout_s=30,
        what="pod busy Running",
        interval_s=0.05,
    )
    running = time.monotonic()
    # Keep touching the pod (as a controller labelling it would) past its ready moment.
    touches = 0
    while not _condition(core.read_namespaced_pod("busy", namespace), "Ready"):
        assert time.monotonic() - running < 6, "the updates kept pushing readiness back"
        touches += 1
        core.patch_namespaced_pod("busy", namespace, {"metadata": {"labels": {"n": str(touches)}}})
        time.sleep(0.2)
    assert touches >= 5
    assert 1.5 <= time.monotonic() - running <= 4.0


def test_fail_annotation_keeps_a_pod_running_and_unready(
    k8s_api: kubernetes.client.ApiClient, namespace: str
) -> None:
    core = CoreV1Api(k8s_api)
    core.create_namespaced_pod(namespace, _pod("broken", {FAIL_ANNOTATION: "true"}))
    core.create_namespaced_pod(namespace, _pod("healthy"))
    # Once its twin, created at the same moment, is Ready, the broken one would have been.
    wait_for(
        lambda: _condition(core.read_namespaced_pod("healthy", namespace), "Ready"),
        timeout_s=30,
        what="pod healthy Ready",
    )
    # And half a second past the moment kwok stamped on it: it would be Ready by now.
    wait_for(
        lambda: (
            _ready_at(core.read_namespaced_pod("broken", namespace))
            < datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=0.5)
        ),
        timeout_s=10,
        what="the broken pod's ready moment long past",
    )
    broken = core.read_namespaced_pod("broken", namespace)
    assert broken.status.phase == "Running"
    assert broken.status.pod_ip
    assert not _condition(broken, "Ready")
    ready = next(c for c in broken.status.conditions if c.type == "Ready")
    assert "readiness probe failed" in ready.message
    assert broken.status.container_statuses[0].state.running is not None

    # Told to fail once Ready, a pod turns unready (a canary that starts failing).
    core.patch_namespaced_pod(
        "healthy", namespace, {"metadata": {"annotations": {FAIL_ANNOTATION: "true"}}}
    )
    wait_for(
        lambda: not _condition(core.read_namespaced_pod("healthy", namespace), "Ready"),
        timeout_s=10,
        what="pod healthy unready after the fail annotation",
    )
    assert core.read_namespaced_pod("healthy", namespace).status.phase == "Running"

    # And told to stop failing, the broken one recovers (its ready moment is long past).
    core.patch_namespaced_pod(
        "broken", namespace, {"metadata": {"annotations": {FAIL_ANNOTATION: None}}}
    )
    wait_for(
        lambda: _condition(core.read_namespaced_pod("broken", namespace), "Ready"),
        timeout_s=10,
        what="pod broken Ready once the fail annotation is gone",
    )


def test_deleted_pods_are_removed(k8s_api: kubernetes.client.ApiClient, namespace: str) -> None:
    core = CoreV1Api(k8s_api)
    core.create_namespaced_pod(namespace, _pod("doomed"))
    wait_for(
        lambda: core.read_namespaced_pod("doomed", namespace).status.phase == "Running",
        timeout_s=30,
        what="pod doomed Running",
    )
    started = time.monotonic()
    core.delete_namespaced_pod("doomed", namespace)  # default 30 s grace: kwok ignores it
    wait_for(
        lambda: _gone(lambda: core.read_namespaced_pod("doomed", namespace)),
        timeout_s=10,
        what="pod doomed removed",
    )
    assert time.monotonic() - started < 5


# --- the controller manager ---------------------------------------------------------------


def test_garbage_collector_removes_dependents_of_deleted_owners(
    k8s_api: kubernetes.client.ApiClient, namespace: str
) -> None:
    core = CoreV1Api(k8s_api)
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    reference = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner.metadata.uid,
    }
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "child", "ownerReferences": [reference]}}
    )
    core.delete_namespaced_config_map("owner", namespace, propagation_policy="Orphan")
    wait_for(
        lambda: _gone(lambda: core.read_namespaced_config_map("owner", namespace)),
        timeout_s=10,
        what="owner deleted",
    )
    # Orphaned on purpose: the child lost its reference and stays.
    assert core.read_namespaced_config_map("child", namespace).metadata.owner_references is None
    # A dependent created pointing at the deleted owner's uid is collected.
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "stray", "ownerReferences": [reference]}}
    )
    wait_for(
        lambda: _gone(lambda: core.read_namespaced_config_map("stray", namespace)),
        timeout_s=30,
        what="stray config map garbage-collected",
    )


# --- CRDs ---------------------------------------------------------------------------------


def test_crds_are_established_and_serve_an_example(
    k8s_api: kubernetes.client.ApiClient, namespace: str
) -> None:
    extensions = kubernetes.client.ApiextensionsV1Api(k8s_api)
    for name in (
        "modelservices.servectl.io",
        "scalingpolicies.servectl.io",
        "gateways.gateway.networking.k8s.io",
        "httproutes.gateway.networking.k8s.io",
    ):
        crd = extensions.read_custom_resource_definition(name)
        assert any(c.type == "Established" and c.status == "True" for c in crd.status.conditions)

    example = yaml.safe_load((EXAMPLES / "half-plus-two-minimal.yaml").read_text())
    custom = CustomObjectsApi(k8s_api)
    created = custom.create_namespaced_custom_object(
        "servectl.io", "v1alpha1", namespace, "modelservices", example, field_validation="Strict"
    )
    assert created["metadata"]["uid"]
    read = custom.get_namespaced_custom_object(
        "servectl.io", "v1alpha1", namespace, "modelservices", example["metadata"]["name"]
    )
    assert read["spec"]["model"] == example["spec"]["model"]
    # The schema is enforced by the apiserver: an unknown field is refused.
    bad = {**example, "metadata": {"name": "bad"}, "spec": {**example["spec"], "bogus": 1}}
    with pytest.raises(ApiException) as refused:
        custom.create_namespaced_custom_object(
            "servectl.io", "v1alpha1", namespace, "modelservices", bad, field_validation="Strict"
        )
    assert refused.value.status in (400, 422)


# --- lifecycle ----------------------------------------------------------------------------


def test_restart_and_stop_leave_no_process_behind(k8s_bin_dir: Path, tmp_path: Path) -> None:
    plane = ControlPlane.start(tmp_path / "plane", bin_dir=k8s_bin_dir, nodes=1)
    try:
        assert set(plane.pids()) == set(COMPONENTS)
        old = plane.pids()["kube-controller-manager"]
        plane.stop_component("kube-controller-manager")
        assert "kube-controller-manager" not in plane.pids()
        plane.start_component("kube-controller-manager")
        assert plane.pids()["kube-controller-manager"] != old
        groups = list(plane.pids().values())
    finally:
        plane.stop()
    assert plane.pids() == {}
    for group in groups:
        with pytest.raises(ProcessLookupError):
            os.killpg(group, 0)
    assert _processes_mentioning(str(tmp_path)) == []
    plane.stop()  # idempotent


def test_a_failing_component_is_named_and_nothing_is_left(
    k8s_bin_dir: Path, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("kube-apiserver", "kube-scheduler", "kwok"):
        (bin_dir / name).symlink_to(k8s_bin_dir / name)
    broken = bin_dir / "kube-controller-manager"
    broken.write_text("#!/bin/sh\necho 'cannot start: told to fail' >&2\nexit 3\n")
    broken.chmod(0o755)
    with pytest.raises(ControlPlaneError) as error:
        ControlPlane.start(tmp_path / "plane", bin_dir=bin_dir, nodes=1)
    message = str(error.value)
    assert "kube-controller-manager exited with code 3" in message
    assert "told to fail" in message
    assert _processes_mentioning(str(tmp_path)) == []


# --- finding the binaries (no control plane) ----------------------------------------------


def _fake_bin_dir(directory: Path, *, crds: bool = True) -> Path:
    directory.mkdir(parents=True)
    built = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
    for name in (*built, "kubelet", "kube-proxy"):
        (directory / name).write_text("#!/bin/sh\n")
        (directory / name).chmod(0o755)
    if crds:
        (directory / "gateway-api").mkdir()
        for name in ("b_httproutes.yaml", "a_gateways.yaml"):
            (directory / "gateway-api" / name).write_text("kind: CustomResourceDefinition\n")
    return directory


def test_find_binaries_follows_the_scripts_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SERVECTL_K8S_BIN", raising=False)
    monkeypatch.setenv("SERVECTL_K8S_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("K8S_VERSION", "v1.99.0")
    monkeypatch.setenv("KWOK_VERSION", "v9.9.9")
    assert find_binaries() is None
    built = _fake_bin_dir(tmp_path / "cache" / "v1.99.0-kwok-v9.9.9")
    assert find_binaries() == built
    (built / "kubelet").unlink()  # a cache from before the real node's binaries: built again
    assert find_binaries() is None
    (built / "kubelet").write_text("#!/bin/sh\n")
    (built / "kubelet").chmod(0o755)
    assert find_binaries() == built
    assert [p.name for p in gateway_api_crds(built)] == ["a_gateways.yaml", "b_httproutes.yaml"]

    # SERVECTL_K8S_BIN wins, and a directory without the Gateway API CRDs is incomplete.
    elsewhere = _fake_bin_dir(tmp_path / "elsewhere", crds=False)
    monkeypatch.setenv("SERVECTL_K8S_BIN", str(elsewhere))
    assert find_binaries(build=True) is None
    with pytest.raises(ControlPlaneError, match="no Gateway API CRDs"):
        gateway_api_crds(elsewhere)
