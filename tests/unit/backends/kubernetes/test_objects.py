"""The documents a ModelService runs as (pure builders), without an API server."""

from __future__ import annotations

from typing import Any

import pytest

from servectl.api import models
from servectl.backends.kubernetes import objects as obj

MS = {"metadata": {"name": "resnet", "namespace": "ml", "uid": "u-1"}}


def spec(**over: Any) -> models.ModelServiceSpec:
    doc: dict[str, Any] = {"model": {"name": "resnet", "basePath": "s3://b/resnet", "version": 3}}
    doc.update(over)
    return models.ModelServiceSpec.model_validate(doc)


@pytest.mark.parametrize(
    ("base", "scheme", "location", "sub"),
    [
        ("s3://b/resnet/", "s3", "b/resnet", ""),
        ("gs://b/x", "gs", "b/x", ""),
        ("pvc://models/resnet/v", "pvc", "models", "resnet/v"),
        ("pvc://models", "pvc", "models", ""),
        ("/opt/models/resnet", "path", "/opt/models/resnet", ""),
    ],
)
def test_model_source(base: str, scheme: str, location: str, sub: str) -> None:
    assert obj.model_source(base) == obj.ModelSource(scheme, location, sub)


@pytest.mark.parametrize("base", ["models/resnet", "s3://", "pvc://Bad_Claim/x", "http://x/y"])
def test_model_source_refuses_what_a_pod_cannot_read_naming_the_field(base: str) -> None:
    with pytest.raises(ValueError, match=r"spec\.model\.basePath"):
        obj.model_source(base)


def test_deployment_runs_tf_serving_with_that_version_only() -> None:
    s = spec(
        runtime={
            "resources": {"cpu": "2", "memory": "4Gi", "gpu": 1},
            "batching": {"maxBatchSize": 32, "batchTimeoutMicros": 2000},
        },
        rollout={"drainSeconds": 20},
    )
    dep = obj.deployment(MS, s, "resnet-v3", 3, 4, weight=10)
    assert dep["spec"]["replicas"] == 4
    assert dep["metadata"]["annotations"][obj.WEIGHT] == "10"
    assert dep["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    # ephemeral-storage: the fetched model's emptyDir (4Gi) and 64Mi asked for; its
    # limit adds /tmp (256Mi) and the logs (256Mi).
    assert c["resources"]["requests"] == {
        "cpu": "2",
        "memory": "4Gi",
        "nvidia.com/gpu": "1",
        "ephemeral-storage": f"{4 * 1024 + 64}Mi",
    }
    assert c["resources"]["limits"]["ephemeral-storage"] == f"{4 * 1024 + 512}Mi"
    fetch = pod["initContainers"][0]["resources"]["limits"]
    assert fetch == {"memory": "256Mi", "ephemeral-storage": f"{4 * 1024 + 512}Mi"}
    assert "--enable_batching" in c["args"]
    assert c["lifecycle"]["preStop"]["sleep"]["seconds"] == 20
    assert pod["terminationGracePeriodSeconds"] == 20 + obj.GRACE_EXTRA_S
    assert pod["initContainers"][0]["command"][:3] == ["aws", "s3", "cp"]
    assert pod["initContainers"][0]["command"][-2:] == ["s3://b/resnet/3", "/models/resnet/3"]
    assert dep["spec"]["template"]["metadata"]["labels"][obj.LABEL_VERSION] == "3"
    config = obj.revision_config(MS, s, "resnet-v3", 3)
    assert "specific { versions: 3 }" in config["data"]["models.config"]
    assert 'base_path: "/models/resnet"' in config["data"]["models.config"]
    assert "max_batch_size { value: 32 }" in config["data"]["batching.config"]


def test_a_config_change_changes_the_pod_template_so_the_pods_roll() -> None:
    """TF Serving reads its config files at start: a batching change that only rewrote the
    ConfigMap left the running pods on the old one (issue 27, item 6)."""

    def template(**over: Any) -> dict[str, Any]:
        doc: dict[str, Any] = obj.deployment(MS, spec(**over), "resnet-v3", 3, 2)
        return doc["spec"]["template"]

    batching = {"maxBatchSize": 32, "batchTimeoutMicros": 2000}
    base = template(runtime={"batching": batching})
    assert base == template(runtime={"batching": batching})  # the same spec: no roll
    assert obj.CONFIG_HASH in base["metadata"]["annotations"]
    bigger = template(runtime={"batching": {**batching, "maxBatchSize": 64}})
    assert bigger["metadata"]["annotations"] != base["metadata"]["annotations"]
    assert bigger["spec"] == base["spec"]  # only the config's hash tells them apart
    assert template() != base  # batching off: other args and another config
    # What does not reach a pod does not roll it: the replica count and the weight.
    assert obj.deployment(MS, spec(), "resnet-v3", 3, 5, weight=40)["spec"]["template"] == (
        template()
    )


@pytest.mark.parametrize(("load", "threshold"), [(None, 300), (90, 45), (12, 6)])
def test_the_startup_probe_spans_the_models_load_time_and_holds_liveness_off(
    load: int | None, threshold: int
) -> None:
    runtime = {} if load is None else {"loadTimeoutSeconds": load}
    c = obj.deployment(MS, spec(runtime=runtime), "resnet-v3", 3, 1)["spec"]["template"]["spec"][
        "containers"
    ][0]
    startup = c["startupProbe"]
    assert startup["tcpSocket"] == {"port": "tfs-grpc"}  # open once the model is loaded
    assert startup["periodSeconds"] * startup["failureThreshold"] >= (load or 600)
    assert startup["failureThreshold"] == threshold
    assert "initialDelaySeconds" not in c["livenessProbe"]  # the startup probe gates it


def test_a_load_timeout_out_of_range_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="loadTimeoutSeconds"):
        spec(runtime={"loadTimeoutSeconds": 5})


def test_a_pvc_is_mounted_read_only_and_a_path_read_in_place() -> None:
    dep = obj.deployment(
        MS, spec(model={"name": "resnet", "basePath": "pvc://m/r", "version": 1}), "resnet-v1", 1, 1
    )
    pod = dep["spec"]["template"]["spec"]
    assert "initContainers" not in pod
    claim = next(v for v in pod["volumes"] if v["name"] == "models")
    assert claim["persistentVolumeClaim"] == {"claimName": "m", "readOnly": True}
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "models")
    assert mount["subPath"] == "r" and mount["readOnly"]
    local = spec(model={"name": "resnet", "basePath": "/opt/m", "version": 1})
    cfg = obj.revision_config(MS, local, "resnet-v1", 1)
    assert 'base_path: "/opt/m"' in cfg["data"]["models.config"]


def test_the_hash_ignores_replicas_and_weight_but_not_the_template() -> None:
    s = spec()
    a = obj.deployment(MS, s, "resnet-v3", 3, 2, weight=0)
    b = obj.deployment(MS, s, "resnet-v3", 3, 7, weight=50)
    c = obj.deployment(MS, spec(runtime={"image": "tensorflow/serving:2.18.0"}), "resnet-v3", 3, 2)
    assert obj.applied_hash(a) == obj.applied_hash(b)
    assert obj.applied_hash(a) != obj.applied_hash(c)
    assert obj.applied_hash(obj.front_service(MS)) == obj.applied_hash(obj.front_service(MS))


def test_routes_carry_weights_and_the_header_rule_first() -> None:
    s = spec(
        rollout={
            "strategy": "abTest",
            "abTest": {"match": {"header": {"name": "x-variant", "value": "b"}}},
        }
    )
    match = obj.match_of(s)
    assert match == obj.Match("header", "x-variant", "b")
    r = obj.route(
        MS,
        [("resnet-v2", 100), ("resnet-v3", 0)],
        header_revision="resnet-v3",
        match=match,
        options=obj.Options(gateway=("infra", "public")),
    )
    assert r["kind"] == "HTTPRoute"
    assert r["spec"]["parentRefs"] == [
        {
            "group": "gateway.networking.k8s.io",
            "kind": "Gateway",
            "name": "public",
            "namespace": "infra",
        }
    ]
    first = r["spec"]["rules"][0]
    assert first["matches"][0]["headers"][0] == {"type": "Exact", "name": "x-variant", "value": "b"}
    # As the API server returns it: every rule gets a default path match.
    for rule in r["spec"]["rules"]:
        rule.setdefault("matches", [{"path": {"type": "PathPrefix", "value": "/"}}])
    assert obj.route_weights(r) == ({"resnet-v2": 100, "resnet-v3": 0}, "resnet-v3")
    g = obj.route(
        MS,
        [("resnet-v2", 60), ("resnet-v3", 40)],
        header_revision=None,
        match=match,
        options=obj.Options(),
        grpc=True,
    )
    assert g["kind"] == "GRPCRoute" and g["metadata"]["name"] == "resnet-grpc"
    assert "parentRefs" not in g["spec"]
    assert obj.route_weights(g) == ({"resnet-v2": 60, "resnet-v3": 40}, None)
    assert obj.route_weights(None) == ({}, None)


def test_each_route_matches_its_own_api_only() -> None:
    """On a listener carrying both, a GRPCRoute with no match took every request: Traefik
    sent REST predictions to the gRPC port. Each rule, the header rule too, names its API:
    TF Serving's gRPC services, or the model's own REST paths."""
    m = obj.Match("header", "x-variant", "b")
    for grpc in (False, True):
        r = obj.route(
            MS,
            [("a", 90), ("b", 10)],
            header_revision="b",
            match=m,
            options=obj.Options(),
            grpc=grpc,
        )
        for rule in r["spec"]["rules"]:
            if grpc:
                services = {x["method"]["service"] for x in rule["matches"]}
                assert services == set(obj.GRPC_SERVICES), rule
            else:
                assert [x["path"] for x in rule["matches"]] == [
                    {"type": "PathPrefix", "value": "/v1/models/resnet"},
                    {"type": "Exact", "value": "/v1/models/resnet:predict"},
                    {"type": "Exact", "value": "/v1/models/resnet:classify"},
                    {"type": "Exact", "value": "/v1/models/resnet:regress"},
                ], rule
        assert all(x["headers"] for x in r["spec"]["rules"][0]["matches"])
        assert obj.route_weights(r) == ({"a": 90, "b": 10}, "b")


def _gateway_matches(path_match: dict[str, str], path: str) -> bool:
    """The Gateway API's path semantics: Exact is the whole path; PathPrefix matches whole
    '/'-separated elements (a trailing '/' ignored), so /a/b matches /a/b and /a/b/c, not
    /a/bc."""
    value = path_match["value"]
    if path_match["type"] == "Exact":
        return path == value
    prefix = value.rstrip("/").split("/")
    return path.rstrip("/").split("/")[: len(prefix)] == prefix


@pytest.mark.parametrize(
    ("path", "routed"),
    [
        ("/v1/models/resnet", True),  # status
        ("/v1/models/resnet/metadata", True),
        ("/v1/models/resnet:predict", True),
        ("/v1/models/resnet:classify", True),
        ("/v1/models/resnet:regress", True),
        ("/v1/models/resnet/versions/3:predict", True),
        ("/v1/models/resnet/labels/stable:predict", True),
        ("/v1/models/resnet2:predict", False),  # another model whose name starts the same
        ("/v1/models/resnet2", False),
        ("/v1/models/bert:predict", False),
        ("/v1/models/resnet:predictx", False),
        ("/monitoring/prometheus/metrics", False),
        ("/", False),
    ],
)
def test_a_rest_route_takes_its_own_models_calls_and_no_other_services(
    path: str, routed: bool
) -> None:
    """Two services on one Gateway: each HTTPRoute, its A/B header rule too, matches only
    its model's paths, so neither takes the other's requests (issue 27, item 1)."""
    m = obj.Match("header", "x-variant", "b")
    r = obj.route(MS, [("a", 100)], header_revision="b", match=m, options=obj.Options())
    for rule in r["spec"]["rules"]:
        hits = [x for x in rule["matches"] if _gateway_matches(x["path"], path)]
        assert bool(hits) is routed, (path, rule)


def test_hostnames_come_from_the_spec_else_the_controllers_pattern() -> None:
    pattern = obj.Options(
        hostnames="{name}.{namespace}.models.example.com",
        grpc_hostnames="{name}-grpc.{namespace}.models.example.com",
    )
    assert obj.route_hostnames(MS, obj.Options()) == []
    assert obj.route_hostnames(MS, pattern) == ["resnet.ml.models.example.com"]
    assert obj.route_hostnames(MS, pattern, grpc=True) == ["resnet-grpc.ml.models.example.com"]
    own = {**MS, "spec": {"routing": {"hostnames": ["r.example.com"]}}}
    assert obj.route_hostnames(own, pattern) == ["r.example.com"]
    assert obj.route_hostnames(own, pattern, grpc=True) == ["resnet-grpc.ml.models.example.com"]
    r = obj.route(own, [("a", 100)], header_revision=None, match=None, options=pattern)
    assert r["spec"]["hostnames"] == ["r.example.com"]
    bare = obj.route(MS, [("a", 100)], header_revision=None, match=None, options=obj.Options())
    assert "hostnames" not in bare["spec"]


def test_each_route_attaches_to_its_listener() -> None:
    options = obj.Options(gateway=("infra", "public"), http_listener="web", grpc_listener="grpc")
    for grpc, listener in ((False, "web"), (True, "grpc")):
        r = obj.route(
            MS, [("a", 100)], header_revision=None, match=None, options=options, grpc=grpc
        )
        assert r["spec"]["parentRefs"][0]["sectionName"] == listener
    plain = obj.route(
        MS, [("a", 100)], header_revision=None, match=None, options=obj.Options(gateway=("", "gw"))
    )
    assert plain["spec"]["parentRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"}
    ]


@pytest.mark.parametrize(
    ("options", "routing", "why"),
    [
        # One listener, no hostnames: the two routes would conflict.
        (obj.Options(), {}, "no hostnames of its own"),
        (obj.Options(grpc_listener="web", http_listener="web"), {}, "no hostnames of its own"),
        # gRPC named, REST on every host of the same listener: they intersect.
        (obj.Options(), {"grpcHostnames": ["g.example.com"]}, "matches the REST route's *"),
        (
            obj.Options(),
            {"hostnames": ["*.example.com"], "grpcHostnames": ["g.example.com"]},
            "matches the REST route's *.example.com",
        ),
        # Apart: a listener of its own, or hostnames that do not meet.
        (obj.Options(grpc_listener="grpc"), {}, None),
        (obj.Options(grpc_listener="grpc", http_listener="web"), {}, None),
        (obj.Options(), {"hostnames": ["r.example.com"], "grpcHostnames": ["g.example.com"]}, None),
        (
            obj.Options(hostnames="{name}.x.io", grpc_hostnames="{name}-grpc.x.io"),
            {},
            None,
        ),
    ],
)
def test_grpc_gets_a_route_only_apart_from_rest(
    options: obj.Options, routing: dict[str, Any], why: str | None
) -> None:
    """The Gateway API lets a GRPCRoute share a listener with an HTTPRoute only on hostnames
    that do not intersect; a conformant Gateway refuses one of the two otherwise."""
    found = obj.grpc_unrouted({**MS, "spec": {"routing": routing}}, options)
    if why is None:
        assert found is None
    else:
        assert found is not None and why in found, found
        assert "spec.routing.grpcHostnames" in found or "gRPC hostnames" in found


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        (None, None),
        ("{name}.{namespace}.models.example.com", None),
        ("*.{namespace}.example.com", None),
        ("{name}.{ns}.example.com", "use only {name} and {namespace}"),
        ("{name}_x.example.com", "not a hostname"),
        ("{name}.Example.com", "not a hostname"),
    ],
)
def test_hostname_patterns_are_checked(pattern: str | None, problem: str | None) -> None:
    found = obj.hostname_pattern_problem(pattern)
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_a_cookie_match_is_a_regex_on_the_cookie_header() -> None:
    m = obj.Match("cookie", "variant", "b.1")
    r = obj.route(MS, [("a", 100)], header_revision="b", match=m, options=obj.Options())
    header = r["spec"]["rules"][0]["matches"][0]["headers"][0]
    assert header["type"] == "RegularExpression" and header["name"] == "Cookie"
    import re

    assert re.search(header["value"], "a=1; variant=b.1; c=2")
    assert not re.search(header["value"], "variant=bx1")


@pytest.mark.parametrize("base", ["s3://b/resnet", "pvc://models/resnet"])
def test_model_pods_are_what_pod_security_restricted_asks(base: str) -> None:
    """Restricted (Pod Security Standards): non-root with a numeric uid, RuntimeDefault
    seccomp, no privilege escalation, every capability dropped; here also a read-only root
    with /tmp an emptyDir of bounded size, $HOME there. The admission itself is tried on a
    real API server (tests/integration/k8s) and node (the node tests' namespace enforces
    it)."""
    s = spec(model={"name": "resnet", "basePath": base, "version": 3})
    pod = obj.deployment(MS, s, "resnet-v3", 3, 1)["spec"]["template"]["spec"]
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": obj.RUN_AS,
        "runAsGroup": obj.RUN_AS,
        "fsGroup": obj.RUN_AS,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert obj.RUN_AS > 0
    containers = pod["containers"] + pod.get("initContainers", [])
    assert len(containers) == (2 if base.startswith("s3") else 1)
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tmp"] == {"name": "tmp", "emptyDir": {"sizeLimit": obj.TMP_SIZE}}
    assert not [v for v in pod["volumes"] if "hostPath" in v]
    for c in containers:
        assert c["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        }, c["name"]
        assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"], c["name"]
        assert {"name": "HOME", "value": "/tmp"} in c["env"], c["name"]
    # Each Deployment gets its own copies: changing one changes no other.
    pod["securityContext"]["runAsUser"] = 0
    again = obj.deployment(MS, s, "resnet-v3", 3, 1)["spec"]["template"]["spec"]
    assert again["securityContext"]["runAsUser"] == obj.RUN_AS


def test_a_deployments_replica_failure_is_why_its_pods_are_refused() -> None:
    message = 'pods "r-1" is forbidden: violates PodSecurity "restricted:latest": seccompProfile'
    failing = {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate"}
    dep = {
        "status": {
            "conditions": [{"type": "Available", "status": "False"}, failing | {"message": message}]
        }
    }
    assert obj.pods_refused(dep) == message
    assert obj.pods_refused({"status": {"conditions": [failing]}}) == "FailedCreate"
    assert obj.pods_refused({"status": {"conditions": [failing | {"status": "False"}]}}) == ""
    assert obj.pods_refused({}) == ""


def test_pod_readiness() -> None:
    ready = {
        "metadata": {},
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
            ],
        },
    }
    assert obj.pod_ready(ready)
    assert obj.pod_ready_since(ready) == "2026-01-01T00:00:00Z"
    leaving = {**ready, "metadata": {"deletionTimestamp": "2026-01-01T00:00:01Z"}}
    assert not obj.pod_ready(leaving) and obj.pod_terminating(leaving)
    assert not obj.pod_ready({"metadata": {}, "status": {"phase": "Pending"}})
    assert obj.pod_finished({"status": {"phase": "Failed"}})


def test_tf_servings_own_parsers_read_the_config_and_flags_servectl_writes() -> None:
    """The ConfigMap's text protos parse with TF Serving's own protos (tensorflow-serving-api),
    and the container's flags with the TF-Serving-compatible model server's parser."""
    from servectl.modelserver.batching import parse_batching_parameters_text
    from servectl.modelserver.config import parse_model_config_text
    from servectl.modelserver.monitoring import parse_monitoring_config_text
    from servectl.modelserver.server import parse_flags

    s = spec(runtime={"batching": {"maxBatchSize": 16, "batchTimeoutMicros": 500}})
    data = obj.revision_config(MS, s, "resnet-v3", 3)["data"]
    (model,) = parse_model_config_text(data["models.config"])
    assert (model.name, model.base_path) == ("resnet", "/models/resnet")
    assert model.policy.kind == "specific" and model.policy.versions == (3,)
    monitoring = parse_monitoring_config_text(data["monitoring.config"])
    assert monitoring.prometheus_enabled
    assert monitoring.prometheus_path == "/monitoring/prometheus/metrics"
    batching = parse_batching_parameters_text(data["batching.config"])
    assert batching.max_batch_size == 16 and batching.batch_timeout_micros == 500
    container = obj.deployment(MS, s, "resnet-v3", 3, 1)["spec"]["template"]["spec"]["containers"][
        0
    ]
    flags = parse_flags(container["args"])
    assert (flags.port, flags.rest_api_port) == (obj.GRPC_PORT, obj.REST_PORT)
    assert flags.model_config_file == "/etc/servectl/models.config"
    assert flags.enable_batching


def test_the_front_service_selects_the_revision_with_the_most_traffic() -> None:
    """In-cluster callers of ``<service>`` must not reach a weight-0 A/B variant (issue 27,
    item 2): behind a Gateway the front Service selects one revision, the one with the
    most traffic (the older on a tie); with the service provider, every revision (the
    replica ratio is that provider's split)."""
    assert obj.front_revision([]) is None
    assert obj.front_revision([("r-v1", 1, 100), ("r-v2", 2, 0)]) == "r-v1"  # A/B: B at 0
    assert obj.front_revision([("r-v1", 1, 70), ("r-v2", 2, 30)]) == "r-v1"
    assert obj.front_revision([("r-v1", 1, 50), ("r-v2", 2, 50)]) == "r-v1"
    assert obj.front_revision([("r-v1", 1, 10), ("r-v2", 2, 90)]) == "r-v2"
    assert obj.front_revision([("r-v2", 2, 0), ("r-v3", 3, 0)]) == "r-v2"
    one = obj.front_service(MS, "resnet-v1")
    assert one["spec"]["selector"] == {obj.LABEL_SERVICE: "resnet", obj.LABEL_REVISION: "resnet-v1"}
    every = obj.front_service(MS)
    assert every["spec"]["selector"] == {obj.LABEL_SERVICE: "resnet"}
    assert obj.applied_hash(one) != obj.applied_hash(every)  # a change of revision is applied
