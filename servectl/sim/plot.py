"""Timeline figures: offered load, replicas, and per-second p99 against the SLO.

matplotlib is an optional extra (``servectl[plot]``), imported only when plotting.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from servectl.sim import results as results_mod
from servectl.sim import world


def plot_timeline(
    result_by_policy: Mapping[str, results_mod.SimResult],
    path: str | Path,
    slo_ms: float,
    *,
    title: str | None = None,
) -> Path:
    """Write a PNG with three stacked panels sharing the time axis (minutes):
    offered load; desired (solid) and ready (dotted) replicas per policy; per-second p99
    latency per policy on a log axis, with the SLO as a dashed line."""
    if not result_by_policy:
        raise ValueError("plot_timeline needs at least one result")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    target = Path(path)
    fig, (load_ax, replica_ax, latency_ax) = plt.subplots(
        3, 1, figsize=(11, 8.5), sharex=True, gridspec_kw={"height_ratios": [1, 1.3, 1.3]}
    )
    first = next(iter(result_by_policy.values()))
    minutes = first.t / 60.0
    load_ax.plot(minutes, first.offered_rps, color="0.4", linewidth=1.0, label="offered (mean)")
    load_ax.plot(minutes, first.arrivals, color="0.7", linewidth=0.5, label="arrivals")
    load_ax.set_ylabel("requests/s")
    load_ax.set_title(title if title is not None else f"trace: {first.trace}")
    load_ax.legend(loc="upper left", fontsize=8)

    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, result) in enumerate(result_by_policy.items()):
        color = colors[i % len(colors)]
        t = result.t / 60.0
        replica_ax.step(t, result.desired, where="post", color=color, linewidth=1.2, label=name)
        replica_ax.step(t, result.ready, where="post", color=color, linewidth=0.8, linestyle=":")
        p99 = np.where(np.isfinite(result.p99_ms), result.p99_ms, np.nan)
        latency_ax.plot(t, np.clip(p99, 1.0, None), color=color, linewidth=0.7, label=name)
    replica_ax.set_ylabel("replicas (solid desired, dotted ready)")
    replica_ax.legend(loc="upper left", fontsize=8, ncol=2)
    latency_ax.axhline(
        slo_ms, color="red", linestyle="--", linewidth=1.0, label=f"SLO {slo_ms:g} ms"
    )
    latency_ax.set_yscale("log")
    latency_ax.set_ylabel("p99 per second (ms)")
    latency_ax.set_xlabel("minutes")
    latency_ax.legend(loc="upper left", fontsize=8, ncol=2)
    for ax in (load_ax, replica_ax, latency_ax):
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=110)
    plt.close(fig)
    return target


def plot_rollouts(
    results: Mapping[str, world.RolloutSimResult],
    path: str | Path,
    slo_ms: float,
    *,
    start_s: float | None = None,
) -> Path:
    """Write a PNG with four panels sharing the time axis (minutes): offered load; the
    new revision's weight per controller; total replicas (solid) and the new revision's
    replicas (dotted) per controller; per-second p99 against the SLO."""
    if not results:
        raise ValueError("plot_rollouts needs at least one result")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    target = Path(path)
    fig, axes = plt.subplots(
        4, 1, figsize=(11, 10), sharex=True, gridspec_kw={"height_ratios": [1, 1, 1.3, 1.3]}
    )
    load_ax, weight_ax, replica_ax, latency_ax = axes
    first = next(iter(results.values()))
    minutes = first.t / 60.0
    load_ax.plot(minutes, first.offered_rps, color="0.4", linewidth=1.0, label="offered (mean)")
    load_ax.set_ylabel("requests/s")
    load_ax.set_title(f"trace: {first.scenario}: a new version rolled out")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, result) in enumerate(results.items()):
        color = colors[i % len(colors)]
        t = result.t / 60.0
        stable = next(iter(result.revisions))
        others = [r for n, r in result.revisions.items() if n != stable]
        new_weight = sum((r.weight for r in others), np.zeros_like(result.t))
        new_replicas = sum((r.replicas for r in others), np.zeros_like(result.t))
        weight_ax.step(t, new_weight, where="post", color=color, linewidth=1.2, label=name)
        replica_ax.step(
            t, result.total_replicas, where="post", color=color, linewidth=1.2, label=name
        )
        replica_ax.step(t, new_replicas, where="post", color=color, linewidth=0.8, linestyle=":")
        p99 = np.where(np.isfinite(result.p99_ms), result.p99_ms, np.nan)
        latency_ax.plot(t, np.clip(p99, 1.0, None), color=color, linewidth=0.7, label=name)
    weight_ax.set_ylabel("new version's weight %")
    weight_ax.set_ylim(-5, 105)
    replica_ax.set_ylabel("replicas (solid all, dotted new)")
    latency_ax.axhline(
        slo_ms, color="red", linestyle="--", linewidth=1.0, label=f"SLO {slo_ms:g} ms"
    )
    latency_ax.set_yscale("log")
    latency_ax.set_ylabel("p99 per second (ms)")
    latency_ax.set_xlabel("minutes")
    for ax in axes:
        ax.grid(True, alpha=0.3)
        if start_s is not None:
            ax.axvline(start_s / 60.0, color="0.5", linestyle="-.", linewidth=0.8)
        ax.legend(loc="upper left", fontsize=8, ncol=3)
    fig.tight_layout()
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=110)
    plt.close(fig)
    return target
