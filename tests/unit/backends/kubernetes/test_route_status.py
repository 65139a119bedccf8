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


def _generation(doc: dict[str, Any], generation: int, seen: int | None) -> dict[str, Any]:
    doc["metadata"]["generation"] = generation
    for p in doc["status"]["parents"]:
        for c in p["conditions"]:
            if seen is not None:
                c["observedGeneration"] = seen
    return doc


def test_a_route_is_in_force_once_its_gateway_accepted_this_generation() -> None:
    from servectl.backends.kubernetes.route_status import in_force

    assert not in_force(None, namespace="ml", gateway=GW)
    assert not in_force(route("cost"), namespace="ml", gateway=GW)  # nobody answered
    assert in_force(_generation(route("cost", parent()), 3, 3), namespace="ml", gateway=GW)
    # The Gateway answered for generation 2; 3 (new weights) is not applied yet.
    assert not in_force(_generation(route("cost", parent()), 3, 2), namespace="ml", gateway=GW)
    # Refused, or answered by another Gateway only.
    assert not in_force(route("cost", parent(accepted="False")), namespace="ml", gateway=GW)
    assert not in_force(route("cost", parent(gw="other")), namespace="ml", gateway=GW)
    # An implementation that writes no observedGeneration: accepted is accepted.
    assert in_force(_generation(route("cost", parent()), 3, None), namespace="ml", gateway=GW)


def test_the_weights_traffic_follows_are_those_of_the_generation_in_force() -> None:
    """status.traffic and the planner's applied weights come from what the Gateway accepted
    (issue 27, item 1): a new generation of the route counts once it is in force."""
    from types import SimpleNamespace

    from servectl.api import models
    from servectl.backends.kubernetes import objects as obj
    from servectl.backends.kubernetes.backend import KubeBackend, Memory

    live: dict[str, Any] = {}
    caches = SimpleNamespace(httproutes=SimpleNamespace(get=lambda ns, name: live.get(name)))
    service = models.ModelService.model_validate(
        {
            "apiVersion": "servectl.io/v1alpha1",
            "kind": "ModelService",
            "metadata": {"name": "cost", "namespace": "ml"},
            "spec": {"model": {"name": "m", "basePath": "pvc://models/m", "version": 1}},
        }
    )
    backend = KubeBackend(
        kube=None,  # type: ignore[arg-type]  # reads only
        caches=caches,  # type: ignore[arg-type]
        doc={"metadata": {"name": "cost", "namespace": "ml", "uid": "u-1"}},
        service=service,
        memory=Memory(),
        options=obj.Options(gateway=GW),
        wall_clock=lambda: 0.0,
    )

    def at(weights: dict[str, int], generation: int, seen: int | None) -> None:
        doc = obj.route(
            backend.doc,
            list(weights.items()),
            header_revision=None,
            match=None,
            options=backend.options,
        )
        doc["status"] = {"parents": [parent()] if seen is not None else []}
        live["cost"] = _generation({**doc, "metadata": {"name": "cost"}}, generation, seen)

    at({"cost-v1": 70, "cost-v2": 30}, 2, None)  # nobody answered yet, nothing seen: the spec
    assert backend.applied_weights() == {"cost-v1": 70, "cost-v2": 30}
    at({"cost-v1": 70, "cost-v2": 30}, 2, 2)
    assert backend.applied_weights() == {"cost-v1": 70, "cost-v2": 30}
    at({"cost-v1": 50, "cost-v2": 50}, 3, 2)  # written, not yet applied by the Gateway
    assert backend.applied_weights() == {"cost-v1": 70, "cost-v2": 30}
    at({"cost-v1": 50, "cost-v2": 50}, 3, 3)
    assert backend.applied_weights() == {"cost-v1": 50, "cost-v2": 50}
