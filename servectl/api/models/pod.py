"""spec.runtime.pod: what a cluster asks of the model pods that servectl itself does not set.

A curated set of pod and container fields, not a pod template merged over servectl's: the
model server's command, ports, probes, drain and security are servectl's to set (the
rollout and scaling rules depend on them), and every field here is checked with a message
naming it. Kubernetes' own types (tolerations, affinity, topology spread, env, volumes) are
passed through as the cluster's API defines them; the API server validates them when the
Deployment is applied. Kubernetes only: the local runtime has no pods (it says so).
"""

from __future__ import annotations

import re
from typing import Any, Self

from pydantic import Field, model_validator

from servectl.api.models.common import Quantity, SpecModel, parse_quantity, spec_error

RESERVED_VOLUMES = ("config", "models", "tmp")
"""The volumes servectl mounts in every model pod; a user volume may not reuse a name."""
RESERVED_PATHS = ("/models", "/etc/servectl", "/tmp")
"""Where servectl mounts them; a user mount may not go there or below."""
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


def _named(items: list[dict[str, Any]], what: str, field: str) -> list[str]:
    names = []
    for i, item in enumerate(items):
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise spec_error(
                f"{what} {i} has no name", field=(field, i), fix=f"give each {what} a name"
            )
        names.append(name)
    return names


class PodOptions(SpecModel):
    """Pod and container fields of the model pods (Kubernetes)."""

    service_account_name: str | None = Field(
        default=None,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="The pods' ServiceAccount (e.g. one bound to a cloud role that reads "
        "the s3:// or gs:// bucket). Omitted: the namespace's default.",
    )
    image_pull_secrets: list[str] = Field(
        default_factory=list,
        description="Secrets (names) to pull the model server and fetch images with.",
    )
    env: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Environment variables (Kubernetes EnvVar) of the model server and of "
        "the s3/gs fetch container, e.g. AWS_REGION or credentials from a Secret.",
    )
    env_from: list[dict[str, Any]] = Field(
        default_factory=list,
        description="ConfigMaps and Secrets (Kubernetes EnvFromSource) as environment, in "
        "both containers.",
    )
    volumes: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Extra pod volumes (Kubernetes Volume); not config, models or tmp.",
    )
    volume_mounts: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Where the model server mounts them (Kubernetes VolumeMount); not "
        "under /models, /etc/servectl or /tmp.",
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Node labels the pods must run on."
    )
    tolerations: list[dict[str, Any]] = Field(
        default_factory=list, description="Kubernetes Tolerations (e.g. of GPU nodes' taints)."
    )
    affinity: dict[str, Any] | None = Field(
        default=None, description="Kubernetes Affinity (node, pod and anti-affinity)."
    )
    topology_spread_constraints: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Kubernetes TopologySpreadConstraints; a labelSelector may use "
        "servectl.io/service and servectl.io/revision.",
    )
    priority_class_name: str | None = Field(
        default=None, max_length=253, pattern=DNS_SUBDOMAIN, description="The pods' PriorityClass."
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="Extra pod labels (servectl's own, servectl.io/* and "
        "app.kubernetes.io/managed-by, cannot be set).",
    )
    annotations: dict[str, str] = Field(default_factory=dict, description="Extra pod annotations.")
    model_volume_size: Quantity = Field(
        default="4Gi",
        description="The size limit of the emptyDir an s3:// or gs:// model is fetched into "
        "(the kubelet evicts a pod whose model outgrows it).",
    )

    @model_validator(mode="after")
    def _no_clash(self) -> Self:
        if parse_quantity(self.model_volume_size) <= 0:
            raise spec_error(
                "the model volume's size must be greater than zero",
                field=("modelVolumeSize",),
                fix="a quantity such as 10Gi",
            )
        for i, name in enumerate(self.image_pull_secrets):
            if not re.match(DNS_SUBDOMAIN, name):
                raise spec_error(
                    f"{name!r} is not a Secret name",
                    field=("imagePullSecrets", i),
                    fix="a DNS-1123 subdomain, e.g. registry-credentials",
                )
        for i, name in enumerate(_named(self.env, "variable", "env")):
            if not ENV_NAME.match(name):
                raise spec_error(
                    f"{name!r} is not an environment variable name",
                    field=("env", i, "name"),
                    fix="letters, digits, '_', '-' and '.', not starting with a digit",
                )
        volumes = _named(self.volumes, "volume", "volumes")
        for i, name in enumerate(volumes):
            if name in RESERVED_VOLUMES:
                raise spec_error(
                    f"volume {name!r} is servectl's own",
                    field=("volumes", i, "name"),
                    fix=f"name it anything but {', '.join(RESERVED_VOLUMES)}",
                )
        for i, name in enumerate(_named(self.volume_mounts, "mount", "volumeMounts")):
            if name not in volumes:
                raise spec_error(
                    f"mount of volume {name!r}, which spec.runtime.pod.volumes does not have",
                    field=("volumeMounts", i, "name"),
                    fix="add the volume to spec.runtime.pod.volumes",
                )
            path = str(self.volume_mounts[i].get("mountPath") or "")
            if not path.startswith("/"):
                raise spec_error(
                    f"mount of {name!r} has no absolute mountPath",
                    field=("volumeMounts", i, "mountPath"),
                    fix="an absolute path, e.g. /etc/model-extras",
                )
            clash = next((p for p in RESERVED_PATHS if path == p or path.startswith(p + "/")), None)
            if clash is not None:
                raise spec_error(
                    f"{path} is under {clash}, where servectl mounts its own volume",
                    field=("volumeMounts", i, "mountPath"),
                    fix="mount it elsewhere, e.g. /etc/model-extras",
                )
        for key in self.labels:
            if key.startswith("servectl.io/") or key == "app.kubernetes.io/managed-by":
                raise spec_error(
                    f"label {key} is servectl's own",
                    field=("labels", key),
                    fix="use a label of your own",
                )
        return self
