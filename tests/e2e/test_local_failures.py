"""The local runtime when things break: a replica killed, Prometheus hung or killed,
HAProxy killed. Nothing servectl runs may turn one failure into lost requests elsewhere,
a wrong scale-down, or lost routes."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.error
from pathlib import Path

from tests.e2e.conftest import LocalRuntime, deploy, predict, service_doc


class Client:
    """Requests back to back from a thread; failures with their time."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.ok = 0
        self.failures: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                predict(self.port)
                self.ok += 1
            except (OSError, urllib.error.URLError, ValueError) as exc:
                self.failures.append((time.time(), str(exc)))
            time.sleep(0.02)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)


def _replicas(rt: LocalRuntime) -> list[dict[str, object]]:
    return [r for r in rt.client.replicas() if r["spec"]["service"] == "cost"]  # type: ignore[index]


def _condition(rt: LocalRuntime, kind: str) -> dict[str, str]:
    return next((c for c in rt.status("cost").get("conditions", []) if c["type"] == kind), {})


def _deploy_two_replicas(runtime: LocalRuntime, demo_models: Path) -> int:
    """cost v1 with two ready replicas; its REST front port."""
    doc = service_doc(demo_models)
    doc["spec"]["autoscaling"]["minReplicas"] = 2
    port = deploy(runtime, doc)
    runtime.wait(lambda: runtime.ready("cost").get("cost-v1") == 2, 90, "two ready replicas")
    return port


def test_a_killed_replica_is_restarted_and_no_request_fails(
    runtime: LocalRuntime, demo_models: Path
) -> None:
    port = _deploy_two_replicas(runtime, demo_models)
    client = Client(port)
    try:
        time.sleep(2)
        victim = _replicas(runtime)[0]
        killed_at = time.time()
        os.kill(int(victim["pid"]), signal.SIGKILL)  # type: ignore[call-overload]
        pod = victim["spec"]["pod"]  # type: ignore[index]

        def restarted() -> bool:
            again = [r for r in _replicas(runtime) if r["spec"]["pod"] == pod]  # type: ignore[index]
            return bool(again) and again[0]["restarts"] == 1 and again[0]["pid"] != victim["pid"]

        runtime.wait(restarted, 60, "the killed replica to be restarted")
        runtime.wait(lambda: runtime.ready("cost").get("cost-v1") == 2, 60, "both ready again")
        time.sleep(2)
    finally:
        client.stop()
    assert client.ok > 100
    # The one request in flight on the killed replica may fail (the client sends one at a
    # time); every other request goes to the other replica: HAProxy retries a connection
    # that is refused on another server, and its health check takes the dead one out.
    assert len(client.failures) <= 1, client.failures
    assert all(abs(t - killed_at) < 2.0 for t, _ in client.failures), client.failures


def test_prometheus_hung_holds_the_scale_and_killed_is_restarted(
    runtime: LocalRuntime, demo_models: Path
) -> None:
    doc = service_doc(demo_models)
    port = deploy(runtime, doc)
    runtime.cli("scale", "cost", "--min", "2")
    runtime.wait(lambda: runtime.ready("cost").get("cost-v1") == 2, 90, "two ready replicas")
    runtime.wait(
        lambda: _condition(runtime, "MetricsAvailable").get("status") == "True", 60, "metrics"
    )
    pid = int((runtime.state_dir / "prometheus" / "prometheus.pid").read_text().split()[0])
    # Let the autoscaler go down to 1 the moment it may; Prometheus stops answering first.
    os.kill(pid, signal.SIGSTOP)
    try:
        runtime.cli("scale", "cost", "--min", "1")
        runtime.wait(
            lambda: _condition(runtime, "MetricsAvailable").get("status") == "False",
            30,
            "MetricsAvailable=False",
        )
        described = runtime.cli("describe", "cost", "-o", "json").stdout
        conditions = {c["type"]: c for c in json.loads(described)["status"]["conditions"]}
        assert conditions["MetricsAvailable"]["status"] == "False", conditions
        assert "did not answer" in conditions["MetricsAvailable"]["message"]
        held = sum(r["desiredReplicas"] for r in runtime.status("cost")["revisions"])
        assert held >= 2
        held_since = time.monotonic()
        while time.monotonic() - held_since < 10:
            status = runtime.status("cost")
            assert sum(r["desiredReplicas"] for r in status["revisions"]) >= held, status
            time.sleep(1)
        assert predict(port)["predictions"]  # serving goes on without metrics
    finally:
        os.kill(pid, signal.SIGCONT)
    runtime.wait(
        lambda: _condition(runtime, "MetricsAvailable").get("status") == "True",
        60,
        "metrics to come back",
    )
    # Idle, with metrics back: scaling resumes, down to the new minimum.
    runtime.wait(
        lambda: sum(r["desiredReplicas"] for r in runtime.status("cost")["revisions"]) == 1,
        180,
        "the scale-down once metrics are back",
    )
    # Killed outright, the controller starts it again.
    os.kill(pid, signal.SIGKILL)
    runtime.wait(
        lambda: (
            int((runtime.state_dir / "prometheus" / "prometheus.pid").read_text().split()[0]) != pid
        ),
        30,
        "Prometheus to be restarted",
    )
    runtime.wait(
        lambda: _condition(runtime, "MetricsAvailable").get("status") == "True",
        60,
        "metrics from the new Prometheus",
    )


def test_a_killed_haproxy_comes_back_with_its_routes(
    runtime: LocalRuntime, demo_models: Path
) -> None:
    port = _deploy_two_replicas(runtime, demo_models)
    pid_file = runtime.state_dir / "haproxy" / "haproxy.pid"
    old = int(pid_file.read_text().split()[0])
    os.kill(old, signal.SIGKILL)

    def serving_again() -> bool:
        try:
            return bool(predict(port)["predictions"])
        except (OSError, urllib.error.URLError, ValueError):
            return False

    runtime.wait(serving_again, 30, "HAProxy to serve again")
    assert int(pid_file.read_text().split()[0]) != old
    from servectl.backends.local.router import Router

    ports = runtime.client.store.get_setting("ports")
    route = Router(runtime.state_dir / "haproxy", stats_port=ports["haproxy_stats"]).actual()[
        ("default", "cost")
    ]
    revision = route.revisions[0]
    assert (revision.name, revision.weight) == ("cost-v1", 100)
    assert len(revision.endpoints) == 2
