"""What the Kubernetes controller tells the engine about routing, per traffic provider."""

from __future__ import annotations

from servectl.autoscaling.config import Routing
from servectl.backends.kubernetes import objects as obj
from servectl.backends.kubernetes.fleet import routing_for


def test_gateway_routes_least_request_and_a_plain_service_round_robin() -> None:
    assert routing_for(obj.TrafficProvider.GATEWAY) is Routing.LEAST_REQUEST
    assert routing_for("gateway") is Routing.LEAST_REQUEST
    # The replica-ratio fallback: one front Service over every revision's pods.
    assert routing_for(obj.TrafficProvider.SERVICE) is Routing.ROUND_ROBIN
