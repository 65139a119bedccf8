"""A controller killed at a canary's 80/20 step under load, started again: what churns.

    PYTHONPATH=. python tests/bench/restart_canary.py [--out DIR] [--rps 32] [--down 14]

The scenario of issue 25, item 5, on the real local runtime (a controller process, model
servers on the demo's ``cost_model``, HAProxy, Prometheus, Locust): v1 at 2 replicas under
``--rps``, a canary of v2 (20 %, analysis, 50 %, analysis, 100 %, as the README's
``examples/local/cost-canary.yaml``), ``kill -9`` of the controller once the weights are
80/20, ``servectl controller`` again ``--down`` seconds later. It records every tick's cycle
and the replicas running, and prints: replicas started and stopped during the rollout,
each revision's planned replicas as they changed, the canary's weight moving back, the
``WeightsChanged`` events and p99. The controller runs the ``servectl`` on PYTHONPATH, so
a checkout of another commit (``git worktree add``) gives its figures on the same machine.
About 4 minutes; needs haproxy, prometheus and TensorFlow.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from servectl.api import validation
from servectl.backends.local.client import LocalClient
from servectl.demo.story import ROLLOUT
from servectl.loadtest import runner
from servectl.modelserver.demo import export_demo
from servectl.rollout.machine import Op

ANALYSIS = ROLLOUT["analysis"]  # the demo's: errors and p99 against stable


def service(models: Path) -> dict[str, Any]:
    steps = [{"setWeight": 20}, {"analysis": {}}, {"setWeight": 50}, {"analysis": {}}]
    return {
        "apiVersion": "servectl.io/v1alpha1",
        "kind": "ModelService",
        "metadata": {"name": "cost"},
        "spec": {
            "model": {"name": "cost_model", "basePath": str(models / "cost_model"), "version": 1},
            "runtime": {"resources": {"cpu": "500m", "memory": "1Gi"}},
            "autoscaling": {
                "minReplicas": 1,
                "maxReplicas": 4,
                "signals": [
                    {"type": "cpu", "targetUtilization": 70},
                    {"type": "latency", "percentile": 99, "targetMs": 250},
                ],
                "behavior": {"scaleDown": {"stabilizationSeconds": 20}},
                "coldStartSeconds": 6,
            },
            "rollout": {
                "strategy": "canary",
                "steps": [*steps, {"setWeight": 100}],
                "analysis": ANALYSIS,
                "drainSeconds": 5,
            },
        },
    }


class Controller:
    def __init__(self, state: Path) -> None:
        self.state = state
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, client: LocalClient) -> None:
        log = (self.state / "controller.log").open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "servectl", "controller", "--state-dir", str(self.state)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        pid = self.process.pid
        wait(lambda: (client.store.get_setting("heartbeat") or {}).get("pid") == pid, 60)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=90)
        subprocess.run(
            [sys.executable, "-m", "servectl", "down", "--state-dir", str(self.state)],
            capture_output=True,
            timeout=120,
            check=False,
        )


def wait(check: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.25)
    raise SystemExit(f"timed out after {timeout_s:g} s")


def record(state: Path, samples: list[dict[str, Any]], stop: threading.Event) -> None:
    """Every new cycle the store holds, with the replicas running then."""
    client = LocalClient(state)  # its own connection, in this thread
    last = None
    while not stop.is_set():
        cycle = client.store.get_cycle("default", "cost")
        if cycle and cycle.get("time") != last:
            last = cycle["time"]
            pods = sorted(r["spec"]["pod"] for r in client.replicas())
            samples.append({"wall": time.time(), "cycle": cycle, "pods": pods})
        stop.wait(0.2)
    client.close()


def report(data: dict[str, Any]) -> None:
    start, up, samples = data["rollout"], data["up"], data["samples"]
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for sample in samples:
        for pod in sample["pods"]:
            first.setdefault(pod, sample["wall"])
            last[pod] = sample["wall"]
    end = samples[-1]["wall"]
    started = sorted(p for p, t in first.items() if t >= start)
    stopped = {p: round(last[p] - first[p]) for p in started if last[p] < end - 1.5}
    planned: dict[str, list[int]] = {}
    back, p99_before, p99_after, previous = [], [], [], None
    for sample in samples:
        cycle = sample["cycle"]
        if cycle["time"] < start:
            continue
        weights = {r["name"]: r["weight"] for r in cycle["plan"]["revisions"]}
        if previous and weights.get("cost-v2", 0) < previous.get("cost-v2", 0):
            back.append(f"{previous.get('cost-v2', 0)} -> {weights.get('cost-v2', 0)} %")
        previous = weights
        for r in cycle["plan"]["revisions"]:
            counts = planned.setdefault(r["name"], [])
            if not counts or counts[-1] != r["replicas"]:
                counts.append(r["replicas"])
        p99 = (cycle["service"].get("latencyMs") or {}).get("p99")
        if p99 is not None:
            (p99_before if cycle["time"] < data["kill"] else p99_after).append(p99)
    events = [e for e in data["events"] if e["time"] >= start and e["reason"] == "WeightsChanged"]
    print(f"rollout: {samples[-1]['cycle']['plan']['phase']}")
    print(f"replicas started during the rollout: {len(started)} {started}")
    print(f"  of them after the restart: {sum(1 for p in started if first[p] >= up)}")
    print(f"  stopped again (seconds they ran): {stopped}")
    print(f"planned replicas as they changed: {planned}")
    print(f"canary weight moving back: {back or 'never'}")
    print(f"WeightsChanged events: {len(events)}")
    for event in events:
        print(f"  t={event['time'] - up:+.0f} s  {event['message']}")
    for name, values in (("before the kill", p99_before), ("after up", p99_after)):
        if values:
            print(f"p99 {name}: median {sorted(values)[len(values) // 2]:.0f} ms, "
                  f"max {max(values):.0f} ms")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--rps", type=float, default=32.0)
    parser.add_argument("--down", type=float, default=14.0)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="restart-canary-"))
    shutil.rmtree(out / "state", ignore_errors=True)
    state = out / "state"
    state.mkdir(parents=True)
    export_demo(out / "models", cost=400)
    client = LocalClient(state)
    controller = Controller(state)
    samples: list[dict[str, Any]] = []
    stop, load_stop = threading.Event(), threading.Event()
    try:
        controller.start(client)
        client.deploy(validation.load_model_service(service(out / "models")))
        wait(lambda: (client.status("default", "cost") or {}).get("revisions"), 120)
        record_ = client.record("default", "cost")
        assert record_ is not None
        trace = out / "trace.csv"
        trace.write_text(f"t,rps\n0,2\n20,{args.rps:g}\n3600,{args.rps:g}\n")
        config = runner.LoadTestConfig(
            target=f"http://127.0.0.1:{record_.rest_port}",
            shape="trace",
            trace=trace,
            duration_s=None,
            out_dir=out / "load",
            name="load",
        )
        threading.Thread(target=runner.run, args=(config,), kwargs={"stop": load_stop}).start()
        threading.Thread(target=record, args=(state, samples, stop), daemon=True).start()
        time.sleep(75)  # the ramp, and the service sized for the load
        data: dict[str, Any] = {"rollout": time.time()}
        client.rollout("default", "cost", Op.START, 2)

        def weights() -> dict[str, int]:
            status = client.status("default", "cost") or {}
            return {r["name"]: r.get("weight", 0) for r in status.get("revisions", [])}

        wait(lambda: weights().get("cost-v2") == 20, 120)
        time.sleep(3)
        data["kill"] = time.time()
        controller.kill()
        time.sleep(args.down)
        data["up"] = time.time()
        controller.start(client)
        time.sleep(70)
    finally:
        load_stop.set()
        stop.set()
        controller.stop()
    data["samples"] = samples
    data["events"] = [
        dataclasses.asdict(e) for e in client.store.events("default", "cost", limit=1000)
    ]
    (out / "record.json").write_text(json.dumps(data))
    client.close()
    report(data)
    print(f"(the record: {out / 'record.json'})")


if __name__ == "__main__":
    main()
