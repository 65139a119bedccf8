"""The ``RoutesAccepted`` condition of a ModelService whose traffic goes through a Gateway:
what the Gateway's implementation says of the service's HTTPRoute and GRPCRoute in their
``status.parents`` (Gateway API: ``Accepted``, ``ResolvedRefs``).

A route the implementation has not answered for yet is Unknown (``Pending``); one it
refused, or whose backends it cannot resolve, is False with the implementation's own reason
(``NotAllowedByListeners``, ``NoMatchingParent``, ``BackendNotFound``, ...) and message; True
once every route is Accepted with its references resolved. Pure: documents in, a value out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ACCEPTED = "Accepted"
RESOLVED_REFS = "ResolvedRefs"
PENDING = "Pending"
NOT_ACCEPTED = "RouteNotAccepted"  # the event when the condition turns False


@dataclass(frozen=True)
class RouteVerdict:
    """The condition's status (``True``, ``False``, ``Unknown``), reason and message."""

    status: str
    reason: str
    message: str


def _ours(parent: Mapping[str, Any], gateway: tuple[str, str] | None, namespace: str) -> bool:
    if gateway is None:
        return True
    ref = parent.get("parentRef") or {}
    return (str(ref.get("namespace") or namespace), str(ref.get("name") or "")) == gateway


def verdict(
    routes: Sequence[tuple[str, Mapping[str, Any] | None]],
    *,
    namespace: str,
    gateway: tuple[str, str] | None = None,
) -> RouteVerdict | None:
    """``routes``: (kind, live document or None when absent); ``gateway``: the parent
    (namespace, name) servectl attaches them to (None: any parent). None when there is no
    route at all (traffic through a plain Service)."""
    present = [(kind, doc) for kind, doc in routes if doc is not None]
    if not present:
        return None
    pending: list[str] = []
    for kind, doc in present:
        name = f"{kind} {namespace}/{(doc.get('metadata') or {}).get('name', '')}"
        parents = [
            p
            for p in (doc.get("status") or {}).get("parents") or []
            if _ours(p, gateway, namespace)
        ]
        if not parents:
            pending.append(name)
            continue
        for parent in parents:
            found = {str(c.get("type")): c for c in parent.get("conditions") or []}
            for wanted in (ACCEPTED, RESOLVED_REFS):
                condition = found.get(wanted)
                if condition is None or condition.get("status") == "Unknown":
                    pending.append(name)
                    break
                if condition.get("status") != "True":
                    reason = str(condition.get("reason") or wanted)
                    detail = str(condition.get("message") or "").strip()
                    controller = parent.get("controllerName") or "the Gateway"
                    return RouteVerdict(
                        "False",
                        reason,
                        f"{name}: {wanted} False ({reason}) from {controller}"
                        + (f": {detail}" if detail else ""),
                    )
    if pending:
        where = "/".join(gateway) if gateway else "its Gateway"
        return RouteVerdict(
            "Unknown",
            PENDING,
            f"waiting for {where} to accept {', '.join(dict.fromkeys(pending))}",
        )
    return RouteVerdict("True", ACCEPTED, "")


def in_force(
    doc: Mapping[str, Any] | None, *, namespace: str, gateway: tuple[str, str] | None = None
) -> bool:
    """Whether the Gateway applies this generation of the route: every parent of ours has
    it Accepted (``observedGeneration`` at least the route's ``metadata.generation``, when
    both are given). A route nobody answered for, or answered for an older generation, is
    not in force yet: the traffic still follows the generation accepted before."""
    if doc is None:
        return False
    generation = (doc.get("metadata") or {}).get("generation")
    parents = [
        p for p in (doc.get("status") or {}).get("parents") or [] if _ours(p, gateway, namespace)
    ]
    if not parents:
        return False
    for parent in parents:
        found = {str(c.get("type")): c for c in parent.get("conditions") or []}
        accepted = found.get(ACCEPTED)
        if accepted is None or accepted.get("status") != "True":
            return False
        seen = accepted.get("observedGeneration")
        if generation is not None and seen is not None and int(seen) < int(generation):
            return False
    return True
