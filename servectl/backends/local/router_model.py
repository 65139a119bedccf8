"""The routes the router is asked for, and how they are planned: services, revisions,
endpoints and A/B matches; their validation, the exact weighted split, revision slots, and
the JSON codec of the plans (``routes.json``).

The router's pure core is three modules, tested without a process
(``tests/unit/backends/local/test_router_core.py``): this one (validate, plan), then
:mod:`~servectl.backends.local.haproxy_config` (render the config and maps) and
:mod:`~servectl.backends.local.haproxy_state` (read back what HAProxy runs, and converge it);
:mod:`servectl.backends.local.router` runs HAProxy and talks to it. docs/local-runtime.md,
"The router (HAProxy)", explains the design. In short, per service:

- a pool of revision *slots*, one revision per slot, kept while the revision exists
  (:func:`assign_slots`);
- the split: each request takes the next position of a counter, ``count mod 100``, and the
  service's weights say which slot serves each position; :func:`interleave` orders them so
  that any 100 consecutive requests give each revision exactly its weight;
- A/B: an optional header or cookie value (:class:`Match`) that goes to one revision before
  the split.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

POSITIONS = 100
"""Entries in a weights map: weights are integer percents, so 100 requests are one cycle."""
SLOT_BLOCK = 4
"""Slots are allocated in blocks of this many: growing the pool costs a reload."""
REVISION_HEADER = "x-servectl-revision"
"""Response header naming the revision that answered."""

_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_REVISION = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_ENDPOINT = re.compile(r"^[a-z0-9]([-a-z0-9]{0,251}[a-z0-9])?$")
_MATCH_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_MATCH_VALUE = re.compile(r"^[A-Za-z0-9_.~:/+=@!*-]{1,256}$")


class RouterError(RuntimeError):
    """Base of the router's errors; the message says what is wrong and what to do."""


class RouteError(RouterError, ValueError):
    """The desired routes are invalid (a name, a port, weights); nothing was changed."""


# --- the desired routes ------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """One replica of a revision: a model server on 127.0.0.1."""

    name: str
    """The replica (pod) name, unique within the service; ``[a-z0-9-]``."""
    rest_port: int
    grpc_port: int
    draining: bool = False
    """No new requests; in-flight ones finish (see ``Router.inflight``)."""


@dataclass(frozen=True)
class RevisionRoute:
    name: str
    """The revision name, e.g. ``cost-v2``."""
    weight: int
    """Percent of the service's requests (0..100); the service's weights sum to 100 or 0."""
    endpoints: tuple[Endpoint, ...] = ()


@dataclass(frozen=True)
class Match:
    """A/B: requests carrying this header (or cookie) value go to ``revision``."""

    kind: Literal["header", "cookie"]
    name: str
    value: str
    revision: str


@dataclass(frozen=True)
class ServiceRoute:
    namespace: str
    service: str
    rest_port: int
    grpc_port: int
    revisions: tuple[RevisionRoute, ...]
    match: Match | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.service)


@dataclass(frozen=True)
class Timeouts:
    """HAProxy's timeouts and health-check interval, in seconds."""

    connect_s: float = 2.0
    client_s: float = 60.0
    server_s: float = 60.0
    check_interval_s: float = 1.0

    @property
    def hard_stop_after_s(self) -> float:
        # An old worker left by a reload lives at most this long: its in-flight requests
        # get their full server timeout.
        return max(self.client_s, self.server_s) + 5.0


# --- validation --------------------------------------------------------------------------


def _check_port(port: int, what: str) -> None:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise RouteError(f"{what}: port {port!r} is not in 1..65535")


def validate(routes: Sequence[ServiceRoute], *, stats_port: int) -> None:
    """Raise :class:`RouteError` naming the first problem: names, ports, weights, match."""
    ports: dict[int, str] = {stats_port: "the router's stats port"}

    def claim(port: int, owner: str) -> None:
        _check_port(port, owner)
        other = ports.get(port)
        if other is not None:
            raise RouteError(f"port {port} is used by both {other} and {owner}; give each its own")
        ports[port] = owner

    seen: set[tuple[str, str]] = set()
    for route in routes:
        for label, what in ((route.namespace, "namespace"), (route.service, "service")):
            if not isinstance(label, str) or not _LABEL.match(label):
                raise RouteError(
                    f"{what} {label!r} is not a DNS-1123 label "
                    "(lower-case letters, digits and '-', at most 63, alphanumeric at both ends)"
                )
        where = f"service {route.namespace}/{route.service}"
        if route.key in seen:
            raise RouteError(f"{where} is routed twice; give each service one ServiceRoute")
        seen.add(route.key)
        claim(route.rest_port, f"{where} (REST front port)")
        claim(route.grpc_port, f"{where} (gRPC front port)")
        revisions: set[str] = set()
        endpoints: set[str] = set()
        total = 0
        for revision in route.revisions:
            if not _REVISION.match(revision.name):
                raise RouteError(
                    f"{where}: revision name {revision.name!r}: use lower-case letters, "
                    "digits, '-' and '.', alphanumeric at both ends"
                )
            if revision.name in revisions:
                raise RouteError(f"{where}: revision {revision.name!r} is listed twice")
            revisions.add(revision.name)
            weight = revision.weight
            if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= 100:
                raise RouteError(
                    f"{where}: revision {revision.name!r} has weight {weight!r}; "
                    "weights are integer percents 0..100"
                )
            total += weight
            for endpoint in revision.endpoints:
                if not _ENDPOINT.match(endpoint.name):
                    raise RouteError(
                        f"{where}: endpoint name {endpoint.name!r}: use lower-case letters, "
                        "digits and '-', alphanumeric at both ends"
                    )
                if endpoint.name in endpoints:
                    raise RouteError(
                        f"{where}: endpoint {endpoint.name!r} appears twice; "
                        "replica names are unique within a service"
                    )
                endpoints.add(endpoint.name)
                owner = f"{where} endpoint {endpoint.name}"
                claim(endpoint.rest_port, f"{owner} (REST)")
                claim(endpoint.grpc_port, f"{owner} (gRPC)")
        if total not in (0, POSITIONS):
            listed = ", ".join(f"{r.name}={r.weight}" for r in route.revisions)
            raise RouteError(
                f"{where}: weights sum to {total} ({listed}); they must sum to 100, "
                "or all be 0 to answer 503"
            )
        match = route.match
        if match is not None:
            if match.kind not in ("header", "cookie"):
                raise RouteError(f"{where}: match kind {match.kind!r} is not header or cookie")
            if not _MATCH_NAME.match(match.name):
                raise RouteError(
                    f"{where}: {match.kind} name {match.name!r}: use letters, digits, '_', "
                    "'.' and '-'"
                )
            if not _MATCH_VALUE.match(match.value):
                raise RouteError(
                    f"{where}: {match.kind} value {match.value!r}: use letters, digits and "
                    "_ . ~ : / + = @ ! * - (no spaces, quotes, ';' or '#')"
                )
            if match.revision not in revisions:
                raise RouteError(
                    f"{where}: the {match.kind} route goes to revision {match.revision!r}, "
                    "which is not among the service's revisions; add it (weight 0 is fine)"
                )


# --- the split ---------------------------------------------------------------------------


def interleave(weights: Sequence[int], positions: int = POSITIONS) -> tuple[int | None, ...]:
    """Which revision (index into ``weights``) serves each of ``positions`` request positions.

    Smooth weighted round-robin: at each position every revision earns its weight and the
    richest (the first on ties) is chosen and pays ``positions``. Over one cycle each
    revision is chosen exactly ``weight`` times, so with a cyclic counter *any*
    ``positions`` consecutive requests split exactly. It also spreads them: with two
    revisions every window of L requests gives a revision ⌊wL/100⌋ or ⌈wL/100⌉; with more,
    within 2 of wL/100. Weights summing to 0 give None everywhere (nothing takes traffic).

    Example: ``interleave([90, 10])`` starts ``0 0 0 0 0 1 0 0 0 0 0 0 0 0 0 1 ...``.
    """
    total = sum(weights)
    if total == 0:
        return (None,) * positions
    if total != positions or any(w < 0 for w in weights):
        raise ValueError(f"weights {list(weights)} must be >= 0 and sum to {positions} (or 0)")
    credit = [0] * len(weights)
    order: list[int | None] = []
    for _ in range(positions):
        for index, weight in enumerate(weights):
            credit[index] += weight
        chosen = max(range(len(weights)), key=lambda i: (credit[i], -i))
        credit[chosen] -= total
        order.append(chosen)
    return tuple(order)


# --- slots -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServicePlan:
    """One service's routes and where its revisions sit."""

    route: ServiceRoute
    slot_count: int
    slots: Mapping[str, int]
    """Revision name -> slot index."""

    def revision_in(self, slot: int) -> str | None:
        for name, index in self.slots.items():
            if index == slot:
                return name
        return None


def assign_slots(
    revisions: Sequence[str],
    previous: Mapping[str, int],
    *,
    slot_count: int,
    busy: Iterable[int] = (),
) -> tuple[int, dict[str, int]]:
    """Place revisions in slots: ``(slot_count, revision -> slot)``.

    A revision keeps its slot from ``previous`` (stable while it exists, so a weight change
    never moves servers). A new revision takes the lowest free slot, preferring slots not in
    ``busy`` (those still holding servers of a removed revision, draining). The pool only
    grows, in blocks of :data:`SLOT_BLOCK`, when the revisions outnumber it.
    """
    wanted = set(revisions)
    kept: dict[str, int] = {}
    taken: set[int] = set()
    for name in sorted(previous, key=lambda n: (previous[n], n)):
        slot = previous[name]
        if name in wanted and 0 <= slot < slot_count and slot not in taken:
            kept[name] = slot
            taken.add(slot)
    newcomers = [name for name in revisions if name not in kept]
    count = max(slot_count, SLOT_BLOCK * math.ceil(len(wanted) / SLOT_BLOCK), SLOT_BLOCK)
    busy_slots = set(busy)
    free = sorted((s for s in range(count) if s not in taken), key=lambda s: (s in busy_slots, s))
    assigned = dict(kept)
    for name, slot in zip(newcomers, free, strict=False):
        assigned[name] = slot
    return count, assigned


def plan_service(
    route: ServiceRoute,
    *,
    previous: Mapping[str, int] | None = None,
    slot_count: int = 0,
    busy: Iterable[int] = (),
) -> ServicePlan:
    """The plan of one (validated) route, keeping ``previous`` slots where possible."""
    count, slots = assign_slots(
        [r.name for r in route.revisions],
        previous or {},
        slot_count=slot_count,
        busy=busy,
    )
    return ServicePlan(route=route, slot_count=count, slots=slots)


# --- persisted plan ----------------------------------------------------------------------


def plans_to_json(plans: Sequence[ServicePlan]) -> list[dict[str, Any]]:
    """The plans as JSON values (``routes.json``: what start() renders after a restart)."""
    out = []
    for plan in sorted(plans, key=lambda p: p.route.key):
        route = plan.route
        out.append(
            {
                "namespace": route.namespace,
                "service": route.service,
                "rest_port": route.rest_port,
                "grpc_port": route.grpc_port,
                "slot_count": plan.slot_count,
                "match": None
                if route.match is None
                else {
                    "kind": route.match.kind,
                    "name": route.match.name,
                    "value": route.match.value,
                    "revision": route.match.revision,
                },
                "revisions": [
                    {
                        "name": r.name,
                        "weight": r.weight,
                        "slot": plan.slots[r.name],
                        "endpoints": [
                            [e.name, e.rest_port, e.grpc_port, e.draining] for e in r.endpoints
                        ],
                    }
                    for r in route.revisions
                ],
            }
        )
    return out


def plans_from_json(value: Any) -> list[ServicePlan]:
    """Inverse of :func:`plans_to_json`; raises ValueError (or KeyError, TypeError) if bad."""
    plans = []
    for item in value:
        match = item["match"]
        revisions = tuple(
            RevisionRoute(
                name=str(r["name"]),
                weight=int(r["weight"]),
                endpoints=tuple(
                    Endpoint(str(n), int(rp), int(gp), bool(d)) for n, rp, gp, d in r["endpoints"]
                ),
            )
            for r in item["revisions"]
        )
        route = ServiceRoute(
            namespace=str(item["namespace"]),
            service=str(item["service"]),
            rest_port=int(item["rest_port"]),
            grpc_port=int(item["grpc_port"]),
            revisions=revisions,
            match=None
            if match is None
            else Match(
                kind="cookie" if match["kind"] == "cookie" else "header",
                name=str(match["name"]),
                value=str(match["value"]),
                revision=str(match["revision"]),
            ),
        )
        slots = {str(r["name"]): int(r["slot"]) for r in item["revisions"]}
        plans.append(ServicePlan(route=route, slot_count=int(item["slot_count"]), slots=slots))
    return plans
