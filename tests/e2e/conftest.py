"""End-to-end tests of the local runtime: a real controller process (``servectl
controller``), real model servers with real SavedModels, real HAProxy and Prometheus.

- ``demo_models`` (session): the demo SavedModels, exported once (~4 s).
- ``runtime``: a :class:`LocalRuntime` in tmp_path with its controller running; stopped
  (everything it started) at teardown.

Missing haproxy, prometheus or TensorFlow: skipped, or failed when
``SERVECTL_REQUIRE_E2E=1`` (CI), with the install hint.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from servectl.backends.local.client import LocalClient

REQUIRE_ENV = "SERVECTL_REQUIRE_E2E"
_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in item.path.parents:
            item.add_marker(pytest.mark.e2e)


def _require(ok: bool, message: str) -> None:
    if ok:
        return
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message} ({REQUIRE_ENV}=1)")
    pytest.skip(message)


@pytest.fixture(scope="session")
def demo_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import importlib.util

    _require(importlib.util.find_spec("tensorflow") is not None, "TensorFlow is not installed")
    from servectl.modelserver.demo import export_demo

    directory = tmp_path_factory.mktemp("models")
    export_demo(directory, cost=400)
    return directory


class LocalRuntime:
    """A controller process over one state directory, and helpers to wait on it."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.process: subprocess.Popen[bytes] | None = None
        self.client = LocalClient(state_dir)

    def start(self, timeout_s: float = 60.0) -> None:
        started = time.time()
        self._front_ports_of_this_worker()
        log = (self.state_dir / "controller.log").open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "servectl", "controller", "--state-dir", str(self.state_dir)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        pid = self.process.pid
        self.wait(
            lambda: (
                (self.client.store.get_setting("heartbeat") or {}).get("pid") == pid
                and float((self.client.store.get_setting("heartbeat") or {}).get("time", 0))
                >= started
            ),
            timeout_s,
            "the controller's first tick",
        )

    def _front_ports_of_this_worker(self) -> None:
        """Under pytest-xdist each worker's runtimes take their services' front ports from
        a range of their own (``servectl up --rest-port``'s setting): two runtimes started
        at once would otherwise both find 8501 free. ``servectl demo`` keeps 8501 up."""
        worker = os.environ.get("PYTEST_XDIST_WORKER", "")
        if worker.startswith("gw") and worker[2:].isdigit():
            from servectl.backends.local import front_ports

            first = 10501 + 2000 * int(worker[2:])
            front_ports.set_first_rest(self.client.store, first)

    def kill_controller(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        # Whatever a killed controller left behind.
        subprocess.run(
            [sys.executable, "-m", "servectl", "down", "--state-dir", str(self.state_dir)],
            capture_output=True,
            timeout=120,
            check=False,
        )
        self.client.close()

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = (self.state_dir / "controller.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def wait(self, check: Callable[[], Any], timeout_s: float, what: str) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            value = check()
            if value:
                return value
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(
                    f"the controller exited ({self.process.returncode}) waiting for {what}:\n"
                    + self.log_tail()
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after {timeout_s:g} s waiting for {what}\n" + self.log_tail()
                )
            time.sleep(0.25)

    def status(self, name: str, namespace: str = "default") -> dict[str, Any]:
        return self.client.status(namespace, name) or {}

    def ready(self, name: str, namespace: str = "default") -> dict[str, int]:
        """Ready replicas per revision."""
        return {
            r["name"]: r.get("readyReplicas", 0)
            for r in self.status(name, namespace).get("revisions", [])
        }

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "servectl", *args, "--state-dir", str(self.state_dir)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"servectl {' '.join(args)}: {done.returncode}\n{done.stderr}")
        return done


def predict(port: int, model: str = "cost_model", headers: dict[str, str] | None = None) -> Any:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/models/{model}:predict",
        data=json.dumps({"instances": [[1, 2, 3, 4, 5, 6, 7, 8]]}).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def try_predict(port: int, model: str = "cost_model") -> bool:
    with contextlib.suppress(OSError, urllib.error.URLError, ValueError):
        predict(port, model)
        return True
    return False


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[LocalRuntime]:
    _require(shutil.which("haproxy") is not None, "haproxy not found: apt-get install haproxy")
    _require(
        shutil.which("prometheus") is not None, "prometheus not found: apt-get install prometheus"
    )
    rt = LocalRuntime(tmp_path / "state")
    rt.start()
    try:
        yield rt
    finally:
        rt.stop()


def service_doc(models: Path, **spec: Any) -> dict[str, Any]:
    """A cost_model ModelService: 0.5 core replicas, a 6 s cold start, ``spec`` merged."""
    doc: dict[str, Any] = {
        "apiVersion": "servectl.io/v1alpha1",
        "kind": "ModelService",
        "metadata": {"name": "cost"},
        "spec": {
            "model": {"name": "cost_model", "basePath": str(models / "cost_model"), "version": 1},
            "runtime": {"resources": {"cpu": "500m", "memory": "1Gi"}},
            "autoscaling": {
                "minReplicas": 1,
                "maxReplicas": 3,
                "coldStartSeconds": 6,
                "signals": [{"type": "cpu", "targetUtilization": 70}],
                # Tests wait for scale-downs: a short window keeps them minutes shorter.
                "behavior": {"scaleDown": {"stabilizationSeconds": 15}},
            },
        },
    }
    for key, value in spec.items():
        doc["spec"][key] = value
    return doc


def deploy(rt: LocalRuntime, doc: dict[str, Any]) -> int:
    """Deploy ``doc``; wait for its first revision to serve; its REST front port."""
    from servectl.api import validation

    service = validation.load_model_service(doc)
    rt.client.deploy(service)
    name = doc["metadata"]["name"]
    version = doc["spec"]["model"]["version"]
    rt.wait(lambda: rt.ready(name).get(f"{name}-v{version}", 0) >= 1, 90, f"{name} to serve")
    record = rt.client.record("default", name)
    assert record is not None
    rt.wait(lambda: try_predict(record.rest_port), 30, "a prediction through HAProxy")
    return record.rest_port


def revision_of(port: int, headers: dict[str, str] | None = None) -> str:
    """The revision that answered (HAProxy's x-servectl-revision response header)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/models/cost_model:predict",
        data=json.dumps({"instances": [[1, 2, 3, 4, 5, 6, 7, 8]]}).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return str(response.headers.get("x-servectl-revision"))
