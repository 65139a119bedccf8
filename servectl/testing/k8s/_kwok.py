"""What kwok does with the pods and nodes of the test control plane: the Stage documents
it runs with (``root/kwok.yaml``) and the annotations that steer them.

- a pod scheduled onto a fake node is ``Running`` at once, with a pod IP from its node's
  ``spec.podCIDR``, its containers started but not ready;
- it turns ``Ready`` `READY_DELAY_ANNOTATION` after that (a Go duration; 0.5 s when absent),
  at the moment kwok stamps into `READY_AT_ANNOTATION` when it starts the pod;
- with `FAIL_ANNOTATION` ``"true"`` it stays ``Running`` and never turns ``Ready``;
- a pod with a deletion timestamp and no finalizers is deleted at once.

The full rules are in :mod:`servectl.testing.k8s`'s docstring.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

READY_DELAY_ANNOTATION = "kwok.servectl.io/ready-after"
FAIL_ANNOTATION = "kwok.servectl.io/fail"
READY_AT_ANNOTATION = "kwok.servectl.io/ready-at"
"""Stamped by kwok when the pod starts: the moment it turns Ready (RFC 3339)."""
DEFAULT_READY_DELAY = "500ms"
NODE_ANNOTATION = "kwok.x-k8s.io/node"
"""kwok manages the nodes that carry it with the value ``fake``."""
NODE_LABELS = {"type": "kwok"}
NODE_RESOURCES = {
    "cpu": "32",
    "memory": "256Gi",
    "ephemeral-storage": "1Ti",  # model pods ask for disk (their emptyDirs and logs)
    "pods": "110",
    "nvidia.com/gpu": "8",
}


_NODE_STATUS = """\
{{ $now := Now }}
{{ $lastTransitionTime := or .metadata.creationTimestamp $now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $lastTransitionTime | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
"""

_NODE_INFO = """\
{{ $kwokVersion := printf "kwok-%s" Version }}
nodeInfo:
  architecture: amd64
  bootID: ""
  containerRuntimeVersion: {{ $kwokVersion | Quote }}
  kernelVersion: {{ $kwokVersion | Quote }}
  kubeProxyVersion: {{ $kwokVersion | Quote }}
  kubeletVersion: {{ $kwokVersion | Quote }}
  machineID: ""
  operatingSystem: linux
  osImage: ""
  systemUUID: ""
phase: Running
"""

_POD_RUNNING = """\
{{ $now := Now }}
{{ $annotations := or .metadata.annotations dict }}
{{ $fail := eq (toString (index $annotations "kwok.servectl.io/fail")) "true" }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: PodReadyToStartContainers
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  type: Ready
  reason: ContainersNotReady
  message: {{ if $fail }}"readiness probe failed (kwok.servectl.io/fail)"{{ else }}"not ready yet (kwok.servectl.io/ready-after)"{{ end }}
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  type: ContainersReady
  reason: ContainersNotReady
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  imageID: {{ printf "kwok://%s" .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  started: true
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
{{ with .spec.initContainers }}
initContainerStatuses:
{{ range . }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  restartCount: 0
  state:
    terminated:
      exitCode: 0
      finishedAt: {{ $now | Quote }}
      reason: Completed
      startedAt: {{ $now | Quote }}
{{ end }}
{{ end }}
{{ $hostIPs := NodeIPsWith .spec.nodeName }}
{{ with $hostIPs }}
hostIP: {{ index . 0 | Quote }}
hostIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
{{ $podIPs := PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
{{ with $podIPs }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
"""  # noqa: E501

# Go's time.RFC3339Nano, which kwok's durationFrom parses (then subtracts now).
_READY_AT = """\
{{ $annotations := or .metadata.annotations dict }}
{{ $after := or (index $annotations "kwok.servectl.io/ready-after") "500ms" }}
annotations:
  kwok.servectl.io/ready-at: {{ dateModify $after now | date "2006-01-02T15:04:05.999999999Z07:00" | Quote }}
"""  # noqa: E501


def _pod_readiness(ready: bool, message: str) -> str:
    status = '"True"' if ready else '"False"'
    reason = "" if ready else "\n  reason: ContainersNotReady"
    msg = f"\n  message: {json.dumps(message)}" if message else ""
    flag = "true" if ready else "false"
    return f"""\
{{{{ $now := Now }}}}
{{{{ $started := or .status.startTime $now }}}}
conditions:
- lastTransitionTime: {{{{ $now | Quote }}}}
  status: {status}
  type: Ready{reason}{msg}
- lastTransitionTime: {{{{ $now | Quote }}}}
  status: {status}
  type: ContainersReady{reason}
containerStatuses:
{{{{ range .spec.containers }}}}
- image: {{{{ .image | Quote }}}}
  imageID: {{{{ printf "kwok://%s" .image | Quote }}}}
  name: {{{{ .name | Quote }}}}
  ready: {flag}
  restartCount: 0
  started: true
  state:
    running:
      startedAt: {{{{ $started | Quote }}}}
{{{{ end }}}}
"""


def _jq(key: str, operator: str, *values: str) -> dict[str, Any]:
    expression: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        expression["values"] = list(values)
    return {"jq": expression}


def _annotation(name: str) -> str:
    return f'.metadata.annotations["{name}"]'


_READY = '.status.conditions.[] | select( .type == "Ready" ) | .status'


def _stage(
    name: str,
    kind: str,
    match: list[dict[str, Any]],
    steps: list[dict[str, Any]],
    delay: dict[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceRef": {"apiGroup": "v1", "kind": kind},
        "selector": {"matchExpressions": match},
        "steps": steps,
    }
    if delay is not None:
        spec["delay"] = delay
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": spec,
    }


def _status_patch(template: str) -> dict[str, Any]:
    return {"patch": {"subresource": "status", "root": "status", "template": template}}


_ALIVE = _jq(".metadata.deletionTimestamp", "DoesNotExist")
_RUNNING = _jq(".status.phase", "In", "Running")

KWOK_STAGES: list[dict[str, Any]] = [
    # Nodes: Ready at once, then a status heartbeat every ~10 min (kwok renews the leases,
    # which is what the node lifecycle controller watches).
    _stage(
        "node-initialize",
        "Node",
        [_jq(_READY, "NotIn", "True")],
        [_status_patch(_NODE_STATUS + _NODE_INFO)],
    ),
    _stage(
        "node-heartbeat-with-lease",
        "Node",
        [_jq(".status.phase", "In", "Running"), _jq(_READY, "In", "True")],
        [_status_patch(_NODE_STATUS)],
        delay={"durationMilliseconds": 600_000, "jitterDurationMilliseconds": 610_000},
    ),
    # Pods: Running as soon as kwok sees them on its node, with the ready-at stamp.
    _stage(
        "pod-running",
        "Pod",
        [_ALIVE, _jq(".status.podIP", "DoesNotExist")],
        [
            _status_patch(_POD_RUNNING),
            {"patch": {"root": "metadata", "type": "merge", "template": _READY_AT}},
        ],
    ),
    # Ready at the stamped moment, unless told to fail.
    _stage(
        "pod-ready",
        "Pod",
        [
            _ALIVE,
            _RUNNING,
            _jq(_READY, "NotIn", "True"),
            _jq(_annotation(READY_AT_ANNOTATION), "Exists"),
            _jq(_annotation(FAIL_ANNOTATION), "NotIn", "true"),
        ],
        [_status_patch(_pod_readiness(True, ""))],
        delay={
            "durationMilliseconds": 0,
            "durationFrom": {"jq": {"expression": _annotation(READY_AT_ANNOTATION)}},
        },
    ),
    # A Ready pod told to fail turns unready.
    _stage(
        "pod-fail",
        "Pod",
        [
            _ALIVE,
            _RUNNING,
            _jq(_READY, "In", "True"),
            _jq(_annotation(FAIL_ANNOTATION), "In", "true"),
        ],
        [_status_patch(_pod_readiness(False, "readiness probe failed (kwok.servectl.io/fail)"))],
    ),
    # Deleted pods go at once (once any finalizer is gone).
    _stage(
        "pod-delete",
        "Pod",
        [
            _jq(".metadata.deletionTimestamp", "Exists"),
            _jq(".metadata.finalizers", "DoesNotExist"),
        ],
        [{"delete": True}],
    ),
]


class _LiteralDumper(yaml.SafeDumper):
    """Multi-line strings (the templates) as ``|`` blocks, so ``root/kwok.yaml`` reads well."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_LiteralDumper.add_representer(str, _str_representer)


def kwok_config() -> str:
    """The ``--config`` file kwok runs with: the `KWOK_STAGES` documents."""
    return yaml.dump_all(KWOK_STAGES, Dumper=_LiteralDumper, sort_keys=False)
