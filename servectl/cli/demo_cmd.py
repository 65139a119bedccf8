"""``servectl demo``: the README's first command (servectl/demo), on the local runtime or,
with ``--kubernetes``, on a real one-node cluster on this machine."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Annotated

import typer

from servectl.cli.console import err, fail, out

KUBE_PANEL = "Kubernetes"


def demo(
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Where the models, state, load reports and report go "
            "[default: servectl-demo, or servectl-demo-k8s with --kubernetes].",
            show_default=False,
        ),
    ] = None,
    base_rps: Annotated[
        float | None,
        typer.Option(
            "--base-rps",
            min=1,
            help="The load before and after the step [default: 8, or 5 with --kubernetes; "
            "less where one replica would be too busy on it: the demo times a "
            "request first and says what it chose].",
            show_default=False,
        ),
    ] = None,
    step: Annotated[float, typer.Option("--step", min=1.5, help="The load step, x base.")] = 5.0,
    slo_ms: Annotated[
        float | None,
        typer.Option(
            "--slo-ms",
            min=10,
            help="The p99 target [default: 250, or 5 times a request's time alone where "
            "that is more].",
            show_default=False,
        ),
    ] = None,
    standby: Annotated[
        int,
        typer.Option(
            "--standby",
            min=0,
            max=8,
            help="Keep N warm standby replicas beside the serving ones (loaded, parked at "
            "20m CPU, taken first by the step: no cold start; docs/standby.md). Local "
            "runtime only.",
        ),
    ] = 0,
    keep: Annotated[
        bool,
        typer.Option(
            "--keep",
            help="Leave the runtime running (stop: servectl down; with --kubernetes: "
            "servectl demo --kubernetes --stop).",
        ),
    ] = False,
    kubernetes: Annotated[
        bool,
        typer.Option(
            "--kubernetes",
            help="Tell the story on a real one-node Kubernetes cluster started on this "
            "machine (needs root and a checkout of the repository; see below).",
            rich_help_panel=KUBE_PANEL,
        ),
    ] = False,
    stop: Annotated[
        bool,
        typer.Option(
            "--stop",
            help="With --kubernetes: stop the cluster a --keep run left up, and put the host "
            "back (bridge, iptables, mounts, cgroups). Nothing else runs.",
            rich_help_panel=KUBE_PANEL,
        ),
    ] = False,
) -> None:
    """Deploy a model, load it, autoscale, canary, promote, roll back, scale down: live.

    Deploys the demo cost_model v1, applies a Locust load that steps up x5, rolls out a
    good v2 (promoted) and a failing v3 (rolled back automatically), lowers the load, and
    writes --out/report.md with a PNG timeline: replicas per revision, weights, rps, p99
    against the SLO, each decision and why. Needs TensorFlow (pip install
    'servectl[serving]').

    On the local runtime (the default): HAProxy, Prometheus and model servers as
    processes with CPU quotas under --out/state. About four minutes on 2 cores. Needs
    haproxy and prometheus (apt-get install haproxy prometheus).

    With --kubernetes: a real node on this machine (etcd, kube-apiserver, scheduler,
    containerd, a kubelet; pods on the bridge servectl0), Traefik as the Gateway on
    127.0.0.1, Prometheus and kube-state-metrics, servectl installed by its Helm chart
    from images built here; Locust goes through the Gateway. Needs root, Go, etcd-server,
    containerd, runc, containernetworking-plugins, catatonit and mmdebstrap (Debian
    packages). A first run builds Kubernetes, Traefik, Prometheus and the images (about
    30 minutes on 2 cores, said up front, with progress); later runs take about seven.
    """
    from servectl.demo.story import DemoError, DemoSettings

    if stop:
        if not kubernetes:
            raise fail("--stop is for --kubernetes (the local runtime stops with servectl down)")
        from servectl.demo import kubernetes as kube_demo

        left = kube_demo.stop()
        if left is None:
            out.print("no demo cluster is running")
        elif left:
            raise fail(f"stopped, but could not put back: {'; '.join(left)}", 1)
        else:
            out.print("demo cluster stopped; the host is as it was")
        return
    if kubernetes:
        from servectl.demo import kubernetes as kube_demo

        if standby:
            raise fail(
                "--standby is for the local runtime: the Kubernetes backend does not park "
                "standby replicas yet (docs/standby.md); drop --standby or --kubernetes"
            )
        out_dir = out_dir or Path("servectl-demo-k8s")
        logs = "logs in --out (node/, monitoring/, logs/)"
    else:
        import shutil

        missing = [b for b in ("haproxy", "prometheus") if shutil.which(b) is None]
        if missing:
            raise fail(f"{' and '.join(missing)} not found: apt-get install {' '.join(missing)}", 1)
        out_dir = out_dir or Path("servectl-demo")
        logs = f"state and logs in {out_dir.resolve() / 'state'}"
    settings = DemoSettings(out=out_dir.resolve(), step=step, keep=keep, standby=standby)
    if kubernetes:
        settings = kube_demo.defaults(settings)
    if base_rps is not None:
        settings = dataclasses.replace(settings, base_rps=base_rps, pace_rate=False)
    if slo_ms is not None:
        settings = dataclasses.replace(settings, slo_ms=slo_ms, pace_slo=False)
    began = time.monotonic()

    def say(line: str) -> None:
        err.print(f"[{time.monotonic() - began:5.0f} s] {line}", highlight=False, markup=False)

    from servectl.backends.local.client import ClientError

    try:
        if kubernetes:
            result = kube_demo.run(settings, say)
        else:
            from servectl.demo import local

            result = local.run(settings, say)
    except (DemoError, ClientError, OSError) as exc:
        raise fail(f"demo: {exc} ({logs})", 1) from None
    _summary(result)


def _summary(result: object) -> None:
    from servectl.cli.console import print_table
    from servectl.demo.report import summary_rows
    from servectl.demo.story import DemoResult

    assert isinstance(result, DemoResult)
    print_table(
        f"servectl demo on {result.where}: what happened",
        ["PHASE", "TIME", "OUTCOME", "REQUESTS", "FAILED"],
        summary_rows(result),
    )
    if result.decision_s is not None:
        out.print(f"load step -> first scale-up decision: {result.decision_s:.1f} s")
    if result.recovered_s is not None:
        out.print(
            f"load step -> p99 back under {result.settings.slo_ms:g} ms: {result.recovered_s:.1f} s"
        )
    out.print(
        f"report: {result.report}  (took {result.wall_s:.0f} s, {result.setup_s:.0f} s of it "
        "set-up)",
        highlight=False,
    )
