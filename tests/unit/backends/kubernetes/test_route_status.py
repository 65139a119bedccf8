"""RoutesAccepted from the routes' status.parents (Gateway API conditions)."""

from __future__ import annotations

from typing import Any

from servectl.backends.kubernetes.route_status import verdict

GW = ("traefik", "servectl")


def route(name: str, *parents: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"parents": list(parents)}}


def parent(
    accepted: str = "True", resolved: str = "True", gw: str = "servectl", **extra: Any
) -> dict[str, Any]:
    return {
        "parentRef": {"name": gw, "namespace": "traefik"},
        "controllerName": "traefik.io/gateway-controller",
        "conditions": [
            {
                "type": "Accepted",
                "status": accepted,
                "reason": extra.get("reason", "Accepted"),
                "message": extra.get("message", ""),
            },
            {
                "type": "ResolvedRefs",
                "status": resolved,
                "reason": extra.get("refs_reason", "ResolvedRefs"),
            },
        ],
    }


def test_no_route_no_condition() -> None:
    assert verdict([("HTTPRoute", None), ("GRPCRoute", None)], namespace="ml", gateway=GW) is None


def test_every_route_accepted_with_its_references_resolved_is_true() -> None:
    found = verdict(
        [("HTTPRoute", route("cost", parent())), ("GRPCRoute", route("cost", parent()))],
        namespace="ml",
        gateway=GW,
    )
    assert found is not None and (found.status, found.reason) == ("True", "Accepted")


def test_a_route_not_yet_answered_is_pending_and_names_it() -> None:
    found = verdict(
        [("HTTPRoute", route("cost", parent())), ("GRPCRoute", route("cost"))],
        namespace="ml",
        gateway=GW,
    )
    assert found is not None and (found.status, found.reason) == ("Unknown", "Pending")
    assert found.message == "waiting for traefik/servectl to accept GRPCRoute ml/cost"


def test_a_refusal_carries_the_implementations_reason_and_message() -> None:
    refused = parent(
        "False", reason="NotAllowedByListeners", message="no listener allows this namespace"
    )
    found = verdict([("HTTPRoute", route("cost", refused))], namespace="ml", gateway=GW)
    assert found is not None and (found.status, found.reason) == ("False", "NotAllowedByListeners")
    assert "HTTPRoute ml/cost: Accepted False (NotAllowedByListeners)" in found.message
    assert "no listener allows this namespace" in found.message


def test_unresolved_backends_are_false_even_when_accepted() -> None:
    found = verdict(
        [("HTTPRoute", route("cost", parent(resolved="False", refs_reason="BackendNotFound")))],
        namespace="ml",
        gateway=GW,
    )
    assert found is not None and (found.status, found.reason) == ("False", "BackendNotFound")


def test_other_gateways_entries_are_not_ours() -> None:
    """Another Gateway's verdict on a route servectl attached elsewhere says nothing."""
    other = parent("False", gw="other", reason="NotAllowedByListeners")
    found = verdict([("HTTPRoute", route("cost", other))], namespace="ml", gateway=GW)
    assert found is not None and found.status == "Unknown"
