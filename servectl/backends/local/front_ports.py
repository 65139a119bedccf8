"""The local runtime's front ports: where each service answers on this machine.

A new service gets a (REST, gRPC) pair at the controller's first tick with it and keeps it
for its life (the service's record in the store). Pairs are TF Serving's defaults for the
first, REST 8501 and gRPC 8500, then 8503/8502, 8505/8504, ...: the first pair no other
service has and that is free on this machine. ``servectl up --rest-port N`` moves where
they start (REST N, N+2, ...; gRPC N-1, N+1, ...), kept in the store as a runtime
setting; it applies to services given ports after it, not to those that have them.

``servectl up`` writes the setting without starting anything, so this module imports
neither the runtime nor the resource model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from servectl.backends.local.store import Store
from servectl.processes import port_free

FIRST_REST_PORT = 8501
"""TF Serving's REST default; its gRPC default, 8500, is one below."""
LOWEST_REST_PORT = 2
"""The gRPC port is one below the REST port, and port 0 means "any"."""
HIGHEST_PORT = 65535
SETTING = "frontPorts"
"""The store's setting: ``{"firstRest": N}``."""


def first_rest(store: Store) -> int:
    """Where services' REST ports start: ``servectl up --rest-port``, else 8501."""
    setting = store.get_setting(SETTING)
    value = setting.get("firstRest") if isinstance(setting, dict) else None
    return value if isinstance(value, int) else FIRST_REST_PORT


def check_first_rest(port: int) -> int:
    """``port``, or a ValueError naming ``--rest-port`` and what to give."""
    if not LOWEST_REST_PORT <= port <= HIGHEST_PORT:
        raise ValueError(
            f"--rest-port {port}: not a port for a REST/gRPC pair; give "
            f"{LOWEST_REST_PORT} to {HIGHEST_PORT} (gRPC takes the port below it)"
        )
    return port


def set_first_rest(store: Store, port: int) -> None:
    store.put_setting(SETTING, {"firstRest": check_first_rest(port)})


def allocate(taken: Iterable[int], *, first: int = FIRST_REST_PORT) -> tuple[int, int]:
    """The first (REST, gRPC) pair from REST port ``first`` up, in steps of 2, that no
    service has (``taken``) and that is free on this machine."""
    used = set(taken)
    rest = first
    while rest <= HIGHEST_PORT:
        grpc = rest - 1
        if rest not in used and grpc not in used and port_free(rest) and port_free(grpc):
            return rest, grpc
        rest += 2
    raise OSError(f"no free pair of ports from {first} up for the service's front end")


def allocator(store: Store) -> Callable[[set[int]], tuple[int, int]]:
    """The fleet's port allocator: :func:`allocate` from the setting as it is at each
    call, so ``servectl up --rest-port`` while the controller runs applies to the next
    new service."""

    def allocate_from_setting(taken: set[int]) -> tuple[int, int]:
        return allocate(taken, first=first_rest(store))

    return allocate_from_setting
