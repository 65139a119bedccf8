"""The objects servectl runs a ModelService with, as plain Kubernetes documents (pure).

Per revision (``<service>-v<version>``):

- a **ConfigMap** ``<revision>-config``: TF Serving's model config serving exactly that
  version (``model_version_policy { specific { versions: N } }``), its monitoring config
  (Prometheus metrics on at ``/monitoring/prometheus/metrics``) and, when asked, the
  batching parameters;
- a **Deployment** ``<revision>`` running TF Serving (``spec.runtime.image``): the model
  fetched from ``basePath`` by an init container for ``s3://`` and ``gs://``, mounted from a
  PersistentVolumeClaim for ``pvc://<claim>/<path>``, or read in place for a plain path;
  requests (and a GPU limit), a readiness probe that passes only once the version is
  AVAILABLE (the metadata endpoint answers only for a loaded servable), a startup probe
  that gives the model ``runtime.loadTimeoutSeconds`` to load before liveness checks, a ``preStop``
  sleep of ``drainSeconds`` (TF Serving stops at SIGTERM without draining) and a grace
  period to match;
- a **Service** ``<revision>``: the revision's pods, gRPC 8500 and REST 8501.

A new model version is a new revision (a rollout); a change to anything else a pod reads
(image, resources, batching, drain) changes the revision's pod template, its ConfigMap's
data included (``servectl.io/config-hash``), and its Deployment rolls the pods in place.

Per service: a Service ``<service>`` over every revision's pods (the replica-ratio
fallback when no Gateway API implementation runs), and with the ``gateway`` traffic
provider an **HTTPRoute** ``<service>`` and a **GRPCRoute** ``<service>-grpc`` whose
backend weights are the plan's and whose first rule sends the A/B (or blue/green preview)
match to the header revision.

Everything carries servectl's labels and an owner reference to the ModelService, and a
``servectl.io/applied`` annotation: a hash of the document as built, so the controller
re-applies only what changed (the scale bench counts zero writes on a quiet cycle).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servectl.api import models
from servectl.backends.kubernetes import pod_options
from servectl.controller.spec import RouteMatch, route_match

Doc = dict[str, Any]

GROUP = "servectl.io"
MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_SERVICE = "servectl.io/service"
LABEL_REVISION = "servectl.io/revision"
LABEL_VERSION = "servectl.io/version"
APPLIED = "servectl.io/applied"
WEIGHT = "servectl.io/weight"
# On the pod template: a hash of the revision's ConfigMap data. TF Serving reads its config
# files once, at start; a changed file (batching) changes the template, and the Deployment
# rolls its pods in place (maxUnavailable 0: no capacity dip). docs/kubernetes.md, "What
# rolls".
CONFIG_HASH = "servectl.io/config-hash"
COMMAND = "servectl.io/rollout-command"
"""Annotation by which the CLI asks for a rollout operation (JSON: op, version, id)."""
FINALIZER = "servectl.io/cleanup"
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"

GRPC_PORT = 8500
REST_PORT = 8501
MODELS_DIR = "/models"
CONFIG_DIR = "/etc/servectl"
FETCH_IMAGES = {
    "s3": "amazon/aws-cli:2.22.35",
    "gs": "google/cloud-sdk:502.0.0-slim",
}
"""Images of the init container that copies one version from object storage."""
GRACE_EXTRA_S = 30
"""Grace period beyond ``drainSeconds``: TF Serving's own shutdown after the drain."""
STARTUP_PERIOD_S = 2
RUN_AS = 65532
"""The uid and gid model pods run as: not root, so that they pass Pod Security
"restricted" (tensorflow/serving's image runs as root and writes nothing but /tmp; the
kubelet can verify a numeric uid whatever the image's USER says)."""
TMP_SIZE = "256Mi"
"""The writable /tmp of a model pod (its root filesystem is read-only)."""


def pod_of(spec: models.ModelServiceSpec) -> models.PodOptions:
    """``spec.runtime.pod``, its defaults where it is not set."""
    return spec.runtime.pod or models.PodOptions()


LOGS_MIB = 256
"""Room for a container's logs in its ephemeral-storage limit (the kubelet rotates them at
10Mi by default, keeping 5)."""


def storage(spec: models.ModelServiceSpec, fetched: bool) -> tuple[str, str]:
    """A model pod's ephemeral-storage (request, limit), both on its model server: the
    kubelet counts every emptyDir, the logs and the writable layers against the sum of the
    containers' limits (an init container's is taken alone, not added), so the fetched
    model's emptyDir is in it. Requested: the model and a little; limit: the model, /tmp
    and the logs."""
    mib = 2**20
    model = -(-int(models.parse_quantity(pod_of(spec).model_volume_size)) // mib) if fetched else 0
    tmp = int(models.parse_quantity(TMP_SIZE)) // mib
    return f"{model + 64}Mi", f"{model + tmp + LOGS_MIB}Mi"


POD_SECURITY: Doc = {
    "runAsNonRoot": True,
    "runAsUser": RUN_AS,
    "runAsGroup": RUN_AS,
    "fsGroup": RUN_AS,  # the fetched models' emptyDir is theirs
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY: Doc = {
    "allowPrivilegeEscalation": False,
    "privileged": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}
"""The startup probe's period; its failureThreshold spans ``runtime.loadTimeoutSeconds``."""


class TrafficProvider:
    GATEWAY = "gateway"
    SERVICE = "service"


@dataclass(frozen=True)
class Options:
    """How the controller builds objects (its command-line flags)."""

    traffic: str = TrafficProvider.GATEWAY
    gateway: tuple[str, str] | None = None  # (namespace or "", name) of the parent Gateway
    http_listener: str | None = None  # the Gateway's listener (sectionName) for REST routes
    grpc_listener: str | None = None  # ... and for gRPC routes
    hostnames: str | None = None  # default REST hostname pattern: {name}, {namespace}
    grpc_hostnames: str | None = None  # default gRPC hostname pattern


def labels(service: str, revision: str | None = None, version: int | None = None) -> dict[str, str]:
    out = {MANAGED_BY: "servectl", LABEL_SERVICE: service}
    if revision is not None:
        out[LABEL_REVISION] = revision
    if version is not None:
        out[LABEL_VERSION] = str(version)
    return out


def owner_reference(ms: Mapping[str, Any]) -> Doc:
    meta = ms["metadata"]
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "ModelService",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def digest(doc: Mapping[str, Any]) -> str:
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _stamp(doc: Doc) -> Doc:
    """Put the document's own hash in ``servectl.io/applied`` (computed without it)."""
    doc["metadata"].setdefault("annotations", {})[APPLIED] = digest(doc)
    return doc


def applied_hash(doc: Mapping[str, Any] | None) -> str | None:
    if doc is None:
        return None
    annotations = (doc.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(APPLIED)
    return str(value) if value is not None else None


def _meta(ms: Mapping[str, Any], name: str, lbl: Mapping[str, str]) -> Doc:
    return {
        "name": name,
        "namespace": ms["metadata"]["namespace"],
        "labels": dict(lbl),
        "ownerReferences": [owner_reference(ms)],
    }


# ------------------------------------------------------------------------ model location


@dataclass(frozen=True)
class ModelSource:
    scheme: str  # "s3", "gs", "pvc" or "path"
    location: str  # bucket/prefix, claim, or the path
    sub_path: str = ""  # pvc: the directory inside the claim


_PVC = re.compile(r"^pvc://([a-z0-9]([-a-z0-9]*[a-z0-9])?)(/.*)?$")


def check_supported(spec: models.ModelServiceSpec) -> None:
    """Raises ValueError, naming the field, for what the spec asks that this backend does
    not do yet: a warm standby pool (parking by in-place resize; docs/standby.md)."""
    if spec.autoscaling.standby_replicas > 0:
        raise ValueError(
            "spec.autoscaling.standby: not on Kubernetes yet (only the local runtime parks "
            "standby replicas; docs/standby.md); remove it or set standby.replicas: 0"
        )


def model_source(base_path: str) -> ModelSource:
    """Where ``spec.model.basePath`` points; raises ValueError naming the field."""
    if base_path.startswith(("s3://", "gs://")):
        scheme, rest = base_path.split("://", 1)
        if not rest.strip("/"):
            raise ValueError(f"spec.model.basePath: {base_path} names no bucket")
        return ModelSource(scheme, rest.rstrip("/"))
    if base_path.startswith("pvc://"):
        match = _PVC.match(base_path)
        if match is None:
            raise ValueError(
                f"spec.model.basePath: {base_path} is not pvc://<claim>/<path> "
                "(a claim name is a DNS-1123 label)"
            )
        return ModelSource("pvc", match.group(1), (match.group(3) or "").strip("/"))
    if base_path.startswith("/"):
        return ModelSource("path", base_path.rstrip("/") or "/")
    raise ValueError(
        f"spec.model.basePath: {base_path!r} cannot be read in a cluster: use s3://, gs://, "
        "pvc://<claim>/<path>, or an absolute path the image holds"
    )


# ------------------------------------------------------------------------ per revision


def revision_config(
    ms: Mapping[str, Any], spec: models.ModelServiceSpec, revision: str, version: int
) -> Doc:
    model = spec.model
    source = model_source(model.base_path)
    base = MODELS_DIR + "/" + model.name if source.scheme != "path" else source.location
    models_config = (
        "model_config_list {\n"
        "  config {\n"
        f'    name: "{model.name}"\n'
        f'    base_path: "{base}"\n'
        '    model_platform: "tensorflow"\n'
        f"    model_version_policy {{ specific {{ versions: {version} }} }}\n"
        "  }\n"
        "}\n"
    )
    data = {
        "models.config": models_config,
        "monitoring.config": (
            'prometheus_config {\n  enable: true\n  path: "/monitoring/prometheus/metrics"\n}\n'
        ),
    }
    batching = spec.runtime.batching
    if batching is not None:
        data["batching.config"] = (
            f"max_batch_size {{ value: {batching.max_batch_size} }}\n"
            f"batch_timeout_micros {{ value: {batching.batch_timeout_micros} }}\n"
        )
    name = ms["metadata"]["name"]
    return _stamp(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta(ms, f"{revision}-config", labels(name, revision, version)),
            "data": data,
        }
    )


def _fetch_container(
    spec: models.ModelServiceSpec, version: int, source: ModelSource, disk_limit: str
) -> Doc:
    target = f"{MODELS_DIR}/{spec.model.name}/{version}"
    url = f"{source.scheme}://{source.location}/{version}"
    if source.scheme == "s3":
        command = ["aws", "s3", "cp", "--recursive", "--only-show-errors", url, target]
    else:
        command = ["gsutil", "-m", "-q", "cp", "-r", url + "/*", target + "/"]
        command = ["sh", "-c", f'mkdir -p "{target}" && ' + " ".join(command)]
    return {
        "name": "fetch-model",
        "image": FETCH_IMAGES[source.scheme],
        "command": command,
        "volumeMounts": [
            {"name": "models", "mountPath": MODELS_DIR},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        # The CLIs keep their credentials' cache and config under $HOME: the uid has none.
        "env": [{"name": "HOME", "value": "/tmp"}],
        # No CPU limit (none anywhere: a limit throttles, a request is what scaling reads).
        "resources": {
            "requests": {"cpu": "100m", "memory": "256Mi", "ephemeral-storage": "64Mi"},
            "limits": {"memory": "256Mi", "ephemeral-storage": disk_limit},
        },
        "securityContext": copy.deepcopy(CONTAINER_SECURITY),
    }


def deployment(
    ms: Mapping[str, Any],
    spec: models.ModelServiceSpec,
    revision: str,
    version: int,
    replicas: int,
    *,
    weight: int = 0,
) -> Doc:
    name = ms["metadata"]["name"]
    source = model_source(spec.model.base_path)
    resources = spec.runtime.resources
    fetched = source.scheme in ("s3", "gs")
    disk, disk_limit = storage(spec, fetched)
    requests: dict[str, str] = {
        "cpu": str(resources.cpu),
        "memory": str(resources.memory),
        "ephemeral-storage": disk,
    }
    limits: dict[str, str] = {"memory": str(resources.memory), "ephemeral-storage": disk_limit}
    if resources.gpu:
        requests["nvidia.com/gpu"] = str(resources.gpu)
        limits["nvidia.com/gpu"] = str(resources.gpu)
    drain = spec.rollout.drain_seconds if spec.rollout is not None else 30
    args = [
        f"--port={GRPC_PORT}",
        f"--rest_api_port={REST_PORT}",
        f"--model_config_file={CONFIG_DIR}/models.config",
        f"--monitoring_config_file={CONFIG_DIR}/monitoring.config",
        "--file_system_poll_wait_seconds=0",
    ]
    if spec.runtime.batching is not None:
        args += ["--enable_batching", f"--batching_parameters_file={CONFIG_DIR}/batching.config"]
    mounts: list[Doc] = [
        {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    volumes: list[Doc] = [
        {"name": "config", "configMap": {"name": f"{revision}-config"}},
        {"name": "tmp", "emptyDir": {"sizeLimit": TMP_SIZE}},
    ]
    init: list[Doc] = []
    if fetched:
        size = str(pod_of(spec).model_volume_size)
        volumes.append({"name": "models", "emptyDir": {"sizeLimit": size}})
        mounts.append({"name": "models", "mountPath": MODELS_DIR, "readOnly": True})
        init.append(_fetch_container(spec, version, source, disk_limit))
    elif source.scheme == "pvc":
        volumes.append(
            {
                "name": "models",
                "persistentVolumeClaim": {"claimName": source.location, "readOnly": True},
            }
        )
        mount: Doc = {
            "name": "models",
            "mountPath": f"{MODELS_DIR}/{spec.model.name}",
            "readOnly": True,
        }
        if source.sub_path:
            mount["subPath"] = source.sub_path
        mounts.append(mount)
    lbl = labels(name, revision, version)
    config_hash = digest(revision_config(ms, spec, revision, version)["data"])
    container: Doc = {
        "name": "tfserving",
        "image": spec.runtime.image,
        "args": args,
        "env": [{"name": "HOME", "value": "/tmp"}],  # RUN_AS has no home; /tmp is writable
        "ports": [
            {"name": "tfs-grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
            {"name": "tfs-rest", "containerPort": REST_PORT, "protocol": "TCP"},
        ],
        "resources": {"requests": requests, "limits": limits},
        "readinessProbe": {
            "httpGet": {
                "path": f"/v1/models/{spec.model.name}/versions/{version}/metadata",
                "port": "tfs-rest",
            },
            "periodSeconds": 2,
            "failureThreshold": 2,
        },
        # TF Serving opens its ports once the model is loaded: the startup probe gives it
        # loadTimeoutSeconds for that, and holds liveness off until then (a fixed initial
        # delay would kill a slow loader, or wait on a fast one).
        "startupProbe": {
            "tcpSocket": {"port": "tfs-grpc"},
            "periodSeconds": STARTUP_PERIOD_S,
            "failureThreshold": -(-spec.runtime.load_timeout_seconds // STARTUP_PERIOD_S),
        },
        "livenessProbe": {
            "tcpSocket": {"port": "tfs-grpc"},
            "periodSeconds": 10,
            "failureThreshold": 6,
        },
        "lifecycle": {"preStop": {"sleep": {"seconds": drain}}} if drain > 0 else {},
        "volumeMounts": mounts,
        "securityContext": copy.deepcopy(CONTAINER_SECURITY),
    }
    if not container["lifecycle"]:
        del container["lifecycle"]
    pod_spec: Doc = {
        "securityContext": copy.deepcopy(POD_SECURITY),
        "containers": [container],
        "volumes": volumes,
        "terminationGracePeriodSeconds": drain + GRACE_EXTRA_S,
    }
    if init:
        pod_spec["initContainers"] = init
    doc: Doc = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(ms, revision, lbl) | {"annotations": {WEIGHT: str(weight)}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {LABEL_SERVICE: name, LABEL_REVISION: revision}},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0},
            },
            "template": {
                "metadata": {
                    "labels": lbl,
                    "annotations": {
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(REST_PORT),
                        "prometheus.io/path": "/monitoring/prometheus/metrics",
                        CONFIG_HASH: config_hash,
                    },
                },
                "spec": pod_spec,
            },
        },
    }
    pod_options.shape(doc["spec"]["template"], pod_of(spec))
    # The replica count and weight move every few cycles; the hash covers the rest, so a
    # changed count is a small apply and a changed template a full one.
    stamped = {**doc, "spec": {**doc["spec"], "replicas": 0}}
    stamped["metadata"] = {**doc["metadata"], "annotations": {}}
    doc["metadata"]["annotations"][APPLIED] = digest(stamped)
    return doc


def revision_service(ms: Mapping[str, Any], revision: str, version: int) -> Doc:
    name = ms["metadata"]["name"]
    return _stamp(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(ms, revision, labels(name, revision, version)),
            "spec": {
                "selector": {LABEL_SERVICE: name, LABEL_REVISION: revision},
                "ports": _service_ports(),
            },
        }
    )


def revision_pdb(ms: Mapping[str, Any], revision: str, version: int) -> Doc:
    """A PodDisruptionBudget per revision: a node drain (an eviction) takes one of its pods
    at a time, and never blocks for good (a one-replica revision's pod may go: a
    ``minAvailable`` of its size would hold a drain forever). servectl's own scale-downs
    change the Deployment, which no PDB holds."""
    name = ms["metadata"]["name"]
    return _stamp(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": _meta(ms, revision, labels(name, revision, version)),
            "spec": {
                "maxUnavailable": 1,
                "selector": {"matchLabels": {LABEL_SERVICE: name, LABEL_REVISION: revision}},
            },
        }
    )


def front_service(ms: Mapping[str, Any], revision: str | None = None) -> Doc:
    """The Service ``<service>`` in-cluster callers name: every revision's pods with the
    ``service`` traffic provider (the replica ratio is its split), else only ``revision``'s
    (``front_revision``): a Service over every revision sent in-cluster callers to a
    weight-0 A/B variant about a third of the time, past the route's weights."""
    name = ms["metadata"]["name"]
    selector = {LABEL_SERVICE: name}
    if revision is not None:
        selector[LABEL_REVISION] = revision
    return _stamp(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(ms, name, labels(name)),
            "spec": {"selector": selector, "ports": _service_ports()},
        }
    )


def front_revision(weights: Sequence[tuple[str, int, int]]) -> str | None:
    """The revision the front Service selects behind a Gateway: the one with the most
    traffic, the older on a tie (the stable at 50/50). ``weights``: (revision, version,
    weight). None when there is no revision."""
    if not weights:
        return None
    return max(weights, key=lambda rvw: (rvw[2], -rvw[1]))[0]


def _service_ports() -> list[Doc]:
    return [
        {
            "name": "grpc",
            "port": GRPC_PORT,
            "targetPort": "tfs-grpc",
            "protocol": "TCP",
            "appProtocol": "kubernetes.io/h2c",
        },
        {"name": "http", "port": REST_PORT, "targetPort": "tfs-rest", "protocol": "TCP"},
    ]


# ------------------------------------------------------------------------ routes


Match = RouteMatch
match_of = route_match


def _header_match(match: Match, grpc: bool) -> Doc:
    if match.kind == "header":
        return {"type": "Exact", "name": match.name, "value": match.value}
    pattern = f"(^|;\\s*){re.escape(match.name)}={re.escape(match.value)}(;|$)"
    if grpc:
        return {"type": "RegularExpression", "name": "cookie", "value": pattern}
    return {"type": "RegularExpression", "name": "Cookie", "value": pattern}


GRPC_SERVICES = ("tensorflow.serving.PredictionService", "tensorflow.serving.ModelService")
"""TF Serving's gRPC services: what the GRPCRoute matches."""
REST_MODELS = "/v1/models/"
"""TF Serving's REST API on a model: where the HTTPRoute's matches start."""


REST_VERBS = (":predict", ":classify", ":regress")
"""TF Serving's REST calls on a model's default version (``/v1/models/<model>:predict``)."""


def _api_matches(grpc: bool, model: str) -> list[Doc]:
    """Each route matches its own API only. On a listener that carries both, a GRPCRoute
    with no match takes every request, REST too: Traefik sent REST predictions to the
    gRPC port (500) until the routes said which requests are theirs.

    REST matches only this model's paths, so services of other models compose on one
    Gateway: ``/v1/models/<model>`` and below (a PathPrefix matches whole path segments:
    status, metadata, ``/versions/<n>:predict``, ``/labels/<l>:predict``) and the three
    calls on the default version, whose last segment is ``<model>:predict`` (no prefix of
    segments matches it). gRPC requests name the model inside the message: a GRPCRoute
    can match only the service's methods, so hostnames or a listener of its own keep it
    apart (``grpc_unrouted``)."""
    if grpc:
        return [{"method": {"type": "Exact", "service": service}} for service in GRPC_SERVICES]
    base = f"{REST_MODELS}{model}"
    return [
        {"path": {"type": "PathPrefix", "value": base}},
        *({"path": {"type": "Exact", "value": base + verb}} for verb in REST_VERBS),
    ]


def _names(ms: Mapping[str, Any]) -> tuple[str, str]:
    meta = ms.get("metadata") or {}
    return str(meta.get("name") or ""), str(meta.get("namespace") or "")


def route_hostnames(ms: Mapping[str, Any], options: Options, *, grpc: bool = False) -> list[str]:
    """The route's hostnames: ``spec.routing``'s, else the controller's pattern for the
    service (``{name}``, ``{namespace}``), else none (every host the listener takes)."""
    routing = (ms.get("spec") or {}).get("routing") or {}
    given = routing.get("grpcHostnames" if grpc else "hostnames") or []
    if given:
        return [str(h) for h in given]
    pattern = options.grpc_hostnames if grpc else options.hostnames
    if not pattern:
        return []
    name, namespace = _names(ms)
    return [pattern.format(name=name, namespace=namespace)]


def hostname_pattern_problem(pattern: str | None) -> str | None:
    """What is wrong with a hostname pattern (``{name}``, ``{namespace}``), or None."""
    if not pattern:
        return None
    try:
        host = pattern.format(name="svc", namespace="ns")
    except (KeyError, IndexError, ValueError) as exc:
        return f"use only {{name}} and {{namespace}} ({exc})"
    if len(host) > 253 or not re.match(models.HOSTNAME, host):
        return (
            f"gives {host!r}, not a hostname (lowercase RFC 1123, an optional leading "
            "'*.'); e.g. '{name}.{namespace}.models.example.com'"
        )
    return None


def grpc_unrouted(ms: Mapping[str, Any], options: Options) -> str | None:
    """Why the service gets no GRPCRoute, or None when it gets one: the Gateway API lets a
    GRPCRoute and an HTTPRoute share a listener only with hostnames that do not intersect
    (a conformant Gateway accepts only one of the two otherwise: the REST route could be
    the one refused), so gRPC needs a listener of its own or hostnames of its own."""
    if options.grpc_listener and options.grpc_listener != options.http_listener:
        return None
    rest = route_hostnames(ms, options)
    grpc = route_hostnames(ms, options, grpc=True)
    if not grpc:
        return (
            "gRPC is not routed through the Gateway: it shares the REST listener and has no "
            "hostnames of its own (set spec.routing.grpcHostnames, or give the controller "
            "--grpc-hostnames or --grpc-listener)"
        )
    clash = models.shared_hostname(rest, grpc)
    if clash is not None:
        r, g = clash
        return (
            f"gRPC is not routed through the Gateway: its hostname {g} matches the REST "
            f"route's {r} on a shared listener (give gRPC hostnames REST does not match)"
        )
    return None


def route(
    ms: Mapping[str, Any],
    weights: Sequence[tuple[str, int]],
    *,
    header_revision: str | None,
    match: Match | None,
    options: Options,
    grpc: bool = False,
) -> Doc:
    """The HTTPRoute (or GRPCRoute) of the service: ``weights`` per revision Service."""
    name = ms["metadata"]["name"]
    model = str(((ms.get("spec") or {}).get("model") or {}).get("name") or name)
    port = GRPC_PORT if grpc else REST_PORT
    rules: list[Doc] = []
    if header_revision is not None and match is not None:
        header = _header_match(match, grpc)
        rules.append(
            {
                "matches": [{**m, "headers": [header]} for m in _api_matches(grpc, model)],
                "backendRefs": [{"name": header_revision, "port": port, "weight": 1}],
            }
        )
    rules.append(
        {
            "matches": _api_matches(grpc, model),
            "backendRefs": [{"name": rev, "port": port, "weight": int(w)} for rev, w in weights],
        }
    )
    spec: Doc = {"rules": rules}
    hostnames = route_hostnames(ms, options, grpc=grpc)
    if hostnames:
        spec["hostnames"] = hostnames
    if options.gateway is not None:
        ns, gw = options.gateway
        ref: Doc = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gw}
        if ns:
            ref["namespace"] = ns
        listener = options.grpc_listener if grpc else options.http_listener
        if listener:
            ref["sectionName"] = listener
        spec["parentRefs"] = [ref]
    return _stamp(
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "GRPCRoute" if grpc else "HTTPRoute",
            "metadata": _meta(ms, route_name(name, grpc=grpc), labels(name)),
            "spec": spec,
        }
    )


def route_name(service: str, *, grpc: bool = False) -> str:
    """The service's HTTPRoute is ``<service>``, its GRPCRoute ``<service>-grpc``."""
    return f"{service}-grpc" if grpc else service


def route_weights(doc: Mapping[str, Any] | None) -> tuple[dict[str, int], str | None]:
    """What a live route applies: percent per revision of the unmatched traffic, and the
    revision its header rule sends to (None: no header rule)."""
    if doc is None:
        return {}, None
    rules = (doc.get("spec") or {}).get("rules") or []
    header: str | None = None
    weights: dict[str, int] = {}
    for rule in rules:
        refs = rule.get("backendRefs") or []
        # The API server defaults a rule's matches to the path prefix "/": the header
        # rule is the one that matches on headers.
        if any(m.get("headers") for m in rule.get("matches") or []):
            if refs:
                header = str(refs[0].get("name"))
            continue
        total = sum(int(r.get("weight", 1)) for r in refs)
        for r in refs:
            w = int(r.get("weight", 1))
            weights[str(r.get("name"))] = round(100 * w / total) if total else 0
    return weights, header


# ------------------------------------------------------------------------ pods


def pod_ready(pod: Mapping[str, Any]) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def pod_ready_since(pod: Mapping[str, Any]) -> str | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready" and c.get("status") == "True":
            value = c.get("lastTransitionTime")
            return str(value) if value else None
    return None


def pods_refused(deployment: Mapping[str, Any]) -> str:
    """Why the cluster refuses to create a Deployment's pods, in its own words (the
    ReplicaFailure condition the Deployment copies from its ReplicaSet: Pod Security
    admission naming the policy and the fields, a quota, an admission policy); "" if it
    does not."""
    for c in (deployment.get("status") or {}).get("conditions") or []:
        if c.get("type") == "ReplicaFailure" and c.get("status") == "True":
            return str(c.get("message") or c.get("reason") or "ReplicaFailure")
    return ""


def pod_terminating(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def pod_finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
