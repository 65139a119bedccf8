"""The demo's report: ``report.md`` with every figure measured in the run, ``timeline.png``
(replicas per revision, weights, rps, p99 against the SLO, the phases) and ``samples.json``
(what the recorder saw, for other tools)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

from servectl.demo.story import DemoResult


def write_report(result: DemoResult) -> None:
    out = result.settings.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "samples.json").write_text(
        json.dumps(
            {"samples": [asdict(s) for s in result.samples], "events": result.events}, indent=1
        )
    )
    try:
        result.plot = plot_timeline(result, out / "timeline.png")
    except ImportError:
        result.plot = None
    result.report = out / "report.md"
    result.report.write_text(report_markdown(result))


def summary_rows(result: DemoResult) -> list[list[str]]:
    rows = []
    for p in result.phases:
        caused = p.failures - p.model_failures
        rows.append(
            [
                p.name,
                f"{p.start_t:.0f}-{p.end_t:.0f} s",
                p.outcome,
                str(p.requests) if p.requests else "",
                (f"{p.failures} ({p.model_failures} by the model, {caused} other)")
                if p.requests
                else "",
            ]
        )
    return rows


def report_markdown(result: DemoResult) -> str:
    s = result.settings
    lines = [
        "# servectl demo: what happened",
        "",
        f"Measured on {result.where}, on this machine ({os.cpu_count()} cores), in "
        f"{result.wall_s:.0f} s ({result.setup_s:.0f} s of set-up). "
        f"Load: {s.base_rps:g} req/s, stepping x{s.step:g}; SLO p99 {s.slo_ms:g} ms; "
        f"replicas of {s.cpu} CPU each, at most {s.max_replicas}"
        + (
            f", and {s.standby} warm standby replica{'s' if s.standby > 1 else ''} per "
            "serving revision (parked, taken first by a scale-up)."
            if s.standby
            else "."
        ),
        "",
        "| phase | time | outcome | requests | failed |",
        "|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in summary_rows(result)]
    lines += [
        "",
        "Requests and failures are Locust's: the first load run spans the scale-up and both "
        'rollouts, the second the scale-down. Failures "by the model" are v3\'s own injected '
        'errors (HTTP 400); "other" would be servectl\'s (routing to an unready replica, '
        "a request cut by a scale-down).",
        "",
        "- load step to the first scale-up decision: "
        + (f"{result.decision_s:.1f} s" if result.decision_s is not None else "none"),
        "- load step to the first replica it added serving: "
        + (f"{result.capacity_s:.0f} s" if result.capacity_s is not None else "none"),
        f"- load step to p99 back under {s.slo_ms:g} ms (and staying 5 s): "
        + (f"{result.recovered_s:.1f} s" if result.recovered_s is not None else "not seen"),
        "",
    ]
    lines += [f"- {note}" for note in result.notes]
    if result.notes:
        lines.append("")
    if result.plot is not None:
        lines += [f"![timeline]({result.plot.name})", ""]
    lines += ["## Decisions", "", "| t (s) | event | why |", "|---|---|---|"]
    lines += [f"| {e['t']:.0f} | {e['reason']} | {e['message']} |" for e in result.events]
    lines.append("")
    return "\n".join(lines)


def plot_timeline(result: DemoResult, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = result.samples
    t = [x.t for x in samples]
    names = sorted({name for x in samples for name in x.revisions})
    fig, axes = plt.subplots(4, 1, figsize=(11, 10), sharex=True)
    load_ax, rep_ax, weight_ax, lat_ax = axes
    load_ax.plot(t, [x.offered_rps for x in samples], color="0.5", label="offered")
    load_ax.plot(t, [x.rps if x.rps is not None else float("nan") for x in samples], label="served")
    load_ax.set_ylabel("req/s")
    load_ax.legend(loc="upper left", fontsize=8)
    for name in names:
        ready = [x.revisions.get(name, {}).get("ready", 0) for x in samples]
        desired = [x.revisions.get(name, {}).get("desired", 0) for x in samples]
        (line,) = rep_ax.step(t, ready, where="post", label=f"{name} ready")
        rep_ax.step(t, desired, where="post", linestyle="--", color=line.get_color(), alpha=0.6)
        weight_ax.step(
            t,
            [x.revisions.get(name, {}).get("weight", 0) for x in samples],
            where="post",
            label=name,
        )
    rep_ax.set_ylabel("replicas\n(dashed: desired)")
    rep_ax.legend(loc="upper left", fontsize=8)
    weight_ax.set_ylabel("weight %")
    weight_ax.legend(loc="upper left", fontsize=8)
    lat_ax.plot(
        t, [x.p99_ms if x.p99_ms is not None else float("nan") for x in samples], label="p99"
    )
    lat_ax.axhline(result.settings.slo_ms, color="red", linestyle="--", label="SLO")
    lat_ax.set_yscale("log")
    lat_ax.set_ylabel("p99 ms")
    lat_ax.set_xlabel("seconds since the load began")
    lat_ax.legend(loc="upper left", fontsize=8)
    for phase in result.phases:
        for ax in axes:
            ax.axvline(phase.start_t, color="0.7", linewidth=0.8)
        load_ax.text(
            phase.start_t + 1,
            0.97,
            phase.name,
            transform=load_ax.get_xaxis_transform(),
            fontsize=8,
            va="top",
        )
    fig.suptitle(f"servectl demo on {result.where} (measured)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
