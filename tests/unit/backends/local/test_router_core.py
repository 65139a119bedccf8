"""The router's pure core (servectl/backends/local/router_model.py, haproxy_config.py and
haproxy_state.py): the split order, slots, validation, the rendered config and maps, the
parsers of HAProxy's answers, and the commands that converge an observed state. No HAProxy
here; tests/integration/test_router_haproxy.py runs the real one."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servectl.backends.local import haproxy_config, haproxy_state, router_model
from servectl.backends.local.router_model import (
    Endpoint,
    Match,
    RevisionRoute,
    RouteError,
    ServiceRoute,
    Timeouts,
)

SETTINGS = haproxy_config.Settings(directory=Path("/srv/router"), stats_port=9000)


def route(
    *revisions: RevisionRoute,
    namespace: str = "default",
    service: str = "cost",
    rest_port: int = 8501,
    grpc_port: int = 8500,
    match: Match | None = None,
) -> ServiceRoute:
    return ServiceRoute(namespace, service, rest_port, grpc_port, revisions, match)


def ep(name: str, port: int, draining: bool = False) -> Endpoint:
    return Endpoint(name, port, port + 1, draining)


V1 = RevisionRoute("cost-v1", 90, (ep("v1-a", 10000), ep("v1-b", 10002)))
V2 = RevisionRoute("cost-v2", 10, (ep("v2-a", 10010),))


def plan(*routes: ServiceRoute) -> list[router_model.ServicePlan]:
    return [router_model.plan_service(r) for r in routes]


def observed_from(
    rendered: haproxy_config.Rendered, plans: list[router_model.ServicePlan]
) -> haproxy_state.RuntimeState:
    """What HAProxy holds right after loading ``rendered`` (a restart or a reload)."""
    servers = {
        backend: {
            name: haproxy_state.ServerState(
                port=s.port, admin=0, weight=0 if s.draining else 1, check_state=6, up=True
            )
            for name, s in wanted.items()
        }
        for backend, wanted in rendered.runtime.servers.items()
        if wanted
    }
    return haproxy_state.RuntimeState(
        structure=rendered.structure,
        layout=haproxy_config.parse_layout(haproxy_config.layout_value(plans)),
        servers=servers,
        maps=dict(rendered.runtime.maps),
    )


# --- the split ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "weights",
    [[90, 10], [10, 90], [1, 99], [99, 1], [33, 33, 34], [0, 100], [100, 0], [100], [50, 50]],
)
def test_interleave_gives_each_revision_exactly_its_weight(weights: list[int]) -> None:
    order = router_model.interleave(weights)
    assert len(order) == router_model.POSITIONS
    counts = Counter(order)
    assert {i: counts.get(i, 0) for i in range(len(weights))} == dict(enumerate(weights))


def test_interleave_spreads_the_minority() -> None:
    order = router_model.interleave([90, 10])
    assert [i for i, r in enumerate(order) if r == 1] == [5, 15, 25, 35, 45, 55, 65, 75, 85, 95]
    assert router_model.interleave([33, 33, 34])[:6] == (2, 0, 1, 2, 0, 1)


def test_interleave_all_zero_means_nobody() -> None:
    assert router_model.interleave([0, 0]) == (None,) * 100
    assert router_model.interleave([]) == (None,) * 100


def test_interleave_refuses_weights_not_summing_to_100() -> None:
    with pytest.raises(ValueError, match="sum to 100"):
        router_model.interleave([50, 40])


@st.composite
def percent_weights(draw: st.DrawFn, max_revisions: int = 6) -> list[int]:
    n = draw(st.integers(1, max_revisions))
    cuts = sorted(draw(st.lists(st.integers(0, 100), min_size=n - 1, max_size=n - 1)))
    return [b - a for a, b in zip([0, *cuts], [*cuts, 100], strict=True)]


def _window_counts(order: tuple[int | None, ...], start: int, length: int) -> Counter[int | None]:
    return Counter(order[(start + j) % len(order)] for j in range(length))


@given(percent_weights())
def test_every_cyclic_window_of_100_is_exact(weights: list[int]) -> None:
    order = router_model.interleave(weights)
    for start in range(100):
        counts = _window_counts(order, start, 100)
        assert [counts.get(i, 0) for i in range(len(weights))] == weights


@given(percent_weights())
def test_small_windows_stay_within_two_of_the_weight(weights: list[int]) -> None:
    order = router_model.interleave(weights)
    for length in (1, 5, 10, 20, 37, 50):
        for start in range(0, 100, 3):
            counts = _window_counts(order, start, length)
            for index, weight in enumerate(weights):
                assert abs(counts.get(index, 0) - weight * length / 100) < 2


@given(st.integers(0, 100))
def test_two_revisions_split_every_window_as_evenly_as_integers_allow(weight: int) -> None:
    order = router_model.interleave([weight, 100 - weight])
    for length in range(1, 101, 7):
        for start in range(100):
            got = _window_counts(order, start, length).get(0, 0)
            assert math.floor(weight * length / 100) <= got <= math.ceil(weight * length / 100)


# --- slots -------------------------------------------------------------------------------


def test_slots_are_kept_while_the_revision_exists() -> None:
    count, slots = router_model.assign_slots(["v2", "v3"], {"v1": 0, "v2": 1}, slot_count=4)
    assert count == 4
    assert slots == {"v2": 1, "v3": 0}


def test_new_revisions_avoid_slots_still_draining() -> None:
    _, slots = router_model.assign_slots(["v2", "v3"], {"v2": 1}, slot_count=4, busy=[0, 1])
    assert slots == {"v2": 1, "v3": 2}


def test_the_pool_grows_in_blocks_and_never_shrinks() -> None:
    assert router_model.assign_slots(["a"], {}, slot_count=0) == (4, {"a": 0})
    names = [f"r{i}" for i in range(5)]
    count, slots = router_model.assign_slots(names, {"r0": 3}, slot_count=4)
    assert count == 8
    assert slots["r0"] == 3
    assert sorted(slots.values()) == [0, 1, 2, 3, 4]
    assert router_model.assign_slots(["a"], {"a": 6}, slot_count=8) == (8, {"a": 6})


def test_a_conflicting_previous_assignment_is_resolved() -> None:
    _, slots = router_model.assign_slots(["a", "b"], {"a": 1, "b": 1}, slot_count=4)
    assert slots == {"a": 1, "b": 0}


def test_plan_keeps_slots_across_weight_changes() -> None:
    first = router_model.plan_service(route(V1, V2))
    moved = route(
        RevisionRoute("cost-v1", 50, V1.endpoints), RevisionRoute("cost-v2", 50, V2.endpoints)
    )
    again = router_model.plan_service(moved, previous=first.slots, slot_count=first.slot_count)
    assert again.slots == first.slots == {"cost-v1": 0, "cost-v2": 1}


# --- validation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("routes", "message"),
    [
        ([route(RevisionRoute("a", 90))], "weights sum to 90"),
        ([route(RevisionRoute("a", 101))], "weight 101"),
        ([route(RevisionRoute("a", 100), namespace="Default")], "DNS-1123"),
        ([route(RevisionRoute("a", 100), service="cost_model")], "DNS-1123"),
        ([route(RevisionRoute("A", 100))], "revision name"),
        ([route(RevisionRoute("a", 100), rest_port=9000)], "stats port"),
        ([route(RevisionRoute("a", 100), grpc_port=8501)], "port 8501 is used by both"),
        ([route(RevisionRoute("a", 100, (ep("x", 8500),)))], "port 8500"),
        ([route(RevisionRoute("a", 50), RevisionRoute("a", 50))], "listed twice"),
        (
            [route(RevisionRoute("a", 50, (ep("x", 1),)), RevisionRoute("b", 50, (ep("x", 3),)))],
            "appears twice",
        ),
        ([route(RevisionRoute("a", 100, (ep("x", 1), ep("y", 2))))], "port 2"),
        ([route(RevisionRoute("a", 100, (Endpoint("X_1", 1, 2),)))], "endpoint name"),
        ([route(RevisionRoute("a", 100)), route(RevisionRoute("a", 100))], "routed twice"),
        (
            [route(RevisionRoute("a", 100), match=Match("header", "x-ab", "b", "nope"))],
            "not among the service's revisions",
        ),
        (
            [route(RevisionRoute("a", 100), match=Match("header", "x ab", "b", "a"))],
            "header name",
        ),
        (
            [route(RevisionRoute("a", 100), match=Match("cookie", "ab", "b;c", "a"))],
            "cookie value",
        ),
    ],
)
def test_invalid_routes_are_refused_with_the_reason(
    routes: list[ServiceRoute], message: str
) -> None:
    with pytest.raises(RouteError, match=message):
        router_model.validate(routes, stats_port=9000)


def test_valid_routes_pass() -> None:
    router_model.validate(
        [
            route(V1, V2, match=Match("header", "x-variant", "b", "cost-v2")),
            route(RevisionRoute("x", 0), service="other", rest_port=8601, grpc_port=8600),
        ],
        stats_port=9000,
    )


# --- rendering ---------------------------------------------------------------------------


def test_config_routes_through_counter_and_maps() -> None:
    plans = plan(route(V1, V2, match=Match("cookie", "ab", "beta", "cost-v2")))
    rendered = haproxy_config.render(plans, SETTINGS)
    config = rendered.config
    weights = "/srv/router/maps/default.cost.weights.map"
    assert "frontend default.cost_rest\n    bind 127.0.0.1:8501\n" in config
    assert "frontend default.cost_grpc\n    bind 127.0.0.1:8500 proto h2\n" in config
    assert "stick-table type integer size 1 store gpc0" in config
    assert f"sc_inc_gpc0(0),mod(100),map_int({weights})" in config
    assert "req.cook(ab),map_str(/srv/router/maps/default.cost.match.map)" in config
    assert "use_backend default.cost_rest_%[var(txn.slot)]" in config
    assert "default_backend default.cost_off" in config
    assert "balance leastconn" in config
    # The idle pool's settings are written out: a server added at run time gets none.
    pool = " pool-max-conn -1 pool-purge-delay 5s"
    assert f"server v1-a 127.0.0.1:10000 check inter 1000ms fall 1 rise 1{pool}\n" in config
    assert (
        f"server v1-a 127.0.0.1:10001 proto h2 check inter 1000ms fall 1 rise 1{pool}\n" in config
    )
    for line in ("retries 3", "option redispatch 1", "retry-on conn-failure empty-response"):
        assert f"    {line}\n" in config
    assert "timeout connect 2000ms" in config
    assert "use-service prometheus-exporter if { path /metrics }" in config
    assert "stats uri /stats" in config
    assert "stats socket /srv/router/admin.sock mode 600 level admin expose-fd listeners" in config
    assert f"set-var proc.servectl_structure str({rendered.structure})" in config
    # Four slots, each for REST and gRPC.
    assert config.count("\nbackend default.cost_rest_") == 4
    assert config.count("\nbackend default.cost_grpc_") == 4


def test_maps_hold_positions_slots_and_the_match() -> None:
    plans = plan(route(V1, V2, match=Match("header", "x-variant", "b", "cost-v2")))
    maps = haproxy_config.render(plans, SETTINGS).maps
    weights = dict(maps[Path("/srv/router/maps/default.cost.weights.map")])
    assert list(weights) == [str(k) for k in range(100)]
    assert Counter(weights.values()) == {"0": 90, "1": 10}
    assert maps[Path("/srv/router/maps/default.cost.slots.map")] == (
        ("0", "cost-v1"),
        ("1", "cost-v2"),
    )
    assert maps[Path("/srv/router/maps/default.cost.match.map")] == (("b", "1"),)


def test_no_weight_maps_every_position_to_off() -> None:
    maps = haproxy_config.render(plan(route(RevisionRoute("a", 0))), SETTINGS).maps
    entries = maps[Path("/srv/router/maps/default.cost.weights.map")]
    assert {value for _, value in entries} == {haproxy_config.OFF}


def test_a_draining_server_is_written_with_weight_0() -> None:
    revision = RevisionRoute("cost-v1", 100, (ep("v1-a", 10000, draining=True),))
    config = haproxy_config.render(plan(route(revision)), SETTINGS).config
    assert (
        "server v1-a 127.0.0.1:10000 check inter 1000ms fall 1 rise 1 "
        "pool-max-conn -1 pool-purge-delay 5s weight 0" in config
    )


def _structure(*routes: ServiceRoute, settings: haproxy_config.Settings = SETTINGS) -> str:
    return haproxy_config.render(plan(*routes), settings).structure


def test_runtime_changes_keep_the_structure() -> None:
    base = _structure(route(V1, V2, match=Match("header", "x-ab", "b", "cost-v2")))
    same = [
        route(
            RevisionRoute("cost-v1", 50, V1.endpoints[:1]),
            RevisionRoute("cost-v2", 50, (ep("v2-a", 10010, draining=True), ep("v2-b", 10020))),
            match=Match("header", "x-ab", "other-value", "cost-v1"),
        ),
        route(
            RevisionRoute("new-name", 100),
            RevisionRoute("cost-v2", 0),
            match=Match("header", "x-ab", "b", "cost-v2"),
        ),
    ]
    for changed in same:
        assert _structure(changed) == base


def test_structure_changes_need_a_reload() -> None:
    base = _structure(route(V1, V2))
    other = route(RevisionRoute("x", 100), service="other", rest_port=8601, grpc_port=8600)
    many = route(*(RevisionRoute(f"r{i}", 20) for i in range(5)))
    for changed in (
        _structure(route(V1, V2, rest_port=8601)),
        _structure(route(V1, V2), other),
        _structure(many),
        _structure(route(V1, V2, match=Match("header", "x-ab", "b", "cost-v2"))),
        _structure(route(V1, V2), settings=haproxy_config.Settings(Path("/srv/router"), 9001)),
        _structure(
            route(V1, V2),
            settings=haproxy_config.Settings(Path("/srv/router"), 9000, Timeouts(server_s=30)),
        ),
    ):
        assert changed != base


def test_layout_round_trips() -> None:
    plans = plan(
        route(V1, V2, match=Match("cookie", "ab", "b", "cost-v2")),
        route(RevisionRoute("x", 100), namespace="ml", service="rank", rest_port=1, grpc_port=2),
    )
    layout = haproxy_config.parse_layout(haproxy_config.layout_value(plans))
    assert layout == {
        ("default", "cost"): haproxy_config.LayoutEntry(8501, 8500, 4, "cookie", "ab"),
        ("ml", "rank"): haproxy_config.LayoutEntry(1, 2, 4, None, None),
    }
    assert haproxy_config.parse_layout(haproxy_config.layout_value([])) == {}


def test_plans_round_trip_through_json() -> None:
    plans = plan(route(V1, V2, match=Match("header", "x-ab", "b", "cost-v2")))
    assert router_model.plans_from_json(router_model.plans_to_json(plans)) == plans


def test_slot_backend_names_parse_back() -> None:
    names = SETTINGS.names("ml", "rank-2")
    assert haproxy_config.parse_slot_backend(
        names.slot_backend("grpc", 3)
    ) == haproxy_config.SlotBackend("ml", "rank-2", "grpc", 3)
    assert haproxy_config.parse_slot_backend(names.off_backend) is None
    assert haproxy_config.parse_slot_backend("servectl_stats") is None


# --- parsing HAProxy's answers (captured from HAProxy 2.6.12) ----------------------------

SERVERS_STATE = """1
# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port srv_check_addr srv_agent_addr srv_agent_port
4 svc_rest_0 1 a1 127.0.0.1 2 0 1 1 12 6 3 1 6 0 0 0 - 9101 - 0 0 - - 0
5 svc_rest_1 1 b1 127.0.0.1 2 8 1 0 12 6 3 1 6 0 0 0 - 9201 - 0 0 - - 0
5 svc_rest_1 2 b2 127.0.0.1 0 1 1 1 0 1 0 0 2 0 0 0 - 9202 - 0 0 - - 0

"""  # noqa: E501

STAT = """# pxname,svname,qcur,qmax,scur,smax,slim,stot,status,weight
svc_rest,FRONTEND,,,3,9,9978,120,OPEN,
svc_rest_0,a1,0,0,2,3,,108,UP,1
svc_rest_0,BACKEND,0,0,2,3,1,108,UP,1
svc_rest_1,b1,1,1,1,1,,10,UP,1
svc_rest_1,b2,0,0,0,0,,0,MAINT,1

"""


def test_servers_join_state_and_load() -> None:
    servers = haproxy_state.parse_servers(SERVERS_STATE, STAT)
    assert servers["svc_rest_0"]["a1"] == haproxy_state.ServerState(
        port=9101, admin=0, weight=1, check_state=6, up=True, current=2, queued=0
    )
    b1 = servers["svc_rest_1"]["b1"]
    assert b1.draining and not b1.maint and b1.outstanding == 2
    b2 = servers["svc_rest_1"]["b2"]
    assert b2.maint and not b2.up and b2.check_state == 2


def test_map_and_var_answers_parse() -> None:
    text = "0x55f676022400 0 1\n0x55f676022490 1 off\n\n"
    assert haproxy_state.parse_map(text) == (("0", "1"), ("1", "off"))
    assert haproxy_state.parse_map("") == ()
    assert (
        haproxy_state.parse_var("proc.servectl_layout: type=str value=<a.b=1/2/4/->\n")
        == "a.b=1/2/4/-"
    )
    assert haproxy_state.parse_var("Variable not found.\n") is None


# --- convergence -------------------------------------------------------------------------


def _lines(changes: list[haproxy_state.Change]) -> list[str]:
    return [
        c.line if isinstance(c, haproxy_state.Command) else f"replace {c.path}" for c in changes
    ]


def test_a_state_loaded_from_the_files_needs_no_command() -> None:
    plans = plan(route(V1, V2, match=Match("header", "x-ab", "b", "cost-v2")))
    rendered = haproxy_config.render(plans, SETTINGS)
    assert haproxy_state.converge(rendered.runtime, observed_from(rendered, plans)) == []


def test_new_servers_are_added_enabled_and_checked_before_maps_move() -> None:
    before = plan(route(V1, V2))
    after = [
        router_model.plan_service(
            route(
                RevisionRoute("cost-v1", 50, V1.endpoints),
                RevisionRoute("cost-v2", 50, (*V2.endpoints, ep("v2-b", 10020))),
            ),
            previous=before[0].slots,
        )
    ]
    observed = observed_from(haproxy_config.render(before, SETTINGS), before)
    lines = _lines(haproxy_state.converge(haproxy_config.render(after, SETTINGS).runtime, observed))
    assert lines == [
        "add server default.cost_grpc_1/v2-b 127.0.0.1:10021 proto h2 check inter 1000ms "
        "fall 1 rise 1 pool-max-conn -1 pool-purge-delay 5s",
        "enable health default.cost_grpc_1/v2-b",
        "set server default.cost_grpc_1/v2-b state ready",
        "add server default.cost_rest_1/v2-b 127.0.0.1:10020 check inter 1000ms fall 1 rise 1 "
        "pool-max-conn -1 pool-purge-delay 5s",
        "enable health default.cost_rest_1/v2-b",
        "set server default.cost_rest_1/v2-b state ready",
        "replace /srv/router/maps/default.cost.weights.map",
    ]


def _with_server(
    observed: haproxy_state.RuntimeState, backend: str, name: str, state: haproxy_state.ServerState
) -> haproxy_state.RuntimeState:
    servers = {b: dict(s) for b, s in observed.servers.items()}
    servers.setdefault(backend, {})[name] = state
    return haproxy_state.RuntimeState(observed.structure, observed.layout, servers, observed.maps)


def test_leaving_servers_go_to_maintenance_and_are_deleted_when_idle() -> None:
    plans = plan(route(V1, V2))
    rendered = haproxy_config.render(plans, SETTINGS)
    observed = observed_from(rendered, plans)
    busy = haproxy_state.ServerState(port=1, admin=0, weight=1, check_state=6, up=True, current=1)
    idle_maint = haproxy_state.ServerState(
        port=3, admin=haproxy_state.ADMF_FMAINT, weight=1, check_state=14, up=False
    )
    observed = _with_server(observed, "default.cost_rest_2", "old-a", busy)
    observed = _with_server(observed, "default.cost_rest_2", "old-b", idle_maint)
    changes = haproxy_state.converge(rendered.runtime, observed)
    assert _lines(changes) == [
        "set server default.cost_rest_2/old-a state maint",
        "del server default.cost_rest_2/old-b",
    ]
    assert all(
        c.deferrable for c in changes if isinstance(c, haproxy_state.Command) and "del" in c.line
    )


def test_drain_and_undrain() -> None:
    plans = plan(route(V1, V2))
    rendered = haproxy_config.render(plans, SETTINGS)
    observed = observed_from(rendered, plans)
    drained = plan(
        route(RevisionRoute("cost-v1", 90, (ep("v1-a", 10000, draining=True), V1.endpoints[1])), V2)
    )
    lines = _lines(
        haproxy_state.converge(haproxy_config.render(drained, SETTINGS).runtime, observed)
    )
    assert lines == [
        "set server default.cost_grpc_0/v1-a state drain",
        "set server default.cost_rest_0/v1-a state drain",
    ]
    # Back from a drain done at runtime, and from a drain written in the config (weight 0).
    flagged = haproxy_state.ServerState(
        port=10000, admin=haproxy_state.ADMF_FDRAIN, weight=1, check_state=6, up=True
    )
    zero = haproxy_state.ServerState(port=10001, admin=0, weight=0, check_state=6, up=True)
    observed = _with_server(observed, "default.cost_rest_0", "v1-a", flagged)
    observed = _with_server(observed, "default.cost_grpc_0", "v1-a", zero)
    assert _lines(haproxy_state.converge(rendered.runtime, observed)) == [
        "set server default.cost_grpc_0/v1-a weight 1",
        "set server default.cost_rest_0/v1-a state ready",
    ]


def test_a_moved_port_and_a_disabled_check_are_fixed_in_place() -> None:
    plans = plan(route(V1, V2))
    rendered = haproxy_config.render(plans, SETTINGS)
    observed = _with_server(
        observed_from(rendered, plans),
        "default.cost_rest_0",
        "v1-a",
        haproxy_state.ServerState(port=999, admin=0, weight=1, check_state=2, up=True),
    )
    assert _lines(haproxy_state.converge(rendered.runtime, observed)) == [
        "set server default.cost_rest_0/v1-a addr 127.0.0.1 port 10000",
        "enable health default.cost_rest_0/v1-a",
    ]


def test_a_draining_endpoint_that_is_not_there_is_not_added() -> None:
    plans = plan(route(RevisionRoute("cost-v1", 100, (ep("v1-a", 10000, draining=True),))))
    rendered = haproxy_config.render(plans, SETTINGS)
    empty = haproxy_state.RuntimeState(rendered.structure, {}, {}, dict(rendered.runtime.maps))
    assert haproxy_state.converge(rendered.runtime, empty) == []


def test_actual_routes_read_back_what_was_rendered() -> None:
    wanted = route(
        RevisionRoute("cost-v1", 90, (ep("v1-a", 10000), ep("v1-b", 10002, draining=True))),
        V2,
        match=Match("header", "x-ab", "b", "cost-v2"),
    )
    plans = plan(wanted)
    observed = observed_from(haproxy_config.render(plans, SETTINGS), plans)
    assert haproxy_state.actual_routes(observed, SETTINGS) == {("default", "cost"): wanted}
