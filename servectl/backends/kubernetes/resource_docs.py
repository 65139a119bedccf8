"""The ModelService documents the CLI writes and reads on a cluster, pure: the rollout
command annotation, the applied document, a listed row, an Event, the rollout history from
status, and the API server's messages made readable."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Container, Iterable, Mapping
from typing import Any

from servectl.api import models
from servectl.backends import client as protocol
from servectl.backends.kubernetes import objects as obj
from servectl.backends.kubernetes.kube import MODELSERVICES, Doc
from servectl.controller.spec import ServiceSpec
from servectl.rollout.machine import Op

DEFAULT_NAMESPACE = "default"


def new_command_id() -> str:
    return uuid.uuid4().hex


def command_annotation(op: Op, version: int | None, ident: str) -> str:
    """The ``servectl.io/rollout-command`` value the controller reads."""
    return json.dumps({"op": str(op), "version": version, "id": ident})


def pending_command(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """The command in the annotation the controller has not carried out yet, if any."""
    raw = ((doc.get("metadata") or {}).get("annotations") or {}).get(obj.COMMAND)
    if not raw:
        return None
    try:
        request = json.loads(raw)
        ident = str(request["id"])
    except (ValueError, KeyError, TypeError):
        return None
    done = (((doc.get("status") or {}).get("loop") or {}).get("command")) or None
    return dict(request) if ident != done else None


def command_done(doc: Mapping[str, Any], ident: str) -> bool:
    """Has the controller carried out command ``ident`` (``status.loop.command``)?"""
    return bool((((doc.get("status") or {}).get("loop") or {}).get("command")) == ident)


def pending_start(doc: Mapping[str, Any]) -> int | None:
    """The version the controller will start a rollout to at its next cycle because
    ``spec.model.version`` names one it neither runs nor has started (None: none)."""
    status = doc.get("status") or {}
    wanted = ((doc.get("spec") or {}).get("model") or {}).get("version")
    rollout = status.get("rollout") or {}
    started = (status.get("loop") or {}).get("startVersion")
    if not isinstance(wanted, int) or not rollout:
        return None
    if wanted in (rollout.get("stableVersion"), rollout.get("canaryVersion"), started):
        return None
    return wanted


def refusal(
    doc: Mapping[str, Any], spec: ServiceSpec, op: Op, version: int | None, now: float
) -> str | None:
    """Why the rollout's state in status refuses ``op`` now (:func:`protocol.refusal`),
    after the start a new ``spec.model.version`` asks for (:func:`pending_start`), unless
    ``op`` is a start to another version, which replaces it. None: not refused."""
    ahead = pending_start(doc)
    current = ((doc.get("spec") or {}).get("model") or {}).get("version")
    replaced = ahead is None or (op is Op.START and version != current)
    starts = [] if ahead is None or replaced else [(Op.START, ahead)]
    return protocol.refusal(doc.get("status"), spec.rollout, starts, op, version, now)


def command_taken(doc: Mapping[str, Any], ident: str | None, version: int | None) -> bool:
    """Has the controller taken the command: the annotation ``ident`` (``status.loop.
    command``), or, with no id, the rollout to ``version`` that a new
    ``spec.model.version`` asks for (``status.loop.startVersion``)?"""
    if ident is not None:
        return command_done(doc, ident)
    return bool((((doc.get("status") or {}).get("loop") or {}).get("startVersion")) == version)


def outcome(
    doc: Mapping[str, Any],
    events: Iterable[protocol.EventRecord],
    before: Container[str | int],
    request: protocol.RolloutRequest,
    *,
    seen: bool,
) -> protocol.CommandOutcome:
    """What became of a command: taken once ``status.loop`` names it
    (:func:`command_taken`); refused when a CommandRefused Event for its operation is
    among ``events`` and was not there ``before`` it was written. The controller writes
    status before it posts that Event, so a taken command is done only once it was
    ``seen`` taken at an earlier look."""
    if not command_taken(doc, request.id, request.version):
        return protocol.CommandOutcome("waiting")
    for event in events:
        mine = event.reason == "CommandRefused" and event.message.startswith(f"{request.op}:")
        if mine and event.id not in before:
            return protocol.CommandOutcome("refused", event.message)
    if not seen:
        return protocol.CommandOutcome("waiting")
    return protocol.CommandOutcome("done", rollout_line(doc))


def rollout_line(doc: Mapping[str, Any]) -> str:
    """Where the rollout stands, as status says: ``Progressing step 1: ...``."""
    rollout = (doc.get("status") or {}).get("rollout") or {}
    phase, step = str(rollout.get("phase", "Idle")), int(rollout.get("step") or 0)
    return protocol.rollout_where(phase, step, str(rollout.get("message") or ""))


def apply_document(resource: models.ModelService | models.ScalingPolicy, namespace: str) -> Doc:
    """What the CLI applies: apiVersion, kind, name, namespace, the user's labels and
    annotations, and spec; never status or server fields (those are not the CLI's)."""
    dumped = resource.model_dump(mode="json", by_alias=True, exclude_none=True)
    meta: Doc = {"name": resource.metadata.name, "namespace": namespace}
    if resource.metadata.labels:
        meta["labels"] = dict(resource.metadata.labels)
    if resource.metadata.annotations:
        meta["annotations"] = dict(resource.metadata.annotations)
    return {
        "apiVersion": dumped["apiVersion"],
        "kind": dumped["kind"],
        "metadata": meta,
        "spec": dumped["spec"],
    }


def row(doc: Mapping[str, Any]) -> protocol.ServiceSummary:
    meta = dict(doc.get("metadata") or {})
    meta.pop("managedFields", None)
    spec = {k: v for k, v in doc.items() if k != "status"}
    spec["metadata"] = meta
    spec.setdefault("apiVersion", MODELSERVICES.api_version)
    spec.setdefault("kind", MODELSERVICES.kind)
    return protocol.ServiceSummary(
        namespace=str(meta.get("namespace") or DEFAULT_NAMESPACE),
        name=str(meta.get("name")),
        spec=spec,
        status=dict(doc.get("status") or {}),
        generation=int(meta.get("generation") or 0),
        updated=protocol.timestamp(meta.get("creationTimestamp")) or 0.0,
    )


def event(doc: Mapping[str, Any]) -> protocol.EventRecord:
    meta = doc.get("metadata") or {}
    when = (
        protocol.timestamp(doc.get("lastTimestamp"))
        or protocol.timestamp(doc.get("eventTime"))
        or protocol.timestamp((doc.get("series") or {}).get("lastObservedTime"))
        or protocol.timestamp(doc.get("firstTimestamp"))
        or protocol.timestamp(meta.get("creationTimestamp"))
        or 0.0
    )
    return protocol.EventRecord(
        id=str(meta.get("name") or ""),
        time=when,
        type=str(doc.get("type") or "Normal"),
        reason=str(doc.get("reason") or ""),
        message=str(doc.get("message") or ""),
        count=int(doc.get("count") or 1),
    )


def history(status: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What status says of rollouts: the current (or last) one, nothing when Idle."""
    rollout = status.get("rollout") or {}
    if not rollout or rollout.get("phase", "Idle") == "Idle":
        return []
    return [
        {
            "phase": rollout.get("phase"),
            "step": rollout.get("step"),
            "stableVersion": rollout.get("stableVersion"),
            "canaryVersion": rollout.get("canaryVersion"),
            "message": rollout.get("message", ""),
            "verdicts": rollout.get("verdicts", []),
        }
    ]


def readable(message: str) -> str:
    """An API server's validation message without its preamble, one cause per clause:
    ``ModelService.servectl.io "x" is invalid: [a: ..., b: ...]`` -> ``a: ...; b: ...``."""
    body = message.split(" is invalid: ", 1)[-1].strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    causes = re.split(r", (?=(?:spec|metadata|status)(?:\.|\[| ))", body)
    return "; ".join(c.strip() for c in causes if c.strip())


def connection_reason(message: str) -> str:
    """The useful end of a urllib3 error (``[Errno 111] Connection refused``)."""
    found = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", message)
    if found:
        return found.group(1).strip()
    found = re.search(r"Caused by (\w+)\(", message)
    if found:
        return found.group(1)
    return message[:200]
