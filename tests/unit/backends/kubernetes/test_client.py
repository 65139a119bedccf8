"""What the CLI writes to and reads from a cluster (``KubeClient``), over a small fake of
``Kube``: the rollout-command annotation, refusals that name the field and write nothing,
the rows built from a status document, the API server's errors made readable; and the
CLI's verbs with ``--context`` rendering what the fake holds (no API server here: the
real one is tests/integration/k8s/test_cli_context.py)."""

from __future__ import annotations

import copy
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from click.testing import Result
from typer.testing import CliRunner

from servectl.api import models, validation
from servectl.backends.kubernetes import client as kc
from servectl.backends.kubernetes import objects as obj
from servectl.backends.kubernetes import resource_docs
from servectl.backends.kubernetes.kube import (
    EVENTS,
    MODELSERVICES,
    SCALINGPOLICIES,
    KubeError,
    Resource,
    resource_of,
)
from servectl.cli import get_cmd, rollout_verbs
from servectl.cli import main as cli_main
from servectl.rollout.machine import Op

NS = "ml"
HOST = "https://fake-apiserver:6443"


class FakeKube:
    """The few verbs ``KubeClient`` uses, over a dict; records every write."""

    def __init__(self, *, crd: bool = True) -> None:
        self.crd = crd
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.writes: list[tuple[str, str, Any]] = []  # (verb, name, body)
        self.queries: list[dict[str, Any]] = []
        self.errors: dict[str, list[KubeError]] = {}  # verb -> errors raised in turn
        self.rv = 100
        self.closed = False
        self.api = SimpleNamespace(configuration=SimpleNamespace(host=HOST), close=self._close)

    def _close(self) -> None:
        self.closed = True

    def _raise(self, verb: str, res: Resource, path: str) -> None:
        queued = self.errors.get(verb)
        if queued:
            raise queued.pop(0)
        if not self.crd and res.group == "servectl.io":
            raise KubeError(
                404,
                "NotFound",
                "the server could not find the requested resource",
                verb=verb,
                path=path,
            )

    def _missing(self, res: Resource, ns: str, name: str) -> KubeError:
        return KubeError(
            404,
            "NotFound",
            f'{res.plural}.{res.group} "{name}" not found',
            verb="GET",
            path=res.path(ns, name),
        )

    def _bump(self, doc: dict[str, Any]) -> None:
        self.rv += 1
        doc["metadata"]["resourceVersion"] = str(self.rv)

    # -- the Kube verbs

    def get(self, res: Resource, namespace: str | None, name: str, sub: str = "") -> Any:
        self._raise("get", res, res.path(namespace, name))
        doc = self.objects.get((res.plural, namespace or "", name))
        if doc is None:
            raise self._missing(res, namespace or "", name)
        return copy.deepcopy(doc)

    def list(self, res: Resource, namespace: str | None = None, **_: Any) -> Any:
        self._raise("list", res, res.path(namespace))
        items = [
            copy.deepcopy(d)
            for (plural, ns, _n), d in sorted(self.objects.items())
            if plural == res.plural and namespace in (None, ns)
        ]
        return {"items": items, "metadata": {"resourceVersion": str(self.rv)}}

    def apply(self, doc: dict[str, Any], *, sub: str = "", manager: str | None = None) -> Any:
        res = resource_of(doc)
        meta = doc["metadata"]
        self._raise("apply", res, res.path(meta["namespace"], meta["name"]))
        assert manager == kc.FIELD_MANAGER
        assert "status" not in doc and "managedFields" not in meta
        self.writes.append(("apply", meta["name"], copy.deepcopy(doc)))
        key = (res.plural, meta["namespace"], meta["name"])
        live = self.objects.get(key)
        if live is None:
            live = {
                "apiVersion": doc["apiVersion"],
                "kind": doc["kind"],
                "metadata": {
                    "name": meta["name"],
                    "namespace": meta["namespace"],
                    "uid": f"uid-{meta['name']}",
                    "generation": 1,
                    "creationTimestamp": "2025-01-31T10:00:00Z",
                },
                "spec": copy.deepcopy(doc["spec"]),
            }
            self._bump(live)
            self.objects[key] = live
            return copy.deepcopy(live)
        if live["spec"] != doc["spec"]:
            live["spec"] = copy.deepcopy(doc["spec"])
            live["metadata"]["generation"] += 1
            self._bump(live)
        return copy.deepcopy(live)

    def merge_patch(
        self, res: Resource, namespace: str | None, name: str, patch: dict[str, Any], sub: str = ""
    ) -> Any:
        self._raise("patch", res, res.path(namespace, name))
        live = self.objects.get((res.plural, namespace or "", name))
        if live is None:
            raise self._missing(res, namespace or "", name)
        want = (patch.get("metadata") or {}).get("resourceVersion")
        if want is not None and want != live["metadata"]["resourceVersion"]:
            raise KubeError(409, "Conflict", "the object has been modified", verb="PATCH", path="")
        self.writes.append(("patch", name, copy.deepcopy(patch)))
        before = copy.deepcopy(live["spec"])
        _merge(live, {k: v for k, v in patch.items()})
        live["metadata"]["resourceVersion"] = str(self.rv)
        if live["spec"] != before:
            live["metadata"]["generation"] += 1
        self._bump(live)
        return copy.deepcopy(live)

    def delete(self, res: Resource, namespace: str | None, name: str, **_: Any) -> bool:
        self._raise("delete", res, res.path(namespace, name))
        self.writes.append(("delete", name, None))
        return self.objects.pop((res.plural, namespace or "", name), None) is not None

    def request(self, method: str, path: str, *, query: Any = None, **_: Any) -> Any:
        if path == "/apis/servectl.io/v1alpha1":
            if not self.crd:
                raise KubeError(404, "NotFound", "404 page not found", verb=method, path=path)
            return {"resources": [{"name": "modelservices"}, {"name": "scalingpolicies"}]}
        if path == EVENTS.path(NS):
            self._raise("events", EVENTS, path)
            self.queries.append(dict(query or {}))
            return {"items": copy.deepcopy(self.events)}
        raise AssertionError(f"unexpected request {method} {path}")

    # -- test helpers

    def put(self, doc: dict[str, Any], status: dict[str, Any] | None = None) -> None:
        doc = copy.deepcopy(doc)
        doc["metadata"].setdefault("namespace", NS)
        doc["metadata"].update(
            {"generation": 1, "creationTimestamp": "2025-01-31T10:00:00Z", "uid": "u"}
        )
        if status is not None:
            doc["status"] = status
        self._bump(doc)
        self.objects[
            (MODELSERVICES.plural, doc["metadata"]["namespace"], doc["metadata"]["name"])
        ] = doc

    def ms(self, name: str) -> dict[str, Any]:
        return self.objects[(MODELSERVICES.plural, NS, name)]


def _merge(live: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            live.pop(key, None)
        elif isinstance(value, dict):
            node = live.setdefault(key, {})
            _merge(node, value)
        else:
            live[key] = value


def ms_doc(name: str = "cost", version: int | None = 1, **spec: Any) -> dict[str, Any]:
    model: dict[str, Any] = {"name": name, "basePath": f"s3://models/{name}"}
    if version is not None:
        model["version"] = version
    body: dict[str, Any] = {"model": model, "autoscaling": {"minReplicas": 1, "maxReplicas": 4}}
    body.update(spec)
    return {
        "apiVersion": "servectl.io/v1alpha1",
        "kind": "ModelService",
        "metadata": {"name": name, "namespace": NS},
        "spec": body,
    }


STATUS: dict[str, Any] = {
    "observedGeneration": 2,
    "revisions": [
        {
            "name": "cost-v1",
            "version": 1,
            "weight": 75,
            "desiredReplicas": 3,
            "readyReplicas": 3,
            "modelState": "AVAILABLE",
        },
        {
            "name": "cost-v2",
            "version": 2,
            "weight": 25,
            "desiredReplicas": 1,
            "readyReplicas": 1,
            "modelState": "AVAILABLE",
        },
    ],
    "rollout": {
        "phase": "Paused",
        "step": 1,
        "stableVersion": 1,
        "canaryVersion": 2,
        "message": "paused at step 1",
        "verdicts": [],
    },
    "autoscaling": {
        "desiredReplicas": 4,
        "decidedBy": "latency",
        "reason": "ScaleUp",
        "message": "p99 180 ms over 150 ms",
        "lastScaleTime": "2025-01-31T10:05:00Z",
    },
    "conditions": [
        {"type": "Ready", "status": "True", "reason": "Serving", "message": ""},
        {
            "type": "MetricsAvailable",
            "status": "False",
            "reason": "Stale",
            "message": "cpu: no sample for 40 s",
        },
    ],
    "loop": {"command": "done-1", "state": {"format": 1}},
}
PUBLIC_STATUS = {k: v for k, v in STATUS.items() if k != "loop"}  # what get -o json shows


@pytest.fixture
def kube() -> FakeKube:
    return FakeKube()


@pytest.fixture
def client(kube: FakeKube) -> kc.KubeClient:
    return kc.KubeClient(kube, context="prod", namespace=NS)  # type: ignore[arg-type]


def service(doc: dict[str, Any]) -> models.ModelService:
    return validation.load_model_service(doc)


# ------------------------------------------------------------------ the command annotation


def test_a_rollout_command_is_the_annotation_json_with_a_fresh_id(
    kube: FakeKube, client: kc.KubeClient
) -> None:
    kube.put(ms_doc(), STATUS)
    first = client.rollout(NS, "cost", Op.ABORT)
    second = client.rollout(NS, "cost", Op.PROMOTE_FULL)
    assert [w[0] for w in kube.writes] == ["patch", "patch"]
    patch = kube.writes[0][2]
    assert set(patch) == {"metadata"}  # only the annotation: never the spec or the status
    request = json.loads(patch["metadata"]["annotations"][obj.COMMAND])
    assert request == {"op": "abort", "version": None, "id": first.id}
    assert first.id is not None and len(first.id) == 32 and int(first.id, 16) >= 0
    assert second.id != first.id
    last = json.loads(kube.ms("cost")["metadata"]["annotations"][obj.COMMAND])
    assert (last["op"], last["id"]) == ("promote-full", second.id)
    # The first was not carried out (status.loop.command is another id): the CLI says so.
    assert first.replaced is None and second.replaced == "abort"
    assert (
        resource_docs.command_annotation(Op.START, 3, "x")
        == '{"op": "start", "version": 3, "id": "x"}'
    )


def test_command_done_and_pending_read_status_loop_command(kube: FakeKube) -> None:
    doc = ms_doc()
    doc["metadata"]["annotations"] = {
        obj.COMMAND: resource_docs.command_annotation(Op.PAUSE, None, "c1")
    }
    doc["status"] = {"loop": {"command": "c0"}}
    assert resource_docs.pending_command(doc) == {"op": "pause", "version": None, "id": "c1"}
    assert not resource_docs.command_done(doc, "c1")
    doc["status"]["loop"]["command"] = "c1"
    assert resource_docs.pending_command(doc) is None and resource_docs.command_done(doc, "c1")
    doc["metadata"]["annotations"][obj.COMMAND] = "not json"
    assert resource_docs.pending_command(doc) is None


def test_start_to_another_version_writes_the_spec_and_to_its_own_version_a_command(
    kube: FakeKube, client: kc.KubeClient
) -> None:
    kube.put(ms_doc(version=1), STATUS)
    moved = client.rollout(NS, "cost", Op.START, 2)
    assert moved.id is None
    assert kube.writes[-1][2] == {"spec": {"model": {"version": 2}}}
    assert kube.ms("cost")["spec"]["model"]["version"] == 2
    # v2 is the spec's version already (say after an abort): a start command re-runs it.
    again = client.rollout(NS, "cost", Op.START, 2)
    assert again.id is not None
    request = json.loads(kube.ms("cost")["metadata"]["annotations"][obj.COMMAND])
    assert request == {"op": "start", "version": 2, "id": again.id}
    with pytest.raises(kc.ClientError, match="--version"):
        client.rollout(NS, "cost", Op.START, None)
    with pytest.raises(kc.ClientError, match="--version: 0 is not a model version"):
        client.rollout(NS, "cost", Op.START, 0)


def test_a_command_for_a_missing_service_names_get(client: kc.KubeClient) -> None:
    with pytest.raises(kc.ClientError) as info:
        client.rollout(NS, "nope", Op.ABORT)
    assert str(info.value) == (
        "no ModelService ml/nope; `servectl get -n ml --context prod` lists them"
    )
    assert not info.value.environment


# ------------------------------------------------------------------ deploy


def test_deploy_applies_the_spec_as_the_cli_and_a_new_version_requests_a_rollout(
    kube: FakeKube, client: kc.KubeClient
) -> None:
    done = client.deploy(service(ms_doc(version=1)))
    assert (done.created, done.changed, done.rollout_to) == (True, True, None)
    verb, name, body = kube.writes[0]
    assert (verb, name) == ("apply", "cost")
    assert body["metadata"] == {"name": "cost", "namespace": NS}
    assert body["spec"]["model"] == {"name": "cost", "basePath": "s3://models/cost", "version": 1}
    same = client.deploy(service(ms_doc(version=1)))
    assert (same.created, same.changed, same.rollout_to) == (False, False, None)
    moved = client.deploy(service(ms_doc(version=2)))
    assert (moved.created, moved.changed, moved.rollout_to) == (False, True, 2)
    assert moved.generation == 2
    assert kube.ms("cost")["spec"]["model"]["version"] == 2


def test_deploy_puts_resources_in_the_namespace_asked(
    kube: FakeKube, client: kc.KubeClient
) -> None:
    client.deploy(service(ms_doc()), namespace="other")
    assert (MODELSERVICES.plural, "other", "cost") in kube.objects


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"version": None}, "spec.model.version: required on Kubernetes"),
        ({"basePath": "models/cost"}, "spec.model.basePath"),
        ({"basePath": "http://x/cost"}, "spec.model.basePath"),
    ],
)
def test_deploy_refuses_what_the_cluster_cannot_serve_naming_the_field(
    kube: FakeKube, client: kc.KubeClient, change: dict[str, Any], field: str
) -> None:
    doc = ms_doc()
    for key, value in change.items():
        if value is None:
            doc["spec"]["model"].pop(key)
        else:
            doc["spec"]["model"][key] = value
    with pytest.raises(kc.ClientError, match=field.replace(".", r"\.")) as info:
        client.deploy(service(doc))
    assert str(info.value).startswith("cost: spec.model.")
    assert kube.writes == []


def test_deploy_refuses_a_standby_pool_until_kubernetes_parks_one(
    kube: FakeKube, client: kc.KubeClient
) -> None:
    doc = ms_doc()
    doc["spec"]["autoscaling"]["standby"] = {"replicas": 1}
    with pytest.raises(kc.ClientError, match=r"spec\.autoscaling\.standby: not on Kubernetes"):
        client.deploy(service(doc))
    assert kube.writes == []
    doc["spec"]["autoscaling"]["standby"] = {"replicas": 0}
    assert client.deploy(service(doc)).created


def test_deploy_refuses_a_cel_policy_that_does_not_compile(
    kube: FakeKube, client: kc.KubeClient
) -> None:
    doc = ms_doc()
    doc["spec"]["autoscaling"]["policy"] = {"cel": "signals.cpu_utilization >"}
    broken = models.ModelService.model_validate(doc)  # the file loader would refuse it first
    with pytest.raises(kc.ClientError, match=r"spec\.autoscaling\.policy\.cel"):
        client.deploy(broken)
    assert kube.writes == []


def test_a_policy_ref_resolves_against_the_file_then_the_namespace(
    kube: FakeKube, client: kc.KubeClient
) -> None:
    doc = ms_doc()
    doc["spec"]["autoscaling"]["policy"] = {"ref": "slo"}
    with pytest.raises(kc.ClientError, match=r"spec\.autoscaling\.policy\.ref"):
        client.deploy(service(doc))
    assert kube.writes == []
    policy = validation.load_scaling_policy(
        {
            "apiVersion": "servectl.io/v1alpha1",
            "kind": "ScalingPolicy",
            "metadata": {"name": "slo", "namespace": NS},
            "spec": {"description": "as recommended", "cel": "recommended"},
        }
    )
    client.deploy(service(doc), [policy])
    assert [(w[0], w[2]["kind"]) for w in kube.writes] == [
        ("apply", "ScalingPolicy"),
        ("apply", "ModelService"),
    ]
    # Now in the cluster: a later deploy finds it there.
    kube.objects[(SCALINGPOLICIES.plural, NS, "slo")] = {
        "metadata": {"name": "slo", "namespace": NS},
        "spec": {"description": "as recommended", "cel": "recommended"},
    }
    assert client.deploy(service(doc)).changed is False


def test_deploy_checks_every_service_before_writing_any(
    kube: FakeKube, client: kc.KubeClient
) -> None:
    with pytest.raises(kc.ClientError, match=r"^b: spec\.model\.version"):
        client.deploy_all([service(ms_doc("a")), service(ms_doc("b", version=None))])
    assert kube.writes == []


# ------------------------------------------------------------------ scale, delete


def test_scale_patches_the_bounds_guarded_by_the_resource_version(
    kube: FakeKube, client: kc.KubeClient
) -> None:
    kube.put(ms_doc())
    rv = kube.ms("cost")["metadata"]["resourceVersion"]
    updated = client.scale(NS, "cost", max_replicas=8)
    assert (updated.spec.autoscaling.min_replicas, updated.spec.autoscaling.max_replicas) == (1, 8)
    assert kube.writes[-1][2] == {
        "metadata": {"resourceVersion": rv},
        "spec": {"autoscaling": {"minReplicas": 1, "maxReplicas": 8}},
    }
    # Someone else wrote in between: read again, check again, patch again.
    kube.errors["patch"] = [KubeError(409, "Conflict", "modified", verb="PATCH", path="")]
    client.scale(NS, "cost", replicas=3)
    assert kube.ms("cost")["spec"]["autoscaling"] == {"minReplicas": 3, "maxReplicas": 3}


def test_scale_refuses_min_over_max_naming_the_field_and_writes_nothing(
    kube: FakeKube, client: kc.KubeClient
) -> None:
    kube.put(ms_doc())
    with pytest.raises(kc.ClientError, match=r"spec\.autoscaling\.minReplicas"):
        client.scale(NS, "cost", min_replicas=7)
    assert kube.writes == []


def test_delete_and_wait(kube: FakeKube) -> None:
    ticks = iter(range(100))
    client = kc.KubeClient(
        kube,  # type: ignore[arg-type]
        context="prod",
        namespace=NS,
        sleep=lambda _s: None,
        clock=lambda: float(next(ticks)),
    )
    kube.put(ms_doc())
    client.delete(NS, "cost")
    assert client.wait_deleted(NS, "cost", 10)
    with pytest.raises(kc.ClientError, match="no ModelService ml/cost"):
        client.delete(NS, "cost")
    kube.put(ms_doc())  # a finalizer holds it: the wait gives up at its deadline
    assert not client.wait_deleted(NS, "cost", 5)


# ------------------------------------------------------------------ reads


def test_rows_from_a_status_document() -> None:
    live = ms_doc()
    live["metadata"].update(
        {
            "generation": 2,
            "creationTimestamp": "2025-01-31T10:00:00Z",
            "managedFields": [{"manager": "servectl-cli"}],
        }
    )
    live["status"] = STATUS
    row = resource_docs.row(live)
    assert (row.namespace, row.name, row.generation) == (NS, "cost", 2)
    assert row.updated == 1738317600.0
    assert "managedFields" not in row.spec["metadata"] and "status" not in row.spec
    # kubectl's shape, without the loop state the controller saves in status.loop
    assert row.document == {
        "apiVersion": "servectl.io/v1alpha1",
        "kind": "ModelService",
        "metadata": {
            "name": "cost",
            "namespace": NS,
            "generation": 2,
            "creationTimestamp": "2025-01-31T10:00:00Z",
        },
        "spec": live["spec"],
        "status": PUBLIC_STATUS,
    }
    summary = get_cmd._summary_of(row, row.status, None)
    assert {
        k: summary[k]
        for k in (
            "ready",
            "desired",
            "weights",
            "rollout",
            "step",
            "stableVersion",
            "canaryVersion",
            "decidedBy",
            "min",
            "max",
            "rest",
            "grpc",
        )
    } == {
        "ready": 4,
        "desired": 4,
        "weights": {"cost-v1": 75, "cost-v2": 25},
        "rollout": "Paused",
        "step": 1,
        "stableVersion": 1,
        "canaryVersion": 2,
        "decidedBy": "latency",
        "min": 1,
        "max": 4,
        "rest": None,
        "grpc": None,
    }
    record = rollout_verbs._rollout_record(row.status)
    assert record == {
        "phase": "Paused",
        "step": 1,
        "stableVersion": 1,
        "canaryVersion": 2,
        "weights": {"cost-v1": 75, "cost-v2": 25},
        "message": "paused at step 1",
        "verdicts": [],
    }
    assert resource_docs.history(row.status) == [
        {
            "phase": "Paused",
            "step": 1,
            "stableVersion": 1,
            "canaryVersion": 2,
            "message": "paused at step 1",
            "verdicts": [],
        }
    ]
    assert (
        resource_docs.history({}) == []
        and resource_docs.history({"rollout": {"phase": "Idle"}}) == []
    )


def test_events_are_the_services_oldest_first_the_newest_kept(
    kube: FakeKube, client: kc.KubeClient
) -> None:
    kube.put(ms_doc())

    def ev(name: str, when: str, reason: str, **extra: Any) -> dict[str, Any]:
        return {
            "metadata": {"name": name},
            "type": "Normal",
            "reason": reason,
            "message": reason.lower(),
            **{"lastTimestamp": when, **extra},
        }

    kube.events = [
        ev("c.2", "2025-01-31T10:02:00Z", "ScaledUp"),
        ev("c.1", "2025-01-31T10:01:00Z", "Created"),
        {
            "metadata": {"name": "c.3"},
            "type": "Warning",
            "reason": "InvalidSpec",
            "message": "bad",
            "eventTime": "2025-01-31T10:03:00.000001Z",
        },
    ]
    got = client.events(NS, "cost", limit=2)
    assert [(e.id, e.reason, e.type) for e in got] == [
        ("c.2", "ScaledUp", "Normal"),
        ("c.3", "InvalidSpec", "Warning"),
    ]
    assert kube.queries[-1] == {
        "fieldSelector": "involvedObject.name=cost,involvedObject.kind=ModelService"
    }


# ------------------------------------------------------------------ errors


def test_crds_not_installed_says_how_to_install_them() -> None:
    kube = FakeKube(crd=False)
    client = kc.KubeClient(kube, context="prod", namespace=NS)  # type: ignore[arg-type]
    for call in (
        lambda: client.get(NS, "cost"),
        lambda: client.services(NS),
        lambda: client.deploy(service(ms_doc())),
        lambda: client.delete(NS, "cost"),
    ):
        with pytest.raises(kc.ClientError) as info:
            call()
        assert "kubectl apply --server-side -f deploy/crds/" in str(info.value)
        assert "helm install servectl deploy/helm/servectl" in str(info.value)
        assert info.value.environment


@pytest.mark.parametrize(
    ("error", "expected", "environment"),
    [
        (
            KubeError(
                0,
                "MaxRetryError",
                "HTTPSConnectionPool(host='x', port=1): Max retries "
                "exceeded (Caused by NewConnectionError('<conn>: Failed to establish a new "
                "connection: [Errno 111] Connection refused'))",
                verb="GET",
                path="/",
            ),
            f"cannot reach the Kubernetes API server {HOST} (context prod): Connection refused;"
            " is the cluster up and the context right? (kubectl --context prod cluster-info)",
            True,
        ),
        (
            KubeError(
                403,
                "Forbidden",
                'modelservices.servectl.io is forbidden: User "bob" '
                'cannot list resource "modelservices"',
                verb="GET",
                path="/",
            ),
            'forbidden (context prod): modelservices.servectl.io is forbidden: User "bob" '
            'cannot list resource "modelservices"; the CLI needs get, list, create, patch and '
            "delete on modelservices.servectl.io (and scalingpolicies), and list on events, "
            "in namespace ml",
            True,
        ),
        (
            KubeError(401, "Unauthorized", "Unauthorized", verb="GET", path="/"),
            f"the API server {HOST} refused the credentials (context prod) (401 Unauthorized):"
            " Unauthorized",
            True,
        ),
    ],
)
def test_cluster_errors_are_one_line_that_says_what_to_do(
    kube: FakeKube, client: kc.KubeClient, error: KubeError, expected: str, environment: bool
) -> None:
    kube.errors["list"] = [error]
    with pytest.raises(kc.ClientError) as info:
        client.services(NS)
    assert str(info.value) == expected
    assert info.value.environment is environment


def test_the_api_servers_validation_message_is_shown_readably(
    kube: FakeKube, client: kc.KubeClient
) -> None:
    kube.errors["apply"] = [
        KubeError(
            422,
            "Invalid",
            'ModelService.servectl.io "cost" is invalid: [spec.autoscaling: Invalid value: '
            '"object": minReplicas must be <= maxReplicas, spec.model.name: Required value]',
            verb="PATCH",
            path="/",
        )
    ]
    with pytest.raises(kc.ClientError) as info:
        client.deploy(service(ms_doc()))
    assert str(info.value) == (
        "the API server refused ModelService ml/cost: spec.autoscaling: Invalid value: "
        '"object": minReplicas must be <= maxReplicas; spec.model.name: Required value'
    )
    kube.errors["apply"] = [
        KubeError(404, "NotFound", 'namespaces "ml" not found', verb="PATCH", path="/")
    ]
    with pytest.raises(kc.ClientError, match="namespace ml does not exist"):
        client.deploy(service(ms_doc()))


# ------------------------------------------------------------------ connect


def _kubeconfig(path: Path, server: str, *contexts: tuple[str, str | None]) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [
                    {
                        "name": name,
                        "context": {
                            "cluster": "c",
                            "user": "u",
                            **({"namespace": ns} if ns else {}),
                        },
                    }
                    for name, ns in contexts
                ],
                "current-context": contexts[0][0],
            }
        )
    )
    return path


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_connect_picks_the_context_and_its_namespace(tmp_path: Path) -> None:
    config = _kubeconfig(tmp_path / "kc", "https://127.0.0.1:1", ("a", "ml"), ("b", None))
    a = kc.KubeClient.connect(str(config), None)
    assert (a.context, a.namespace, a.kube.field_manager) == ("a", "ml", kc.FIELD_MANAGER)
    b = kc.KubeClient.connect(str(config), "b")
    assert (b.context, b.namespace) == ("b", "default")
    with pytest.raises(
        kc.ClientError, match=r"--context zz: no such context in .* \(it has a, b\)"
    ):
        kc.KubeClient.connect(str(config), "zz")
    with pytest.raises(kc.ClientError, match="no such file"):
        kc.KubeClient.connect(str(tmp_path / "missing"), "a")
    a.close()
    b.close()


def test_an_unreachable_api_server_is_one_line(tmp_path: Path) -> None:
    port = _closed_port()
    config = _kubeconfig(tmp_path / "kc", f"https://127.0.0.1:{port}", ("x", None))
    client = kc.KubeClient.connect(str(config), "x")
    try:
        with pytest.raises(kc.ClientError) as info:
            client.services("default")
    finally:
        client.close()
    message = str(info.value)
    assert message.startswith(
        f"cannot reach the Kubernetes API server https://127.0.0.1:{port} (context x): "
    )
    assert "refused" in message.lower() and "\n" not in message
    assert info.value.environment


# ------------------------------------------------------------------ the CLI over the fake


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kube: FakeKube) -> Iterator[Path]:
    """``servectl ... --kubeconfig K --context prod`` runs on ``kube`` (namespace ml)."""
    config = _kubeconfig(tmp_path / "kc", "https://127.0.0.1:1", ("prod", NS))

    def connect(kubeconfig: str | None, context: str | None) -> kc.KubeClient:
        assert kubeconfig in (str(config), None) and context == "prod"
        return kc.KubeClient(kube, context="prod", namespace=NS)  # type: ignore[arg-type]

    monkeypatch.setattr(kc.KubeClient, "connect", staticmethod(connect))
    monkeypatch.delenv("SERVECTL_CONTEXT", raising=False)
    yield config


def run(config: Path, *args: str) -> Result:
    return CliRunner().invoke(
        cli_main.app, [*args, "--kubeconfig", str(config), "--context", "prod"]
    )


def test_cli_get_describe_explain_and_rollout_status_render_the_status(
    cli: Path, kube: FakeKube
) -> None:
    kube.put(ms_doc(), STATUS)
    table = run(cli, "get", "-o", "wide")
    assert table.exit_code == 0, table.output
    assert "cost" in table.output and "4/4" in table.output
    assert "cost-v1:75 cost-v2:25" in table.output and "Paused (step 1)" in table.output
    as_json = json.loads(run(cli, "get", "cost", "-o", "json").output)
    assert as_json["status"] == PUBLIC_STATUS and as_json["spec"]["model"]["version"] == 1
    described = run(cli, "describe", "cost")
    assert described.exit_code == 0, described.output
    assert "model:     cost from s3://models/cost (version 1)" in described.output
    assert "rollout:   Paused step 1 (stable v1, new v2) paused at step 1" in described.output
    assert "MetricsAvailable" in described.output
    explained = run(cli, "explain", "cost")
    assert explained.exit_code == 0, explained.output
    assert "decision:  4 replicas, decided by latency (ScaleUp)" in explained.output
    assert "MetricsAvailable: False (Stale) cpu: no sample for 40 s" in explained.output
    status = json.loads(run(cli, "rollout", "status", "cost", "-o", "json").output)
    assert status["phase"] == "Paused" and status["weights"] == {"cost-v1": 75, "cost-v2": 25}
    history = run(cli, "rollout", "history", "cost")
    assert history.exit_code == 0
    assert "v1" in history.output and "v2" in history.output and "Paused" in history.output
    assert "kept by the local runtime only" in history.output
    assert kube.writes == []


def test_cli_refusals_are_one_line_with_the_field(cli: Path, kube: FakeKube) -> None:
    missing = run(cli, "describe", "nope")
    assert missing.exit_code == 2
    assert missing.output.strip() == (
        "error: no ModelService ml/nope; `servectl get -n ml --context prod` lists them"
    )
    kube.put(ms_doc())
    no_version = run(cli, "deploy", "x", "--model-path", "s3://models/x")
    assert no_version.exit_code == 2 and "spec.model.version: required" in no_version.output
    relative = run(cli, "deploy", "x", "--model-path", "models/x", "--version", "1")
    assert relative.exit_code == 2 and "spec.model.basePath" in relative.output
    assert kube.writes == []
    ok = run(cli, "deploy", "x", "--model-path", "s3://models/x/", "--version", "3")
    assert ok.exit_code == 0, ok.output
    assert ok.output.strip() == "modelservice/x created"
    assert kube.objects[(MODELSERVICES.plural, NS, "x")]["spec"]["model"] == {
        "name": "x",
        "basePath": "s3://models/x/",
        "version": 3,
    }


def test_cli_logs_and_top_print_the_kubectl_command(cli: Path, kube: FakeKube) -> None:
    logs = run(cli, "logs", "cost", "--tail", "5")
    assert logs.exit_code == 1
    assert (
        f"kubectl --kubeconfig {cli} --context prod -n ml logs -l servectl.io/service=cost "
        "--all-containers --prefix --tail=5"
    ) in logs.output
    top = run(cli, "top", "cost")
    assert top.exit_code == 1
    assert f"kubectl --kubeconfig {cli} --context prod -n ml top pods -l " in top.output
    assert "Traceback" not in logs.output + top.output


def test_state_dir_and_context_together_are_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli_main.app, ["get", "--state-dir", str(tmp_path), "--context", "prod"]
    )
    assert result.exit_code == 2
    assert "give one of them" in result.output


def test_servectl_context_picks_the_cluster_unless_a_state_dir_is_given(
    cli: Path, kube: FakeKube, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    kube.put(ms_doc(), STATUS)
    monkeypatch.setenv("SERVECTL_CONTEXT", "prod")
    on_cluster = CliRunner().invoke(cli_main.app, ["get", "-o", "json"])
    assert on_cluster.exit_code == 0, on_cluster.output
    assert json.loads(on_cluster.output)["metadata"]["name"] == "cost"
    local = CliRunner().invoke(cli_main.app, ["get", "--state-dir", str(tmp_path / "state")])
    assert local.exit_code == 0, local.output
    assert local.output.startswith("no services; deploy one with")


def test_context_and_kubeconfig_go_before_the_verb_as_with_kubectl(
    cli: Path, kube: FakeKube, tmp_path: Path
) -> None:
    kube.put(ms_doc(), STATUS)
    before = CliRunner().invoke(
        cli_main.app,
        ["--context", "prod", "--kubeconfig", str(cli), "get", "-n", NS, "-o", "json"],
    )
    assert before.exit_code == 0, before.output
    assert json.loads(before.output)["metadata"]["name"] == "cost"
    logs = CliRunner().invoke(
        cli_main.app, ["--kubeconfig", str(cli), "--context", "prod", "logs", "cost"]
    )
    assert f"kubectl --kubeconfig {cli} --context prod -n ml logs" in logs.output
    # The verb's own option wins over the global one (connect() accepts "prod" only).
    own = CliRunner().invoke(cli_main.app, ["--context", "other", "get", "--context", "prod"])
    assert own.exit_code == 0, own.output
    # Given before the verb, a --state-dir after it still conflicts.
    both = CliRunner().invoke(
        cli_main.app, ["--context", "prod", "get", "--state-dir", str(tmp_path)]
    )
    assert both.exit_code == 2 and "give one of them" in both.output
    # And the next command in the same process starts with no global option.
    local = CliRunner().invoke(cli_main.app, ["get", "--state-dir", str(tmp_path / "state")])
    assert local.exit_code == 0 and local.output.startswith("no services"), local.output
