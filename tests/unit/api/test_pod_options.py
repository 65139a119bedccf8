"""spec.runtime.pod: the model checks what servectl's own pod fields need (the API server
checks Kubernetes' types when the Deployment is applied)."""

from __future__ import annotations

from typing import Any

import pytest

from servectl.api import models, validation


def doc(pod: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "servectl.io/v1alpha1",
        "kind": "ModelService",
        "metadata": {"name": "a"},
        "spec": {
            "model": {"name": "m", "basePath": "s3://b/m", "version": 1},
            "runtime": {"pod": pod},
        },
    }


def test_every_option_is_accepted_and_defaults_are_empty() -> None:
    assert models.PodOptions().model_dump(exclude_defaults=True) == {}
    pod = {
        "serviceAccountName": "model-reader",
        "imagePullSecrets": ["registry"],
        "env": [{"name": "AWS_REGION", "value": "eu-west-1"}],
        "envFrom": [{"secretRef": {"name": "s3-credentials"}}],
        "volumes": [{"name": "extras", "configMap": {"name": "extras"}}],
        "volumeMounts": [{"name": "extras", "mountPath": "/etc/extras", "readOnly": True}],
        "nodeSelector": {"gpu": "a100"},
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {}},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone"}],
        "priorityClassName": "serving",
        "labels": {"team": "ranking"},
        "annotations": {"cost-center": "42"},
        "modelVolumeSize": "50Gi",
    }
    options = validation.load_model_service(doc(pod)).spec.runtime.pod
    assert options.model_dump(mode="json", by_alias=True, exclude_defaults=True) == pod


@pytest.mark.parametrize(
    ("pod", "message"),
    [
        (
            {"volumes": [{"name": "models", "emptyDir": {}}]},
            "spec.runtime.pod.volumes[0].name: volume 'models' is servectl's own",
        ),
        (
            {"volumeMounts": [{"name": "x", "mountPath": "/data"}]},
            "spec.runtime.pod.volumeMounts[0].name: mount of volume 'x', which "
            "spec.runtime.pod.volumes does not have",
        ),
        (
            {
                "volumes": [{"name": "x", "emptyDir": {}}],
                "volumeMounts": [{"name": "x", "mountPath": "/etc/servectl/extra"}],
            },
            "spec.runtime.pod.volumeMounts[0].mountPath: /etc/servectl/extra is under "
            "/etc/servectl",
        ),
        (
            {"volumes": [{"name": "x", "emptyDir": {}}], "volumeMounts": [{"name": "x"}]},
            "spec.runtime.pod.volumeMounts[0].mountPath: mount of 'x' has no absolute mountPath",
        ),
        ({"env": [{"value": "1"}]}, "spec.runtime.pod.env[0]: variable 0 has no name"),
        ({"env": [{"name": "1X", "value": "1"}]}, "spec.runtime.pod.env[0].name: '1X' is not"),
        (
            {"labels": {"servectl.io/revision": "x"}},
            "spec.runtime.pod.labels['servectl.io/revision']: label servectl.io/revision is "
            "servectl's own",
        ),
        ({"imagePullSecrets": ["Bad_Name"]}, "spec.runtime.pod.imagePullSecrets[0]: 'Bad_Name'"),
        ({"modelVolumeSize": "0"}, "spec.runtime.pod.modelVolumeSize: the model volume's size"),
        ({"serviceAccountName": "Not Valid"}, "spec.runtime.pod.serviceAccountName"),
        ({"hostNetwork": True}, "spec.runtime.pod.hostNetwork"),  # not an option: refused
    ],
)
def test_bad_options_are_refused_naming_the_field(pod: dict[str, Any], message: str) -> None:
    with pytest.raises(validation.SpecError) as refused:
        validation.load_model_service(doc(pod))
    assert message in str(refused.value), str(refused.value)
