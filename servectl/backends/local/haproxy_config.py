"""HAProxy's config and map files for planned routes, and the runtime state they describe.

Per service (``<ns>.<svc>`` below; the routes and their plans are
:mod:`~servectl.backends.local.router_model`'s):

- two frontends, ``<ns>.<svc>_rest`` (HTTP/1.1) and ``<ns>.<svc>_grpc`` (h2c), on the
  service's stable ports;
- a pool of slot backends ``<ns>.<svc>_rest_<i>`` and ``<ns>.<svc>_grpc_<i>``
  (``balance leastconn``), one revision per slot;
- the split: each frontend counts its requests in a one-entry stick table
  (``sc_inc_gpc0(0)``, atomic), and position ``count mod 100`` is looked up in the
  service's weights map (``map_int``), 100 entries naming the slot;
- A/B: the header or cookie value is looked up in the match map (value -> slot) before the
  split; matching requests skip the counter;
- the slots map (slot -> revision name) feeds the ``x-servectl-revision`` response header
  and lets :meth:`Router.actual` read the revision names back from HAProxy.

What needs a reload (the *structure*: services, ports, slot counts, match header or cookie
names, timeouts, the stats port) is fingerprinted into the config as the process variable
``proc.servectl_structure``; what changes at runtime (servers, their drain state, the three
maps) is the :class:`DesiredRuntime` that :func:`haproxy_state.converge` brings HAProxy to.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from servectl.backends.local import router_model

OFF = "off"
"""The weights map's value when no revision has weight (no such backend: 503)."""


def ms(seconds: float) -> str:
    """An HAProxy time in whole milliseconds (``2000ms``)."""
    millis = round(seconds * 1000)
    if millis <= 0:
        raise router_model.RouteError(f"a timeout must be at least 1 ms, got {seconds!r} s")
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
    timeouts: router_model.Timeouts = field(default_factory=router_model.Timeouts)
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
    timeouts: router_model.Timeouts = field(default_factory=router_model.Timeouts)
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


def server_args(port: int, *, h2: bool, timeouts: router_model.Timeouts) -> str:
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


def weights_entries(plan: router_model.ServicePlan) -> MapEntries:
    revisions = plan.route.revisions
    order = router_model.interleave([r.weight for r in revisions])
    return tuple(
        (str(position), OFF if index is None else str(plan.slots[revisions[index].name]))
        for position, index in enumerate(order)
    )


def slots_entries(plan: router_model.ServicePlan) -> MapEntries:
    return tuple((str(slot), name) for name, slot in sorted(plan.slots.items(), key=lambda x: x[1]))


def match_entries(plan: router_model.ServicePlan) -> MapEntries:
    match = plan.route.match
    if match is None:
        return ()
    return ((match.value, str(plan.slots[match.revision])),)


def layout_value(plans: Sequence[router_model.ServicePlan]) -> str:
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


def _frontend_lines(plan: router_model.ServicePlan, names: Names, proto: Proto) -> list[str]:
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
        f"sc_inc_gpc0(0),mod({router_model.POSITIONS}),map_int({weights}) {unmatched}",
        f"    http-response set-header {router_model.REVISION_HEADER} %[{revision}]"
        f" if {{ {revision} -m found }}",
        # A slot name that is no backend ("off", or no entry) falls to the default backend.
        f"    use_backend {names.prefix}_{proto}_%[var(txn.slot)]",
        f"    default_backend {names.off_backend}",
        "",
    ]
    return lines


def render(plans: Sequence[router_model.ServicePlan], settings: Settings) -> Rendered:
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
        "# Generated by servectl (servectl/backends/local/haproxy_config.py): do not edit,",
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
