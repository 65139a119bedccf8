"""The Kubernetes controller at scale: many ModelServices on kwok nodes, one controller.

    python tests/bench/k8s_scale.py [--services 200] [--nodes 10] [--period 5]
        [--steady-cycles 10] [-o json]

Starts the real control plane (servectl.testing.k8s: etcd, kube-apiserver, controller
manager, scheduler, kwok; binaries from ``bash scripts/k8s-testbin``), creates
``--services`` ModelServices (1 replica each, canary steps 33 % / 66 % / pause), runs one
controller in this process, and measures:

1. **create**: from the creates to every service's first revision with a Ready pod;
2. **steady**: cycles with nothing to do: wall time, controller CPU, API requests and
   writes per cycle (goal: zero of either);
3. **rollout**: every service's version bumped twice, so each runs three revisions (the
   old stable draining, stable, canary at 66 % then paused), then cycles in that state;
4. the controller's memory (RSS, this process: the caches of every object).

Metrics: the controller's Prometheus source is replaced by synthetic fresh signals for
every revision (:class:`FreshSource`), so the planner moves weights as with a healthy
Prometheus and the figures are the controller's own cost, not Prometheus'.
"""

from __future__ import annotations

import argparse
import json
import resource
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from servectl.autoscaling.snapshot import PodSample, Signals  # noqa: E402
from servectl.backends.kubernetes import objects as obj  # noqa: E402
from servectl.backends.kubernetes.controller import Controller, ControllerConfig  # noqa: E402
from servectl.backends.kubernetes.kube import (  # noqa: E402
    DEPLOYMENTS,
    MODELSERVICES,
    NAMESPACES,
    PODS,
    Kube,
    load_api_client,
)
from servectl.metrics.assemble import MetricsSnapshot, RevisionMetrics  # noqa: E402
from servectl.rollout.counters import Counters  # noqa: E402
from servectl.testing import k8s  # noqa: E402

NS = "bench"


class FreshSource:
    """Every expected revision has fresh, healthy signals (0.4 cores of 1, 20 req/s,
    p99 20 ms, no errors); counters grow with time so an analysis would see traffic."""

    def __init__(self) -> None:
        self.started = time.time()

    def snapshot(
        self, expected: Iterable[tuple[str, str, str]] = (), analysis_services: Sequence[str] = ()
    ) -> MetricsSnapshot:
        now = time.time()
        age = now - self.started
        revisions = {}
        for key in expected:
            revisions[key] = RevisionMetrics(
                key=key,
                time=now,
                signals=Signals(
                    cpu_utilization=0.4,
                    cpu_usage_cores=0.4,
                    rps=20.0,
                    latency_ms={"p99": 20.0, "p50": 10.0},
                    age_s=1.0,
                ),
                pods=(PodSample(f"{key[2]}-pod", cpu_usage_cores=0.4, cpu_request_cores=1.0),),
                counters=Counters(now, 20.0 * age, 0.0, 0.4 * age),
            )
        return MetricsSnapshot(time=now, revisions=revisions, latency_bounds_us=())

    def custom_checks(self, *args: Any, **kwargs: Any) -> tuple[dict[str, Any], list[Any]]:
        return {}, []


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cycles(controller: Controller, n: int) -> dict[str, Any]:
    """Run ``n`` cycles back to back (no sleeps), measuring each."""
    wall, cpu, requests, writes = [], [], [], []
    for _ in range(n):
        c0 = time.process_time()
        report = controller.cycle()
        cpu.append(time.process_time() - c0)
        wall.append(report.seconds)
        requests.append(report.requests)
        writes.append(report.writes)
    return {
        "cycles": n,
        "wall_ms_median": round(1000 * statistics.median(wall), 1),
        "wall_ms_p90": round(1000 * pct(wall, 0.9), 1),
        "cpu_ms_median": round(1000 * statistics.median(cpu), 1),
        "requests_per_cycle_median": statistics.median(requests),
        "requests_per_cycle_max": max(requests),
        "writes_per_cycle_max": max(writes),
    }


def wait(what: str, check: Any, timeout_s: float, controller: Controller, period: float) -> float:
    """Cycle the controller every ``period`` until ``check()``; returns the seconds taken."""
    start = time.monotonic()
    print(f"waiting: {what}", file=sys.stderr, flush=True)
    while not check():
        if time.monotonic() - start > timeout_s:
            raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")
        controller.cycle()
        time.sleep(period)
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--services", type=int, default=200)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--period", type=float, default=1.0, help="seconds between cycles")
    parser.add_argument("--steady-cycles", type=int, default=10)
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    args = parser.parse_args()
    bin_dir = k8s.find_binaries(build=True)
    if bin_dir is None:
        raise SystemExit("no Kubernetes binaries: bash scripts/k8s-testbin")
    results: dict[str, Any] = {"services": args.services, "nodes": args.nodes}
    with tempfile.TemporaryDirectory(prefix="servectl-k8s-bench-") as tmp:
        plane = k8s.ControlPlane.start(
            Path(tmp) / "plane",
            bin_dir=bin_dir,
            nodes=args.nodes,
            crds=[
                *sorted((REPO / "deploy" / "crds").glob("*.yaml")),
                *k8s.gateway_api_crds(bin_dir),
            ],
        )
        try:
            results["control_plane_start_s"] = round(plane.timings["total"], 1)
            admin = Kube(load_api_client(str(plane.kubeconfig)))
            admin.create(
                NAMESPACES,
                None,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
            )
            k8s.wait_for(lambda: admin.get(NAMESPACES, None, NS), timeout_s=10, what="ns")
            time.sleep(1.0)  # the namespace's default service account
            kube = Kube(load_api_client(str(plane.kubeconfig)))
            controller = Controller(
                kube,
                ControllerConfig(
                    namespaces=(NS,),
                    period_s=args.period,
                    leader_elect=False,
                    # gRPC on a listener of its own: every service has both routes.
                    options=obj.Options(gateway=("", "public"), grpc_listener="grpc"),
                    checkpoint_s=3600.0,
                ),
                source=FreshSource(),  # type: ignore[arg-type]
            )
            controller.start(sync_timeout_s=60)
            names = [f"m{i:03d}" for i in range(args.services)]
            rollout = {
                "strategy": "canary",
                "drainSeconds": 600,
                "surgeBudget": {"replicas": 3},
                "steps": [{"setWeight": 33}, {"setWeight": 66}, {"pause": {}}],
            }
            for name in names:
                admin.create(
                    MODELSERVICES,
                    NS,
                    {
                        "apiVersion": "servectl.io/v1alpha1",
                        "kind": "ModelService",
                        "metadata": {"name": name, "namespace": NS},
                        "spec": {
                            "model": {"name": name, "basePath": f"s3://m/{name}", "version": 1},
                            "autoscaling": {"minReplicas": 1, "maxReplicas": 3},
                            "runtime": {"resources": {"cpu": "250m", "memory": "512Mi"}},
                            "rollout": rollout,
                        },
                    },
                )

            def ready_pods() -> int:
                pods = admin.list(PODS, NS, label_selector=obj.LABEL_REVISION)["items"]
                return sum(1 for p in pods if obj.pod_ready(p))

            k8s.wait_for(
                lambda: len(controller.caches[NS].modelservices.items()) == args.services or None,
                timeout_s=60,
                what="cache",
            )
            results["create_to_ready_s"] = round(
                wait(
                    "every first revision ready",
                    lambda: ready_pods() >= args.services,
                    300,
                    controller,
                    args.period,
                ),
                1,
            )
            time.sleep(args.period)
            controller.cycle()  # settle the statuses
            results["steady"] = cycles(controller, args.steady_cycles)
            for version in (2, 3):
                t0 = time.monotonic()
                for name in names:
                    admin.merge_patch(
                        MODELSERVICES, NS, name, {"spec": {"model": {"version": version}}}
                    )

                def all_have(v: int = version) -> bool:
                    deps = admin.list(DEPLOYMENTS, NS)["items"]
                    return (
                        sum(1 for d in deps if d["metadata"]["name"].endswith(f"-v{v}"))
                        >= args.services
                    )

                took = wait(f"v{version} Deployments", all_have, 300, controller, args.period)
                results[f"bump_to_v{version}_deployments_s"] = round(took, 1)
                results[f"bump_to_v{version}_seconds_from_patches"] = round(
                    time.monotonic() - t0, 1
                )

                def paused() -> bool:
                    docs = admin.list(MODELSERVICES, NS)["items"]
                    phases: dict[str, int] = {}
                    stuck = []
                    for d in docs:
                        rollout = (d.get("status") or {}).get("rollout") or {}
                        key = f"{rollout.get('phase')} step {rollout.get('step')}"
                        phases[key] = phases.get(key, 0) + 1
                        if rollout.get("phase") != "Paused":
                            stuck.append(rollout.get("message"))
                    print(f"  {phases} e.g. {stuck[:1]}", file=sys.stderr, flush=True)
                    return not stuck

                results[f"v{version}_to_paused_s"] = round(
                    wait(f"v{version} canaries paused", paused, 600, controller, args.period), 1
                )
            deps = admin.list(DEPLOYMENTS, NS)["items"]
            results["deployments"] = len(deps)
            results["pods"] = len(admin.list(PODS, NS)["items"])
            time.sleep(args.period)
            controller.cycle()
            results["rollout_steady"] = cycles(controller, args.steady_cycles)
            results["controller_rss_mib"] = round(rss_mib(), 0)
            results["controller_max_rss_mib"] = round(
                resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 0
            )
            results["api_requests_total"] = kube.requests()
            controller.stop()
        except TimeoutError as exc:  # report what was measured, and what did not happen
            results["failed"] = str(exc)
        finally:
            plane.stop()
    if args.output == "json":
        print(json.dumps(results, indent=2))
    else:
        for key, value in results.items():
            print(f"{key:40} {value}")


if __name__ == "__main__":
    # A SIGTERM (timeout, Ctrl-C in another shell) still stops the control plane.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    threading.current_thread().name = "bench"
    main()
