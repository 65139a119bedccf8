"""spec.runtime.pod onto the revision's pod template (servectl.backends.kubernetes.pod_options)."""

from __future__ import annotations

from typing import Any

from servectl.api import models
from servectl.backends.kubernetes import objects as obj

MS = {"metadata": {"name": "resnet", "namespace": "ml", "uid": "u-1"}}


def spec(base: str = "s3://b/resnet", **pod: Any) -> models.ModelServiceSpec:
    return models.ModelServiceSpec.model_validate(
        {"model": {"name": "resnet", "basePath": base, "version": 3}, "runtime": {"pod": pod}}
    )


def template(s: models.ModelServiceSpec) -> dict[str, Any]:
    return obj.deployment(MS, s, "resnet-v3", 3, 2)["spec"]["template"]  # type: ignore[no-any-return]


def test_no_options_leave_the_pod_as_servectl_makes_it() -> None:
    pod = template(spec())["spec"]
    for key in (
        "serviceAccountName",
        "nodeSelector",
        "tolerations",
        "affinity",
        "imagePullSecrets",
    ):
        assert key not in pod
    assert [v["name"] for v in pod["volumes"]] == ["config", "tmp", "models"]
    models_volume = next(v for v in pod["volumes"] if v["name"] == "models")
    assert models_volume["emptyDir"] == {"sizeLimit": "4Gi"}  # the default limit
    # A claim's model is not on the node's disk: only /tmp and the logs count.
    claimed = template(spec("pvc://models/resnet"))["spec"]["containers"][0]["resources"]
    assert claimed["requests"]["ephemeral-storage"] == "64Mi"
    assert claimed["limits"]["ephemeral-storage"] == "512Mi"


def test_options_reach_the_pod_and_both_containers() -> None:
    credentials = {
        "name": "AWS_ACCESS_KEY_ID",
        "valueFrom": {"secretKeyRef": {"name": "s3", "key": "id"}},
    }
    s = spec(
        serviceAccountName="reader",
        imagePullSecrets=["registry"],
        env=[credentials, {"name": "HOME", "value": "/home/x"}],
        envFrom=[{"configMapRef": {"name": "settings"}}],
        volumes=[{"name": "extras", "configMap": {"name": "extras"}}],
        volumeMounts=[{"name": "extras", "mountPath": "/etc/extras"}],
        nodeSelector={"pool": "serving"},
        tolerations=[{"key": "gpu", "operator": "Exists"}],
        affinity={"podAntiAffinity": {}},
        topologySpreadConstraints=[
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}
        ],
        priorityClassName="serving",
        labels={"team": "ranking", "servectl-like": "no"},
        annotations={"cost-center": "42"},
        modelVolumeSize="50Gi",
    )
    t = template(s)
    pod, meta = t["spec"], t["metadata"]
    assert pod["serviceAccountName"] == "reader"
    assert pod["imagePullSecrets"] == [{"name": "registry"}]
    assert pod["nodeSelector"] == {"pool": "serving"}
    assert pod["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert pod["affinity"] == {"podAntiAffinity": {}}
    assert pod["topologySpreadConstraints"][0]["topologyKey"] == "zone"
    assert pod["priorityClassName"] == "serving"
    assert [v["name"] for v in pod["volumes"]] == ["config", "tmp", "models", "extras"]
    assert (
        next(v for v in pod["volumes"] if v["name"] == "models")["emptyDir"]["sizeLimit"] == "50Gi"
    )
    server, fetch = pod["containers"][0], pod["initContainers"][0]
    assert server["volumeMounts"][-1] == {"name": "extras", "mountPath": "/etc/extras"}
    assert {"name": "extras", "mountPath": "/etc/extras"} not in fetch["volumeMounts"]
    for c in (server, fetch):  # the fetch needs the credentials most
        assert credentials in c["env"]
        assert [e["value"] for e in c["env"] if e["name"] == "HOME"] == ["/home/x"]  # the user's
        assert c["envFrom"] == [{"configMapRef": {"name": "settings"}}]
    # servectl's labels stay (selectors and scrape config key on them); the user's are added.
    assert meta["labels"]["team"] == "ranking"
    assert (
        meta["labels"][obj.LABEL_REVISION] == "resnet-v3"
        and meta["labels"][obj.MANAGED_BY] == "servectl"
    )
    assert meta["annotations"]["cost-center"] == "42" and obj.CONFIG_HASH in meta["annotations"]


def test_a_changed_option_changes_the_template_so_the_pods_roll() -> None:
    a = obj.deployment(MS, spec(), "resnet-v3", 3, 2)
    b = obj.deployment(MS, spec(nodeSelector={"pool": "b"}), "resnet-v3", 3, 2)
    assert a["metadata"]["annotations"][obj.APPLIED] != b["metadata"]["annotations"][obj.APPLIED]
    assert a["spec"]["template"] != b["spec"]["template"]


def test_each_revision_gets_a_disruption_budget_that_never_holds_a_drain() -> None:
    pdb = obj.revision_pdb(MS, "resnet-v3", 3)
    assert (pdb["apiVersion"], pdb["kind"]) == ("policy/v1", "PodDisruptionBudget")
    assert pdb["spec"] == {
        "maxUnavailable": 1,
        "selector": {"matchLabels": {obj.LABEL_SERVICE: "resnet", obj.LABEL_REVISION: "resnet-v3"}},
    }
    assert pdb["metadata"]["labels"][obj.MANAGED_BY] == "servectl"
    assert pdb["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    selector = pdb["spec"]["selector"]["matchLabels"]
    pod_labels = template(spec())["metadata"]["labels"]
    assert selector.items() <= pod_labels.items()
