"""``servectl demo``: the README's first command (servectl/backends/local/demo.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from servectl.cli.console import err, fail, out


def demo(
    out_dir: Annotated[
        Path, typer.Option("--out", help="Where the models, state, load reports and report go.")
    ] = Path("servectl-demo"),
    base_rps: Annotated[
        float, typer.Option("--base-rps", min=1, help="The load before and after the step.")
    ] = 8.0,
    step: Annotated[float, typer.Option("--step", min=1.5, help="The load step, x base.")] = 5.0,
    slo_ms: Annotated[float, typer.Option("--slo-ms", min=10, help="The p99 target.")] = 250.0,
    keep: Annotated[
        bool, typer.Option("--keep", help="Leave the runtime running (stop: servectl down).")
    ] = False,
) -> None:
    """Deploy a model, load it, autoscale, canary, promote, roll back, scale down: live.

    Starts the local runtime under --out/state (HAProxy, Prometheus, model servers as
    processes with CPU quotas), deploys the demo cost_model v1, applies a Locust load
    that steps up x5, rolls out a good v2 (promoted) and a failing v3 (rolled back
    automatically), lowers the load, and writes --out/report.md with a PNG timeline:
    replicas per revision, weights, rps, p99 against the SLO, each decision and why.
    About four minutes on 2 cores. Needs haproxy and prometheus (apt-get install
    haproxy prometheus) and TensorFlow (pip install 'servectl[serving]').
    """
    import shutil

    from servectl.backends.local.client import ClientError
    from servectl.backends.local.demo import Demo, DemoError, DemoSettings, summary_rows
    from servectl.cli.console import print_table

    missing = [b for b in ("haproxy", "prometheus") if shutil.which(b) is None]
    if missing:
        raise fail(f"{' and '.join(missing)} not found: apt-get install {' '.join(missing)}", 1)
    settings = DemoSettings(
        out=out_dir.resolve(), base_rps=base_rps, step=step, slo_ms=slo_ms, keep=keep
    )
    began = time.monotonic()

    def say(line: str) -> None:
        err.print(f"[{time.monotonic() - began:5.0f} s] {line}", highlight=False, markup=False)

    try:
        result = Demo(settings, say).run()
    except (DemoError, ClientError, OSError) as exc:
        raise fail(f"demo: {exc} (state and logs in {settings.state_dir})", 1) from None
    print_table(
        "servectl demo: what happened",
        ["PHASE", "TIME", "OUTCOME", "REQUESTS", "FAILED"],
        summary_rows(result),
    )
    if result.decision_s is not None:
        out.print(f"load step -> first scale-up decision: {result.decision_s:.1f} s")
    if result.recovered_s is not None:
        out.print(f"load step -> p99 back under {slo_ms:g} ms: {result.recovered_s:.1f} s")
    out.print(f"report: {result.report}  (took {result.wall_s:.0f} s)", highlight=False)
