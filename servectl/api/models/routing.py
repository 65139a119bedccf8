"""spec.routing: the hostnames a service's routes answer on a shared Gateway.

On Kubernetes with the gateway traffic provider, a service's HTTPRoute matches only its own
model's REST paths (``/v1/models/<model>...``), so services serving different models
compose on one Gateway without hostnames. Hostnames are what separates two services that
serve the same model name, and what lets gRPC share a listener with REST: TF Serving's gRPC
requests name the model inside the message, where no route can match, so a GRPCRoute
matches a whole listener's gRPC methods, and the Gateway API lets an HTTPRoute and a
GRPCRoute share a listener only where their hostnames do not intersect.
"""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import Field, model_validator

from servectl.api.models.common import SpecModel, cel_rules, spec_error

HOSTNAME = r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
"""A Gateway API hostname: RFC 1123, no IP, an optional leading ``*.`` label."""
HOSTNAMES_MAX = 16  # the Gateway API's own limit per route


def _intersect(a: str, b: str) -> bool:
    """Whether two Gateway API hostnames can match one request's host (``*.x`` matches any
    name ending in ``.x``, not ``x`` itself)."""
    if a == b:
        return True
    for wild, other in ((a, b), (b, a)):
        if wild.startswith("*."):
            suffix = wild[1:]  # ".x"
            if other.endswith(suffix) or (other.startswith("*.") and other[1:].endswith(suffix)):
                return True
    return False


def shared_hostname(rest: list[str], grpc: list[str]) -> tuple[str, str] | None:
    """The first (REST, gRPC) hostname pair that can match one request's host, or None; an
    empty list stands for every host ("*")."""
    if not rest or not grpc:
        return (rest[0] if rest else "*", grpc[0] if grpc else "*")
    return next(((r, g) for r in rest for g in grpc if _intersect(r, g)), None)


Hostname = Annotated[str, Field(max_length=253, pattern=HOSTNAME)]


class RoutingSpec(SpecModel):
    """Hostnames of the service's routes (Kubernetes, gateway traffic provider). Omitted:
    the controller's defaults (its --hostnames and --grpc-hostnames patterns; none unless
    set), and REST routes that match only this model's paths on every host."""

    model_config = cel_rules(
        (
            "!has(self.hostnames) || !has(self.grpcHostnames)"
            " || !self.hostnames.exists(h, h in self.grpcHostnames)",
            "hostnames and grpcHostnames must not share a name (an HTTPRoute and a GRPCRoute "
            "on one listener with a common hostname conflict)",
        )
    )

    hostnames: list[Hostname] = Field(
        default_factory=list,
        max_length=HOSTNAMES_MAX,
        description="Hosts the REST API (HTTPRoute) answers on, e.g. cost.ml.models.example.com.",
        examples=[["cost.ml.models.example.com"]],
    )
    grpc_hostnames: list[Hostname] = Field(
        default_factory=list,
        max_length=HOSTNAMES_MAX,
        description=(
            "Hosts the gRPC API (GRPCRoute) answers on, none of them shared with hostnames. "
            "Without them (or a gRPC listener of its own, the controller's --grpc-listener) "
            "no GRPCRoute is made: on a listener that REST shares, the two would conflict."
        ),
        examples=[["cost-grpc.ml.models.example.com"]],
    )

    @model_validator(mode="after")
    def _apart(self) -> Self:
        if self.hostnames and self.grpc_hostnames:
            clash = shared_hostname(self.hostnames, self.grpc_hostnames)
            if clash is not None:
                rest, grpc = clash
                raise spec_error(
                    f"grpcHostnames {grpc!r} matches hostnames {rest!r}: an HTTPRoute and a "
                    "GRPCRoute on one listener with a common hostname conflict, and the "
                    "Gateway accepts only one of them",
                    field=("grpcHostnames",),
                    fix="give gRPC its own name, e.g. cost-grpc.ml.models.example.com",
                )
        return self
