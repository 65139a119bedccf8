"""The router's pure half: desired routes in, HAProxy config, map files and runtime commands out.

:mod:`servectl.backends.local.router` runs HAProxy and talks to it; everything that can be
decided without a process lives here, so that it is tested without one
(``tests/unit/backends/local/test_router_config.py``). docs/local-runtime.md, "The router
(HAProxy)", explains the design; in short, per service (``<ns>.<svc>`` below):

- two frontends, ``<ns>.<svc>_rest`` (HTTP/1.1) and ``<ns>.<svc>_grpc`` (h2c), on the
  service's stable ports;
- a pool of revision *slots*: backends ``<ns>.<svc>_rest_<i>`` and ``<ns>.<svc>_grpc_<i>``
  (``balance leastconn``), one revision per slot, kept while the revision exists;
- the split: each frontend counts its requests in a one-entry stick table
  (``sc_inc_gpc0(0)``, atomic), and position ``count mod 100`` is looked up in the
  service's weights map (``map_int``), 100 entries naming the slot; :func:`interleave`
  orders them so that any 100 consecutive requests give each revision exactly its weight;
- A/B: an optional header or cookie whose value is looked up in the match map
  (value -> slot) before the split; matching requests skip the counter;
- the slots map (slot -> revision name) feeds the ``x-servectl-revision`` response header
  and lets :meth:`Router.actual` read the revision names back from HAProxy.

What needs a reload (the *structure*: services, ports, slot counts, match header or cookie
names, timeouts, the stats port) is fingerprinted into the config as the process variable
``proc.servectl_structure``; what changes at runtime (servers, their drain state, the three
maps) is converged by :func:`converge`, which compares an observed :class:`RuntimeState` with
the :class:`DesiredRuntime` and returns the commands, none when they already agree.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

POSITIONS = 100
"""Entries in a weights map: weights are integer percents, so 100 requests are one cycle."""
SLOT_BLOCK = 4
"""Slots are allocated in blocks of this many: growing the pool costs a reload."""
OFF = "off"
"""The weights map's value when no revision has weight (no such backend: 503)."""
REVISION_HEADER = "x-servectl-revision"
"""Response header naming the revision that answered."""

# server-state admin flags (HAProxy management guide, "show servers state")
ADMF_FMAINT = 0x01
ADMF_IMAINT = 0x02
ADMF_CMAINT = 0x04
ADMF_FDRAIN = 0x08
ADMF_IDRAIN = 0x10
ADMF_RMAINT = 0x20
MAINT_FLAGS = ADMF_FMAINT | ADMF_IMAINT | ADMF_CMAINT | ADMF_RMAINT
DRAIN_FLAGS = ADMF_FDRAIN | ADMF_IDRAIN
# health check state bits (srv_check_state)
CHK_ST_CONFIGURED = 0x02
CHK_ST_ENABLED = 0x04

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


def ms(seconds: float) -> str:
    """An HAProxy time in whole milliseconds (``2000ms``)."""
    millis = round(seconds * 1000)
    if millis <= 0:
        raise RouteError(f"a timeout must be at least 1 ms, got {seconds!r} s")
    return f"{millis}ms"


# --- names -------------------------------------------------------------------------------

Proto = Literal["rest", "grpc"]
PROTOS: tuple[Proto, Proto] = ("rest", "grpc")


@dataclass(frozen=True)
class Names:
    """HAProxy identifiers and map paths of one service.

    Namespaces and services are DNS-1123 labels, which have no ``.`` or ``_``: the prefix
    ``<ns>.<svc>`` and the suffixes ``_rest``, ``_grpc_<i>``, ``_off`` never collide.
    """

    namespace: str
    service: str
    maps_dir: Path

    @property
    def prefix(self) -> str:
        return f"{self.namespace}.{self.service}"

    def frontend(self, proto: Proto) -> str:
        return f"{self.prefix}_{proto}"

    def slot_backend(self, proto: Proto, slot: int) -> str:
        return f"{self.prefix}_{proto}_{slot}"

    @property
    def off_backend(self) -> str:
        return f"{self.prefix}_off"

    @property
    def weights_map(self) -> Path:
        return self.maps_dir / f"{self.prefix}.weights.map"

    @property
    def slots_map(self) -> Path:
        return self.maps_dir / f"{self.prefix}.slots.map"

    @property
    def match_map(self) -> Path:
        return self.maps_dir / f"{self.prefix}.match.map"


@dataclass(frozen=True)
class SlotBackend:
    namespace: str
    service: str
    proto: Proto
    slot: int


_SLOT_BACKEND = re.compile(r"^([a-z0-9-]+)\.([a-z0-9-]+)_(rest|grpc)_([0-9]+)$")


def parse_slot_backend(name: str) -> SlotBackend | None:
    """The service, protocol and slot of a slot backend's name; None for other proxies."""
    found = _SLOT_BACKEND.match(name)
    if found is None:
        return None
    proto: Proto = "rest" if found.group(3) == "rest" else "grpc"
    return SlotBackend(found.group(1), found.group(2), proto, int(found.group(4)))


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


# --- rendering ---------------------------------------------------------------------------


MapEntries = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class DesiredServer:
    port: int
    h2: bool
    draining: bool


@dataclass(frozen=True)
class DesiredRuntime:
    """What the running process should hold: map contents and servers per slot backend."""

    maps: Mapping[str, MapEntries]
    """Map file path (as HAProxy names it) -> entries in file order."""
    servers: Mapping[str, Mapping[str, DesiredServer]]
    """Every slot backend of every service (empty ones included) -> server name -> server."""
    timeouts: Timeouts = field(default_factory=Timeouts)
    """For the health-check options of servers added at runtime."""


@dataclass(frozen=True)
class Rendered:
    config: str
    maps: Mapping[Path, MapEntries]
    structure: str
    """Fingerprint of everything a reload is needed for."""
    runtime: DesiredRuntime


@dataclass(frozen=True)
class Settings:
    """The router's fixed settings: where its files live, its stats port, its timeouts."""

    directory: Path
    stats_port: int
    timeouts: Timeouts = field(default_factory=Timeouts)
    socket_dir: Path | None = None
    """Where the two CLI sockets are, when not in ``directory`` (whose path is too long
    for a unix socket)."""

    @property
    def config_path(self) -> Path:
        return self.directory / "haproxy.cfg"

    @property
    def maps_dir(self) -> Path:
        return self.directory / "maps"

    @property
    def admin_socket(self) -> Path:
        return (self.socket_dir or self.directory) / "admin.sock"

    @property
    def master_socket(self) -> Path:
        return (self.socket_dir or self.directory) / "master.sock"

    @property
    def pid_path(self) -> Path:
        return self.directory / "haproxy.pid"

    @property
    def log_path(self) -> Path:
        return self.directory / "haproxy.log"

    @property
    def routes_path(self) -> Path:
        return self.directory / "routes.json"

    def names(self, namespace: str, service: str) -> Names:
        return Names(namespace, service, self.maps_dir)


def server_args(port: int, *, h2: bool, timeouts: Timeouts) -> str:
    """A server's address and options, the same on a config line and in ``add server``.

    The pool settings are HAProxy's defaults for a server in the config, written out
    because a server added at run time (``add server``, HAProxy 2.6) gets none: no idle
    pool (``show servers conn``: ``idle_lim 0``, ``purge_delay 0``), so every request
    opened a new connection to the replica and reset it afterwards (+1 ms a request and
    a thread start in the model server; measured in docs/benchmarks.md).
    """
    interval = ms(timeouts.check_interval_s)
    proto = " proto h2" if h2 else ""
    return (
        f"127.0.0.1:{port}{proto} check inter {interval} fall 1 rise 1 "
        "pool-max-conn -1 pool-purge-delay 5s"
    )


def weights_entries(plan: ServicePlan) -> MapEntries:
    revisions = plan.route.revisions
    order = interleave([r.weight for r in revisions])
    return tuple(
        (str(position), OFF if index is None else str(plan.slots[revisions[index].name]))
        for position, index in enumerate(order)
    )


def slots_entries(plan: ServicePlan) -> MapEntries:
    return tuple((str(slot), name) for name, slot in sorted(plan.slots.items(), key=lambda x: x[1]))


def match_entries(plan: ServicePlan) -> MapEntries:
    match = plan.route.match
    if match is None:
        return ()
    return ((match.value, str(plan.slots[match.revision])),)


def layout_value(plans: Sequence[ServicePlan]) -> str:
    """The ``proc.servectl_layout`` variable: ports, slot count and match name per service.

    ``<ns>.<svc>=<rest port>/<grpc port>/<slots>/<kind>:<name>`` (or ``/-`` without a
    match), ``;``-separated; ``-`` when there are no services.
    """
    parts = []
    for plan in plans:
        route = plan.route
        match = "-" if route.match is None else f"{route.match.kind}:{route.match.name}"
        parts.append(
            f"{route.namespace}.{route.service}="
            f"{route.rest_port}/{route.grpc_port}/{plan.slot_count}/{match}"
        )
    return ";".join(parts) or "-"


@dataclass(frozen=True)
class LayoutEntry:
    rest_port: int
    grpc_port: int
    slot_count: int
    match_kind: Literal["header", "cookie"] | None
    match_name: str | None


def parse_layout(value: str) -> dict[tuple[str, str], LayoutEntry]:
    """Inverse of :func:`layout_value`."""
    layout: dict[tuple[str, str], LayoutEntry] = {}
    if value in ("", "-"):
        return layout
    for part in value.split(";"):
        prefix, _, rest = part.partition("=")
        namespace, _, service = prefix.partition(".")
        rest_port, grpc_port, slots, match = rest.split("/", 3)
        kind: Literal["header", "cookie"] | None = None
        name: str | None = None
        if match != "-":
            raw_kind, _, name = match.partition(":")
            kind = "cookie" if raw_kind == "cookie" else "header"
        layout[(namespace, service)] = LayoutEntry(
            int(rest_port), int(grpc_port), int(slots), kind, name
        )
    return layout


def _frontend_lines(plan: ServicePlan, names: Names, proto: Proto) -> list[str]:
    route = plan.route
    port = route.rest_port if proto == "rest" else route.grpc_port
    bind = f"bind 127.0.0.1:{port}" + (" proto h2" if proto == "grpc" else "")
    weights = names.weights_map
    lines = [
        f"frontend {names.frontend(proto)}",
        f"    {bind}",
        # One entry, never expiring: the request counter that places requests on the cycle.
        "    stick-table type integer size 1 store gpc0",
    ]
    match = route.match
    if match is not None:
        fetch = f"req.fhdr({match.name})" if match.kind == "header" else f"req.cook({match.name})"
        lines.append(f"    http-request set-var(txn.slot) {fetch},map_str({names.match_map})")
    unmatched = "unless { var(txn.slot) -m found }"
    revision = f"var(txn.slot),map_str({names.slots_map})"
    lines += [
        f"    http-request track-sc0 int(0) {unmatched}",
        # sc_inc_gpc0 increments and returns the new value under the entry's lock: two
        # threads never get the same position.
        "    http-request set-var(txn.slot) "
        f"sc_inc_gpc0(0),mod({POSITIONS}),map_int({weights}) {unmatched}",
        f"    http-response set-header {REVISION_HEADER} %[{revision}]"
        f" if {{ {revision} -m found }}",
        # A slot name that is no backend ("off", or no entry) falls to the default backend.
        f"    use_backend {names.prefix}_{proto}_%[var(txn.slot)]",
        f"    default_backend {names.off_backend}",
        "",
    ]
    return lines


def render(plans: Sequence[ServicePlan], settings: Settings) -> Rendered:
    """The config file, the map files and the runtime state they describe."""
    timeouts = settings.timeouts
    plans = sorted(plans, key=lambda p: p.route.key)
    # Lines marked True are servers: they change at runtime, so they are left out of the
    # structure fingerprint.
    body: list[tuple[str, bool]] = []

    def add(*lines: str) -> None:
        body.extend((line, False) for line in lines)

    add(
        "defaults",
        "    mode http",
        f"    timeout connect {ms(timeouts.connect_s)}",
        f"    timeout client {ms(timeouts.client_s)}",
        f"    timeout server {ms(timeouts.server_s)}",
        # A failed connection or an empty answer is retried, on another server of the same
        # revision (redispatch on every retry): a dead replica fails no request.
        "    retries 3",
        "    option redispatch 1",
        "    retry-on conn-failure empty-response",
        # After a reload the old worker answers the next request on an idle keep-alive
        # connection with "Connection: close" instead of closing it under the client.
        "    option idle-close-on-response",
        "",
        "frontend servectl_stats",
        f"    bind 127.0.0.1:{settings.stats_port}",
        "    http-request use-service prometheus-exporter if { path /metrics }",
        "    stats enable",
        "    stats uri /stats",
        "    stats refresh 5s",
        "",
    )
    maps: dict[Path, MapEntries] = {}
    runtime_maps: dict[str, MapEntries] = {}
    servers: dict[str, dict[str, DesiredServer]] = {}
    for plan in plans:
        route = plan.route
        names = settings.names(route.namespace, route.service)
        service_maps = {
            names.weights_map: weights_entries(plan),
            names.slots_map: slots_entries(plan),
        }
        if route.match is not None:
            service_maps[names.match_map] = match_entries(plan)
        maps.update(service_maps)
        runtime_maps.update({str(path): entries for path, entries in service_maps.items()})
        for proto in PROTOS:
            add(*_frontend_lines(plan, names, proto))
        by_slot = {plan.slots[r.name]: r for r in route.revisions}
        for proto in PROTOS:
            for slot in range(plan.slot_count):
                backend = names.slot_backend(proto, slot)
                add(f"backend {backend}", "    balance leastconn")
                servers[backend] = {}
                revision = by_slot.get(slot)
                for endpoint in revision.endpoints if revision is not None else ():
                    port = endpoint.rest_port if proto == "rest" else endpoint.grpc_port
                    h2 = proto == "grpc"
                    servers[backend][endpoint.name] = DesiredServer(port, h2, endpoint.draining)
                    # A draining server is written with weight 0: after a restart it takes
                    # no new requests either.
                    drain = " weight 0" if endpoint.draining else ""
                    line = f"    server {endpoint.name} "
                    body.append((line + server_args(port, h2=h2, timeouts=timeouts) + drain, True))
                add("")
        add(
            f"backend {names.off_backend}",
            "    http-request return status 503 content-type text/plain "
            f'string "servectl: no revision of {route.namespace}/{route.service} takes traffic"',
            "",
        )
    layout = layout_value(plans)
    head = [
        "# Generated by servectl (servectl/backends/local/router_config.py): do not edit,",
        "# every apply rewrites it. Servers are changed through the runtime API and written",
        "# here too, so that a restart comes back with them.",
        "global",
        f"    stats socket {settings.admin_socket} mode 600 level admin expose-fd listeners",
        "    stats timeout 30s",
        f"    hard-stop-after {ms(timeouts.hard_stop_after_s)}",
        f"    set-var proc.servectl_layout str({layout})",
    ]
    skeleton = "\n".join(head + [line for line, is_server in body if not is_server])
    structure = hashlib.sha256(skeleton.encode()).hexdigest()[:16]
    config = "\n".join(
        [*head, f"    set-var proc.servectl_structure str({structure})", ""]
        + [line for line, _ in body]
    )
    return Rendered(
        config=config.rstrip("\n") + "\n",
        maps=maps,
        structure=structure,
        runtime=DesiredRuntime(maps=runtime_maps, servers=servers, timeouts=timeouts),
    )


def map_text(entries: MapEntries) -> str:
    return "".join(f"{key} {value}\n" for key, value in entries)


# --- the observed runtime state ----------------------------------------------------------


@dataclass(frozen=True)
class ServerState:
    """One server as ``show servers state`` and ``show stat`` report it."""

    port: int
    admin: int
    """Admin flags (``ADMF_*``)."""
    weight: int
    """User weight; 0 is how a draining server is written in the config."""
    check_state: int
    up: bool
    current: int = 0
    """Requests in progress (``scur``)."""
    queued: int = 0
    """Requests waiting for the server (``qcur``)."""

    @property
    def maint(self) -> bool:
        return bool(self.admin & MAINT_FLAGS)

    @property
    def draining(self) -> bool:
        return bool(self.admin & DRAIN_FLAGS) or self.weight == 0

    @property
    def outstanding(self) -> int:
        return self.current + self.queued


@dataclass(frozen=True)
class RuntimeState:
    """What the running HAProxy holds, read back through its runtime API."""

    structure: str | None
    layout: Mapping[tuple[str, str], LayoutEntry]
    servers: Mapping[str, Mapping[str, ServerState]]
    """Backend -> server -> state (backends without servers are absent)."""
    maps: Mapping[str, MapEntries]
    """Map path -> entries (maps that are not loaded are absent)."""

    def slots_of(self, names: Names) -> dict[str, int]:
        entries = self.maps.get(str(names.slots_map), ())
        return {revision: int(slot) for slot, revision in entries if slot.isdigit()}

    def busy_slots(self, names: Names, slot_count: int) -> set[int]:
        return {
            slot
            for slot in range(slot_count)
            for proto in PROTOS
            if self.servers.get(names.slot_backend(proto, slot))
        }


def _table(text: str, first_line_header: bool) -> list[dict[str, str]]:
    """Rows of a ``show servers state`` (space-separated) or ``show stat`` (CSV) dump."""
    header: list[str] | None = None
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("#"):
            stripped = line.lstrip("# ")
            header = stripped.split(",") if first_line_header else stripped.split()
            continue
        if header is None:
            continue  # the format version line of "show servers state"
        values = line.split(",") if first_line_header else line.split()
        rows.append(dict(zip(header, values, strict=False)))
    return rows


def _int(value: str | None, default: int = 0) -> int:
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        return default


def parse_servers(servers_state: str, stat_csv: str) -> dict[str, dict[str, ServerState]]:
    """Join ``show servers state`` (ports, flags, weights) and ``show stat`` (load, status)."""
    load: dict[tuple[str, str], dict[str, str]] = {}
    for row in _table(stat_csv, first_line_header=True):
        load[(row.get("pxname", ""), row.get("svname", ""))] = row
    servers: dict[str, dict[str, ServerState]] = {}
    for row in _table(servers_state, first_line_header=False):
        backend, name = row.get("be_name", ""), row.get("srv_name", "")
        stat = load.get((backend, name), {})
        servers.setdefault(backend, {})[name] = ServerState(
            port=_int(row.get("srv_port")),
            admin=_int(row.get("srv_admin_state")),
            weight=_int(row.get("srv_uweight"), 1),
            check_state=_int(row.get("srv_check_state")),
            up=_int(row.get("srv_op_state")) in (1, 2, 3),
            current=_int(stat.get("scur")),
            queued=_int(stat.get("qcur")),
        )
    return servers


def parse_map(text: str) -> MapEntries:
    """Entries of ``show map <file>``: ``<ref> <key> <value>`` lines."""
    entries = []
    for line in text.splitlines():
        parts = line.split(None, 2)
        if len(parts) >= 2 and parts[0].startswith("0x"):
            entries.append((parts[1], parts[2] if len(parts) == 3 else ""))
    return tuple(entries)


def parse_var(text: str) -> str | None:
    """The value of ``get var``: ``proc.x: type=str value=<...>``; None when unset."""
    marker = "value=<"
    start = text.find(marker)
    end = text.rfind(">")
    if start < 0 or end < start:
        return None
    return text[start + len(marker) : end]


# --- convergence -------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One runtime API command; ``deferrable`` ones may be refused until a later apply."""

    line: str
    deferrable: bool = False


@dataclass(frozen=True)
class ReplaceMap:
    """Replace a map's entries atomically (``prepare map``, ``add map``, ``commit map``)."""

    path: str
    entries: MapEntries


Change = Command | ReplaceMap


def converge(desired: DesiredRuntime, observed: RuntimeState) -> list[Change]:
    """The runtime commands that take ``observed`` to ``desired``; none when they agree.

    Order: servers are added and made ready first, then maps move traffic, then servers
    leave (drain, maint, delete), so no request is sent to a slot before it has servers or
    to a server already on its way out. A server that is no longer wanted is put in
    maintenance (no new requests, in-flight ones finish) and deleted once it has none;
    HAProxy refuses ``del server`` while connections remain, so the delete is retried on a
    later apply (level-triggered).
    """
    arrive: list[Change] = []
    leave: list[Change] = []
    for backend, wanted in sorted(desired.servers.items()):
        present = observed.servers.get(backend, {})
        for name, server in sorted(wanted.items()):
            target = f"{backend}/{name}"
            state = present.get(name)
            if state is None:
                if server.draining:
                    continue  # nothing to drain
                # Dynamic servers start in maintenance with their check disabled.
                args = server_args(server.port, h2=server.h2, timeouts=desired.timeouts)
                arrive += [
                    Command(f"add server {target} {args}"),
                    Command(f"enable health {target}"),
                    Command(f"set server {target} state ready"),
                ]
                continue
            if state.port != server.port:
                arrive.append(Command(f"set server {target} addr 127.0.0.1 port {server.port}"))
            if server.draining:
                if state.maint or not state.draining:
                    leave.append(Command(f"set server {target} state drain"))
            else:
                if state.maint or state.admin & DRAIN_FLAGS:
                    arrive.append(Command(f"set server {target} state ready"))
                if state.weight == 0:
                    arrive.append(Command(f"set server {target} weight 1"))
            checked = state.check_state & CHK_ST_CONFIGURED
            if checked and not state.check_state & CHK_ST_ENABLED:
                arrive.append(Command(f"enable health {target}"))
        for name, state in sorted(present.items()):
            if name in wanted:
                continue
            target = f"{backend}/{name}"
            if not state.maint:
                leave.append(Command(f"set server {target} state maint"))
            if state.outstanding == 0:
                leave.append(Command(f"del server {target}", deferrable=True))
    maps: list[Change] = [
        ReplaceMap(path, entries)
        for path, entries in sorted(desired.maps.items())
        if observed.maps.get(path) != entries
    ]
    return arrive + maps + leave


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


# --- reading routes back -----------------------------------------------------------------


def actual_routes(
    observed: RuntimeState, settings: Settings
) -> dict[tuple[str, str], ServiceRoute]:
    """The routes ``observed`` implements: the inverse of :func:`render` plus :func:`converge`.

    Revisions in slot order with their weight counted in the weights map (100 positions, so
    a count is a percent); endpoints by name, those in maintenance (leaving) left out.
    """
    routes: dict[tuple[str, str], ServiceRoute] = {}
    for (namespace, service), entry in sorted(observed.layout.items()):
        names = settings.names(namespace, service)
        slots = {
            int(slot): revision
            for slot, revision in observed.maps.get(str(names.slots_map), ())
            if slot.isdigit()
        }
        positions = Counter(value for _, value in observed.maps.get(str(names.weights_map), ()))
        revisions = []
        for slot in sorted(slots):
            rest = observed.servers.get(names.slot_backend("rest", slot), {})
            grpc = observed.servers.get(names.slot_backend("grpc", slot), {})
            endpoints = []
            for name in sorted(set(rest) | set(grpc)):
                rest_state, grpc_state = rest.get(name), grpc.get(name)
                live = [s for s in (rest_state, grpc_state) if s is not None and not s.maint]
                if not live:
                    continue
                endpoints.append(
                    Endpoint(
                        name=name,
                        rest_port=rest_state.port if rest_state is not None else 0,
                        grpc_port=grpc_state.port if grpc_state is not None else 0,
                        draining=any(s.draining for s in live),
                    )
                )
            revisions.append(
                RevisionRoute(slots[slot], positions.get(str(slot), 0), tuple(endpoints))
            )
        match: Match | None = None
        match_entries_ = observed.maps.get(str(names.match_map), ())
        if entry.match_kind is not None and entry.match_name and match_entries_:
            value, slot_text = match_entries_[0]
            if slot_text.isdigit() and int(slot_text) in slots:
                match = Match(entry.match_kind, entry.match_name, value, slots[int(slot_text)])
        routes[(namespace, service)] = ServiceRoute(
            namespace=namespace,
            service=service,
            rest_port=entry.rest_port,
            grpc_port=entry.grpc_port,
            revisions=tuple(revisions),
            match=match,
        )
    return routes
