"""The router against a real HAProxy (servectl/backends/local/router.py).

Fake replicas (servectl.testing.replicas: threaded http.server and a grpcio generic handler)
answer their name; the tests count who answered. Skipped when ``haproxy`` is missing,
failing instead when ``SERVECTL_REQUIRE_HAPROXY=1`` (CI).
"""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from servectl import processes
from servectl.backends.local.router import (
    INSTALL_HINT,
    Match,
    RevisionRoute,
    RouteError,
    Router,
    RouterError,
    RouterNotFound,
    ServiceRoute,
    Timeouts,
)
from servectl.testing.exporters import wait_until
from servectl.testing.replicas import GRPC_METHOD, FakeReplica

pytestmark = pytest.mark.haproxy

REQUIRE_ENV = "SERVECTL_REQUIRE_HAPROXY"


@pytest.fixture(scope="module")
def haproxy_binary() -> str:
    path = shutil.which("haproxy")
    if path is not None:
        return path
    message = f"haproxy not found on PATH; {INSTALL_HINT}"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message} ({REQUIRE_ENV}=1)")
    pytest.skip(message)


def free_port() -> int:
    return processes.free_port()


@pytest.fixture
def router(tmp_path: Path, haproxy_binary: str) -> Iterator[Router]:
    started = Router(tmp_path / "r", stats_port=free_port(), binary=haproxy_binary)
    started.start()
    try:
        yield started
    finally:
        started.stop(timeout_s=1.0)


@pytest.fixture
def recording_router(tmp_path: Path, haproxy_binary: str) -> Iterator[tuple[Router, list[str]]]:
    """A started router and every runtime API command it sends (reads included)."""
    sent: list[str] = []
    started = Router(
        tmp_path / "r", stats_port=free_port(), binary=haproxy_binary, on_command=sent.append
    )
    started.start()
    try:
        yield started, sent
    finally:
        started.stop(1.0)


ReplicaFactory = Callable[[str], FakeReplica]


@pytest.fixture
def replica() -> Iterator[ReplicaFactory]:
    started: list[FakeReplica] = []

    def make(name: str) -> FakeReplica:
        fake = FakeReplica(name).start()
        started.append(fake)
        return fake

    yield make
    for fake in started:
        fake.stop()


def get(
    port: int, path: str = "/", headers: Mapping[str, str] | None = None
) -> tuple[int, str, str | None]:
    """One request on a new connection: (status, body, x-servectl-revision)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers=dict(headers or {}))
        response = conn.getresponse()
        return response.status, response.read().decode(), response.getheader("x-servectl-revision")
    finally:
        conn.close()


def bodies(port: int, n: int, headers: Mapping[str, str] | None = None) -> Counter[str]:
    return Counter(get(port, headers=headers)[1] for _ in range(n))


def service(
    *revisions: RevisionRoute,
    name: str = "cost",
    ports: tuple[int, int] | None = None,
    match: Match | None = None,
) -> ServiceRoute:
    rest, grpc = ports or (free_port(), free_port())
    return ServiceRoute("default", name, rest, grpc, revisions, match)


def moved(route: ServiceRoute, weights: Mapping[str, int]) -> ServiceRoute:
    """``route`` with new weights."""
    revisions = tuple(replace(r, weight=weights[r.name]) for r in route.revisions)
    return replace(route, revisions=revisions)


class RequestLoop:
    """Threads sending requests until stopped; counts answers by body and every failure."""

    def __init__(self, port: int, *, threads: int = 4, keep_alive: bool = False) -> None:
        self.port = port
        self.keep_alive = keep_alive
        self.ok: Counter[str] = Counter()
        self.failures: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]
        for thread in self._threads:
            thread.start()

    def _run(self) -> None:
        conn: http.client.HTTPConnection | None = None
        while not self._stop.is_set():
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                conn.request("GET", "/")
                response = conn.getresponse()
                body = response.read().decode()
                if not self.keep_alive or response.will_close:
                    conn.close()
                    conn = None
                with self._lock:
                    if response.status == 200:
                        self.ok[body] += 1
                    else:
                        self.failures.append(f"HTTP {response.status}: {body}")
            except (OSError, http.client.HTTPException) as error:
                with self._lock:
                    self.failures.append(repr(error))
                conn = None

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self.ok.values())

    def stop(self) -> RequestLoop:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=15)
        return self


# --- the split ---------------------------------------------------------------------------


def test_rest_split_is_exact_sequentially_and_at_concurrency_20(
    router: Router, replica: ReplicaFactory
) -> None:
    a1, a2, b1 = replica("v1-a"), replica("v1-b"), replica("v2-a")
    route = service(
        RevisionRoute("cost-v1", 90, (a1.endpoint(), a2.endpoint())),
        RevisionRoute("cost-v2", 10, (b1.endpoint(),)),
    )
    router.apply([route])
    answers = Counter(get(route.rest_port)[2] for _ in range(100))
    assert answers == {"cost-v1": 90, "cost-v2": 10}

    with ThreadPoolExecutor(20) as pool:
        revisions = Counter(pool.map(lambda _: get(route.rest_port)[2], range(1000)))
    # The counter is atomic, so concurrency does not blur it: 1000 requests are ten cycles.
    assert revisions == {"cost-v1": 900, "cost-v2": 100}
    # Within cost-v1, least outstanding requests spread the load over both replicas.
    assert a1.served > 100 and a2.served > 100


def test_grpc_goes_through_the_h2c_frontend_to_the_right_revision(
    router: Router, replica: ReplicaFactory
) -> None:
    grpc = pytest.importorskip("grpc")
    a, b = replica("v1-a"), replica("v2-a")
    v1 = RevisionRoute("cost-v1", 50, (a.endpoint(),))
    v2 = RevisionRoute("cost-v2", 50, (b.endpoint(),))
    route = service(v1, v2)
    router.apply([route])
    with grpc.insecure_channel(f"127.0.0.1:{route.grpc_port}") as channel:
        call = channel.unary_unary(GRPC_METHOD)
        assert Counter(call(b"", timeout=5).decode() for _ in range(100)) == {
            "v1-a": 50,
            "v2-a": 50,
        }
        reloads = router.reloads
        router.apply([moved(route, {"cost-v1": 0, "cost-v2": 100})])
        assert router.reloads == reloads  # a weight change is a runtime change
        assert Counter(call(b"", timeout=5).decode() for _ in range(20)) == {"v2-a": 20}


def test_no_weight_answers_503_naming_the_service(router: Router, replica: ReplicaFactory) -> None:
    route = service(RevisionRoute("cost-v1", 0, (replica("v1-a").endpoint(),)))
    router.apply([route])
    status, body, _ = get(route.rest_port)
    assert status == 503
    assert "default/cost" in body


# --- A/B ---------------------------------------------------------------------------------


def test_header_route_sends_only_matching_requests_to_b(
    router: Router, replica: ReplicaFactory
) -> None:
    a, b = replica("v1-a"), replica("v2-a")
    match = Match("header", "x-variant", "beta", "cost-v2")
    route = service(
        RevisionRoute("cost-v1", 100, (a.endpoint(),)),
        RevisionRoute("cost-v2", 0, (b.endpoint(),)),
        match=match,
    )
    router.apply([route])
    assert bodies(route.rest_port, 30) == {"v1-a": 30}
    assert bodies(route.rest_port, 30, {"x-variant": "beta"}) == {"v2-a": 30}
    assert bodies(route.rest_port, 10, {"x-variant": "gamma"}) == {"v1-a": 10}

    # Moving the route (value or revision) is a map change, not a reload.
    reloads = router.reloads
    router.apply([replace(route, match=replace(match, value="gamma", revision="cost-v2"))])
    assert router.reloads == reloads
    assert bodies(route.rest_port, 10, {"x-variant": "gamma"}) == {"v2-a": 10}
    assert bodies(route.rest_port, 10, {"x-variant": "beta"}) == {"v1-a": 10}

    # A cookie instead of a header is a new name in the config: one reload.
    router.apply([replace(route, match=Match("cookie", "ab", "beta", "cost-v2"))])
    assert router.reloads == reloads + 1
    assert bodies(route.rest_port, 10, {"Cookie": "x=1; ab=beta"}) == {"v2-a": 10}
    assert bodies(route.rest_port, 10, {"x-variant": "beta"}) == {"v1-a": 10}


# --- drain, removal, failures ------------------------------------------------------------


def test_drain_lets_the_in_flight_request_finish_and_sends_no_new_ones(
    router: Router, replica: ReplicaFactory
) -> None:
    a, b = replica("v1-a"), replica("v1-b")
    route = service(RevisionRoute("cost-v1", 100, (a.endpoint(),)))
    router.apply([route])
    key = ("default", "cost", "v1-a")
    with ThreadPoolExecutor(1) as pool:
        slow = pool.submit(get, route.rest_port, "/?sleep=1.5")
        wait_until(lambda: router.inflight().get(key) == 1, 5, "the slow request in flight")
        draining = replace(
            route,
            revisions=(RevisionRoute("cost-v1", 100, (a.endpoint(draining=True), b.endpoint())),),
        )
        router.apply([draining])
        assert bodies(route.rest_port, 20) == {"v1-b": 20}
        assert router.inflight()[key] == 1
        assert router.actual()[("default", "cost")].revisions[0].endpoints[0].draining
        assert slow.result(timeout=10)[:2] == (200, "v1-a")
    wait_until(lambda: router.inflight().get(key) == 0, 5, "v1-a idle")

    # Gone from the desired state: maintenance, then deleted (it is idle).
    router.apply([replace(route, revisions=(RevisionRoute("cost-v1", 100, (b.endpoint(),)),))])
    assert key not in router.inflight()
    endpoints = router.actual()[("default", "cost")].revisions[0].endpoints
    assert [e.name for e in endpoints] == ["v1-b"]


def test_a_busy_leaving_server_is_deleted_by_a_later_apply(
    router: Router, replica: ReplicaFactory
) -> None:
    a, b = replica("v1-a"), replica("v1-b")
    route = service(RevisionRoute("cost-v1", 100, (a.endpoint(),)))
    router.apply([route])
    key = ("default", "cost", "v1-a")
    without_a = replace(route, revisions=(RevisionRoute("cost-v1", 100, (b.endpoint(),)),))
    with ThreadPoolExecutor(1) as pool:
        slow = pool.submit(get, route.rest_port, "/?sleep=1")
        wait_until(lambda: router.inflight().get(key) == 1, 5, "the slow request in flight")
        router.apply([without_a])
        assert router.inflight().get(key) == 1  # in maintenance, still answering
        assert slow.result(timeout=10)[:2] == (200, "v1-a")
    wait_until(lambda: router.inflight().get(key) == 0, 5, "v1-a idle")
    # HAProxy also refuses while it keeps an idle keep-alive connection to the server; the
    # caller stops the replica once inflight() is 0, which closes them.
    a.stop()
    router.apply([without_a])
    assert key not in router.inflight()
    assert router.last_changes == ("del server default.cost_rest_0/v1-a",)


def test_a_dead_replica_fails_no_request(router: Router, replica: ReplicaFactory) -> None:
    a, b = replica("v1-a"), replica("v1-b")
    route = service(RevisionRoute("cost-v1", 100, (a.endpoint(), b.endpoint())))
    router.apply([route])
    assert set(bodies(route.rest_port, 20)) == {"v1-a", "v1-b"}
    a.stop()  # before any health check notices: the connection is refused, then retried
    answers = [get(route.rest_port) for _ in range(50)]
    assert {(status, body) for status, body, _ in answers} == {(200, "v1-b")}


# --- process lifecycle -------------------------------------------------------------------


def test_kill_9_of_haproxy_then_ensure_running_restores_the_routes(
    router: Router, replica: ReplicaFactory
) -> None:
    a, b = replica("v1-a"), replica("v2-a")
    route = service(
        RevisionRoute("cost-v1", 90, (a.endpoint(),)),
        RevisionRoute("cost-v2", 10, (b.endpoint(),)),
        match=Match("header", "x-variant", "beta", "cost-v2"),
    )
    router.apply([route])
    # Runtime-only changes after the last reload: they must survive too.
    route = moved(route, {"cost-v1": 80, "cost-v2": 20})
    router.apply([route])
    before = router.actual()
    assert router.ensure_running() is False

    pids = router.processes()
    assert len(pids) >= 2  # master and worker
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not router.running, 5, "HAProxy gone")

    assert router.ensure_running() is True
    assert router.actual() == before
    assert bodies(route.rest_port, 100) == {"v1-a": 80, "v2-a": 20}
    assert bodies(route.rest_port, 5, {"x-variant": "beta"}) == {"v2-a": 5}
    router.apply([route])
    assert router.last_changes == ()


_CONTROLLER = """
import sys, time
from pathlib import Path
from servectl.backends.local.router import Endpoint, RevisionRoute, Router, ServiceRoute
directory, stats, rest, grpc, port_a, port_b = sys.argv[1:]
router = Router(Path(directory), stats_port=int(stats))
router.start()
endpoint = Endpoint("v1-a", int(port_a), int(port_b))
revision = RevisionRoute("cost-v1", 100, (endpoint,))
router.apply([ServiceRoute("default", "cost", int(rest), int(grpc), (revision,))])
print(router.pid, flush=True)
time.sleep(600)
"""


def test_haproxy_outlives_its_controller_and_a_new_router_adopts_it(
    tmp_path: Path, haproxy_binary: str, replica: ReplicaFactory
) -> None:
    a = replica("v1-a")
    directory, stats = tmp_path / "r", free_port()
    rest, grpc = free_port(), free_port()
    env = {**os.environ, "PATH": f"{Path(haproxy_binary).parent}:{os.environ.get('PATH', '')}"}
    controller = subprocess.Popen(
        [sys.executable, "-c", _CONTROLLER, str(directory), str(stats), str(rest), str(grpc),
         str(a.rest_port), str(a.grpc_port)],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )  # fmt: skip
    adopted: Router | None = None
    try:
        assert controller.stdout is not None
        pid = int(controller.stdout.readline())
        loop = RequestLoop(rest, threads=2, keep_alive=True)
        wait_until(lambda: loop.total > 20, 5, "requests flowing")
        controller.kill()  # kill -9 of the controller
        controller.wait()

        adopted = Router(directory, stats_port=stats, binary=haproxy_binary)
        assert adopted.running and adopted.pid == pid
        assert adopted.ensure_running() is False
        route = adopted.actual()[("default", "cost")]
        assert [r.name for r in route.revisions] == ["cost-v1"]
        adopted.apply([route])
        assert adopted.reloads == 0 and adopted.last_changes == ()
        served = loop.total
        wait_until(lambda: loop.total > served + 20, 5, "requests still flowing")
        loop.stop()
        assert loop.failures == []
        assert adopted.pid == pid
    finally:
        controller.kill()
        controller.wait()
        (adopted or Router(directory, stats_port=stats, binary=haproxy_binary)).stop(1.0)


def test_apply_twice_sends_no_command_the_second_time(
    recording_router: tuple[Router, list[str]], replica: ReplicaFactory
) -> None:
    router, sent = recording_router
    a, b, c = replica("v1-a"), replica("v1-b"), replica("v2-a")
    route = service(
        RevisionRoute("cost-v1", 70, (a.endpoint(), b.endpoint(draining=True))),
        RevisionRoute("cost-v2", 30, (c.endpoint(),)),
        match=Match("cookie", "ab", "beta", "cost-v2"),
    )
    router.apply([route])
    # Runtime changes: a weight and a new server, then the same again.
    route = moved(route, {"cost-v1": 60, "cost-v2": 40})
    router.apply([route])
    assert any(line.startswith("commit map") for line in router.last_changes)
    sent.clear()
    router.apply([route])
    assert router.last_changes == ()
    changes = [c for c in sent if not c.startswith(("show ", "get "))]
    assert changes == []


def test_a_replica_added_at_run_time_gets_kept_alive_connections(
    router: Router, replica: ReplicaFactory
) -> None:
    # HAProxy 2.6 gives a server added through the runtime API no idle pool unless its
    # line says so: each request then opened (and reset) a connection of its own.
    first, added = replica("v1-a"), replica("v1-b")
    route = service(RevisionRoute("cost-v1", 100, (first.endpoint(),)))
    router.apply([route])
    route = service(
        RevisionRoute("cost-v1", 100, (first.endpoint(), added.endpoint())),
        ports=(route.rest_port, route.grpc_port),
    )
    router.apply([route])
    assert any(line.startswith("add server") for line in router.last_changes)
    wait_until(lambda: get(route.rest_port)[0] == 200, 5, "the route to serve")
    before = {r.name: (r.accepted, r.served) for r in (first, added)}
    conn = http.client.HTTPConnection("127.0.0.1", route.rest_port, timeout=10)
    try:
        for _ in range(40):  # one client connection, one request at a time
            conn.request("GET", "/")
            response = conn.getresponse()
            response.read()
            assert response.status == 200
    finally:
        conn.close()
    for fake in (first, added):
        accepted, served = before[fake.name]
        assert fake.served - served >= 10  # leastconn shares the sequential requests
        # A connection or two (the health checks are TCP only, on their own), not 20.
        assert fake.accepted - accepted <= 3, (fake.name, fake.accepted - accepted)


def test_a_reading_taken_since_the_last_apply_spares_apply_its_own(
    recording_router: tuple[Router, list[str]], replica: ReplicaFactory
) -> None:
    # The controller reads HAProxy once a tick (observe) and hands that reading to apply.
    router, sent = recording_router
    a, b = replica("v1-a"), replica("v2-a")
    route = service(
        RevisionRoute("cost-v1", 90, (a.endpoint(),)),
        RevisionRoute("cost-v2", 10, (b.endpoint(),)),
    )
    router.apply([route])
    reading = router.observe()
    assert router.actual(reading) == router.actual()
    sent.clear()
    route = moved(route, {"cost-v1": 50, "cost-v2": 50})
    router.apply([route], observed=reading)
    assert not any(c.startswith(("show ", "get ")) for c in sent)  # no second reading
    assert any(c.startswith("commit map") for c in sent)
    assert bodies(route.rest_port, 100) == {"v1-a": 50, "v2-a": 50}
    sent.clear()
    router.apply([route], observed=router.observe())
    assert [c for c in sent if not c.startswith(("show ", "get "))] == []


def test_adding_a_service_reloads_without_failing_a_request(
    router: Router, replica: ReplicaFactory
) -> None:
    first = service(RevisionRoute("cost-v1", 100, (replica("v1-a").endpoint(),)))
    router.apply([first])
    fresh = RequestLoop(first.rest_port, threads=2)
    kept = RequestLoop(first.rest_port, threads=2, keep_alive=True)
    wait_until(lambda: fresh.total > 20 and kept.total > 20, 5, "requests flowing")
    second = service(RevisionRoute("rank-v1", 100, (replica("r1-a").endpoint(),)), name="rank")
    reloads = router.reloads
    router.apply([first, second])
    assert router.reloads == reloads + 1
    assert bodies(second.rest_port, 5) == {"r1-a": 5}
    counts = (fresh.total, kept.total)
    wait_until(
        lambda: fresh.total > counts[0] + 20 and kept.total > counts[1] + 20,
        5,
        "requests flowing after the reload",
    )
    assert fresh.stop().failures == []
    assert kept.stop().failures == []
    # More revisions than slots grow the pool: a reload too, and the first slots stay.
    revisions = tuple(
        RevisionRoute(f"rank-v{i}", 20, (replica(f"r{i}-x").endpoint(),)) for i in range(1, 6)
    )
    router.apply([first, replace(second, revisions=revisions)])
    assert router.reloads == reloads + 2
    assert Counter(get(second.rest_port)[2] for _ in range(100)) == {
        f"rank-v{i}": 20 for i in range(1, 6)
    }


# --- metrics, errors ---------------------------------------------------------------------


def test_metrics_and_stats_pages(router: Router, replica: ReplicaFactory) -> None:
    route = service(RevisionRoute("cost-v1", 100, (replica("v1-a").endpoint(),)))
    router.apply([route])
    bodies(route.rest_port, 3)
    base = f"http://{router.metrics_address}"
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as response:
        text = response.read().decode()
    assert 'haproxy_backend_http_requests_total{proxy="default.cost_rest_0"} 3' in text
    with urllib.request.urlopen(f"{base}/stats", timeout=5) as response:
        assert response.status == 200
    assert "running: master pid" in router.describe()


def test_a_taken_front_port_is_an_error_and_the_old_config_serves(
    router: Router, replica: ReplicaFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = service(RevisionRoute("cost-v1", 100, (replica("v1-a").endpoint(),)))
    router.apply([first])
    reloads = router.reloads
    config = router.config_path.read_text()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        second = service(
            RevisionRoute("rank-v1", 100, (replica("r1-a").endpoint(),)),
            name="rank",
            ports=(taken.getsockname()[1], free_port()),
        )
        with pytest.raises(RouteError, match=r"REST front port .* is taken by another process"):
            router.apply([first, second])
        assert router.reloads == reloads
        assert router.config_path.read_text() == config  # nothing written
        # Past the check (a race with the other process): HAProxy's reload fails, the old
        # worker keeps serving, and the error carries HAProxy's log.
        monkeypatch.setattr(router, "_check_ports_free", lambda *args: None)
        with pytest.raises(RouterError, match=r"refused the new config(.|\n)*cannot bind"):
            router.apply([first, second])
    assert bodies(first.rest_port, 5) == {"v1-a": 5}


def test_a_config_haproxy_refuses_is_reported_with_its_message(
    tmp_path: Path, haproxy_binary: str
) -> None:
    router = Router(
        tmp_path / "r",
        stats_port=free_port(),
        binary=haproxy_binary,
        timeouts=Timeouts(client_s=10**8),
    )
    with pytest.raises(RouterError, match=r"refuses the config for .*haproxy\.cfg") as error:
        router.start()
    assert "timeout client" in str(error.value)
    assert not router.running


def test_a_missing_binary_says_how_to_install_it(tmp_path: Path) -> None:
    router = Router(tmp_path / "r", stats_port=free_port(), binary="/nonexistent/haproxy")
    with pytest.raises(RouterNotFound, match="apt-get install haproxy"):
        router.start()
    assert "apt-get install haproxy" in router.describe()


def test_a_directory_haproxy_cannot_name_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(RouterError, match="spaces"):
        Router(tmp_path / "my router", stats_port=free_port())
    # Too long a path for the sockets even in the temporary directory's fallback.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / ("t" * 100)))
    with pytest.raises(RouterError, match=r"shorter state directory \(--state-dir\)"):
        Router(tmp_path / ("x" * 120), stats_port=free_port())


def test_a_directory_too_long_for_unix_sockets_gets_them_in_a_short_one(
    tmp_path: Path, haproxy_binary: str, replica: ReplicaFactory
) -> None:
    # pytest's tmp_path plus a state directory is easily past HAProxy's 97 bytes.
    deep = tmp_path / ("state-" + "x" * 60) / "haproxy"
    router = Router(deep, stats_port=free_port(), binary=haproxy_binary)
    sockets = router.settings.socket_dir
    assert sockets is not None and len(str(sockets / "master.sock")) <= 97
    assert router.settings.admin_socket.parent == sockets
    # Another controller on the same directory finds the same sockets (adoption).
    assert Router(deep, stats_port=free_port()).settings.socket_dir == sockets
    router.start()
    try:
        one = replica("one")
        route = service(RevisionRoute("cost-v1", 100, (one.endpoint(),)))
        router.apply([route])
        assert get(route.rest_port)[1] == "one"
        assert (sockets / "admin.sock").exists()
    finally:
        router.stop(timeout_s=1.0)
    assert not sockets.exists()
    assert Router(tmp_path / "r", stats_port=free_port()).settings.socket_dir is None
