"""What a running HAProxy holds, read back through its runtime API, and the commands that
bring it to the desired state.

``show servers state`` and ``show stat`` give the servers (:func:`parse_servers`), ``show
map`` the maps, ``get var`` the layout and structure variables: together a
:class:`RuntimeState`. :func:`converge` compares it with the
:class:`~servectl.backends.local.haproxy_config.DesiredRuntime` rendered for the routes and
returns the commands, none when they already agree; :func:`actual_routes` reads the routes
back from it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from servectl.backends.local import haproxy_config, router_model

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
    layout: Mapping[tuple[str, str], haproxy_config.LayoutEntry]
    servers: Mapping[str, Mapping[str, ServerState]]
    """Backend -> server -> state (backends without servers are absent)."""
    maps: Mapping[str, haproxy_config.MapEntries]
    """Map path -> entries (maps that are not loaded are absent)."""

    def slots_of(self, names: haproxy_config.Names) -> dict[str, int]:
        entries = self.maps.get(str(names.slots_map), ())
        return {revision: int(slot) for slot, revision in entries if slot.isdigit()}

    def busy_slots(self, names: haproxy_config.Names, slot_count: int) -> set[int]:
        return {
            slot
            for slot in range(slot_count)
            for proto in haproxy_config.PROTOS
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


def parse_map(text: str) -> haproxy_config.MapEntries:
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
    entries: haproxy_config.MapEntries


Change = Command | ReplaceMap


def converge(desired: haproxy_config.DesiredRuntime, observed: RuntimeState) -> list[Change]:
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
                args = haproxy_config.server_args(
                    server.port, h2=server.h2, timeouts=desired.timeouts
                )
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


# --- reading routes back -----------------------------------------------------------------


def actual_routes(
    observed: RuntimeState, settings: haproxy_config.Settings
) -> dict[tuple[str, str], router_model.ServiceRoute]:
    """The routes ``observed`` implements: the inverse of :func:`haproxy_config.render` plus
    :func:`converge`.

    Revisions in slot order with their weight counted in the weights map (100 positions, so
    a count is a percent); endpoints by name, those in maintenance (leaving) left out.
    """
    routes: dict[tuple[str, str], router_model.ServiceRoute] = {}
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
                    router_model.Endpoint(
                        name=name,
                        rest_port=rest_state.port if rest_state is not None else 0,
                        grpc_port=grpc_state.port if grpc_state is not None else 0,
                        draining=any(s.draining for s in live),
                    )
                )
            revisions.append(
                router_model.RevisionRoute(
                    slots[slot], positions.get(str(slot), 0), tuple(endpoints)
                )
            )
        match: router_model.Match | None = None
        match_entries_ = observed.maps.get(str(names.match_map), ())
        if entry.match_kind is not None and entry.match_name and match_entries_:
            value, slot_text = match_entries_[0]
            if slot_text.isdigit() and int(slot_text) in slots:
                match = router_model.Match(
                    entry.match_kind, entry.match_name, value, slots[int(slot_text)]
                )
        routes[(namespace, service)] = router_model.ServiceRoute(
            namespace=namespace,
            service=service,
            rest_port=entry.rest_port,
            grpc_port=entry.grpc_port,
            revisions=tuple(revisions),
            match=match,
        )
    return routes
