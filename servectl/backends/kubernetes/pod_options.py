"""spec.runtime.pod onto a revision's pod template (servectl.api.models.pod says why a
curated set and not a merged template).

servectl's own fields win where both could speak: its labels (the selectors and the scrape
config key on them), its volumes and mounts (names and paths the model refuses anyway),
and ``HOME`` (unless the user sets it). Pure: documents in, documents out.
"""

from __future__ import annotations

import copy
from typing import Any

from servectl.api import models

Doc = dict[str, Any]

SCHEDULING = (
    ("service_account_name", "serviceAccountName"),
    ("node_selector", "nodeSelector"),
    ("tolerations", "tolerations"),
    ("affinity", "affinity"),
    ("topology_spread_constraints", "topologySpreadConstraints"),
    ("priority_class_name", "priorityClassName"),
)


def _env(own: list[Doc], options: models.PodOptions) -> list[Doc]:
    given = {str(e.get("name")) for e in options.env}
    return [e for e in own if e["name"] not in given] + copy.deepcopy(options.env)


def shape(template: Doc, options: models.PodOptions) -> None:
    """Add ``options`` to ``template`` (a Deployment's ``spec.template``), in place."""
    meta, pod = template["metadata"], template["spec"]
    meta["labels"] = {**options.labels, **meta["labels"]}
    meta["annotations"] = {**options.annotations, **meta.get("annotations", {})}
    for field, key in SCHEDULING:
        value = getattr(options, field)
        if value:
            pod[key] = copy.deepcopy(value)
    if options.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": name} for name in options.image_pull_secrets]
    pod["volumes"] = [*pod.get("volumes", []), *copy.deepcopy(options.volumes)]
    containers: list[Doc] = [*pod["containers"], *pod.get("initContainers", [])]
    for container in containers:
        container["env"] = _env(container.get("env", []), options)
        if options.env_from:
            container["envFrom"] = copy.deepcopy(options.env_from)
    server = pod["containers"][0]
    server["volumeMounts"] = [*server["volumeMounts"], *copy.deepcopy(options.volume_mounts)]
