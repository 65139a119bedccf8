"""The frontier bench: each baseline swept over the knobs a user would tune, per trace.

A comparison against a peer's default configuration flatters nobody: a user would tune the
peer. So every baseline runs at every point of a grid (HPA: the CPU target; KPA: the
target utilization and the panic threshold), servectl too (its CPU target, the latency
signal kept), and each run is one point (replica-seconds, SLO attainment). Per trace:

- a policy's **frontier** is the best SLO attainment any of its configurations reaches at a
  given cost or less: a step function through its Pareto-optimal points, no interpolation
  (a point between two configurations is a configuration nobody ran);
- servectl's default is **on or above** a frontier when no configuration of that policy
  costs at most what servectl's default costs and reaches at least its SLO attainment;
- the **SLO gap** at servectl's cost is servectl's attainment minus the frontier's there
  (positive: servectl is ahead); the **cost to match** is the cheapest configuration of
  the policy reaching servectl's attainment (none: no configuration does).

Every run uses the same arrivals (same seed) as ``servectl bench``; the default points are
exactly that bench's rows. This is the one module besides ``bench`` here that reads a
clock (``wall_s``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from servectl.autoscaling import config, hpa, kpa, registry
from servectl.autoscaling.policy import Policy
from servectl.backends.sim.run import simulate
from servectl.sim import model, oracle, suite
from servectl.sim import traces as trace_mod

SERVECTL = "servectl"
HPA = "hpa"
KPA = "kpa"
ORACLE = "oracle"
POLICIES = (SERVECTL, HPA, KPA)

#: The grids: what a user would tune, over the range the issue names.
HPA_CPU_TARGETS = (40.0, 50.0, 60.0, 70.0, 80.0, 90.0)
KPA_TARGET_UTILIZATIONS = (0.5, 0.6, 0.7, 0.8, 0.9)
KPA_PANIC_THRESHOLDS = (150.0, 200.0, 400.0)  # percent; Knative's default is 200
#: servectl's default is the SLO alone; its sweep adds a CPU target (a user who wants
#: headroom beyond the SLO would add one).
SERVECTL_CPU_TARGETS = (50.0, 60.0, 70.0, 80.0, 90.0)
#: Each policy's documented default point on its grid.
DEFAULTS: Mapping[str, Mapping[str, float]] = {
    SERVECTL: {},
    HPA: {"cpu_target": suite.CPU_TARGET},
    KPA: {"target_utilization": 0.7, "panic_threshold": 200.0},
}


@dataclass(frozen=True)
class PointSpec:
    """One configuration of one policy (picklable: built again in a worker process)."""

    policy: str
    params: tuple[tuple[str, float], ...] = ()

    @property
    def label(self) -> str:
        """Short: ``hpa cpu 60%``, ``kpa util 0.9 panic 400%``, ``oracle``."""
        words = {
            "cpu_target": "cpu {:g}%",
            "target_utilization": "util {:g}",
            "panic_threshold": "panic {:g}%",
        }
        parts = [words.get(k, k + " {:g}").format(v) for k, v in self.params]
        return " ".join([self.policy, *parts])

    @property
    def is_default(self) -> bool:
        wanted = DEFAULTS.get(self.policy)
        return wanted is not None and dict(self.params) == dict(wanted)

    def build(
        self,
        trace: trace_mod.Trace,
        svc: model.ServiceModel,
        routing: model.Routing = model.Routing.ROUND_ROBIN,
    ) -> Policy:
        """The policy; servectl is told ``routing`` as its backend would tell it."""
        p = dict(self.params)
        if self.policy == SERVECTL:
            cfg = suite.autoscaling_config(svc, cpu_target=p.get("cpu_target"), routing=routing)
            return registry.build(SERVECTL, cfg)
        if self.policy == HPA:
            cfg = dataclasses.replace(
                suite.autoscaling_config(svc, latency=False),
                signals=(config.SignalTarget(config.SignalType.CPU, p["cpu_target"]),),
            )
            return hpa.from_config(cfg)
        if self.policy == KPA:
            base = kpa.from_config(suite.kpa_config(svc)).config
            return kpa.KPAPolicy(
                dataclasses.replace(
                    base,
                    target_utilization=p["target_utilization"],
                    panic_threshold_percentage=p["panic_threshold"],
                )
            )
        if self.policy == ORACLE:
            return oracle.OraclePolicy(trace, svc)
        raise ValueError(f"unknown policy {self.policy!r}")


def grid(policies: Iterable[str] = POLICIES) -> list[PointSpec]:
    """Every configuration of the named policies, then the oracle (the corner)."""
    specs: list[PointSpec] = []
    for name in policies:
        if name == SERVECTL:
            specs += [PointSpec(SERVECTL)]
            specs += [PointSpec(SERVECTL, (("cpu_target", t),)) for t in SERVECTL_CPU_TARGETS]
        elif name == HPA:
            specs += [PointSpec(HPA, (("cpu_target", t),)) for t in HPA_CPU_TARGETS]
        elif name == KPA:
            specs += [
                PointSpec(KPA, (("target_utilization", u), ("panic_threshold", th)))
                for u in KPA_TARGET_UTILIZATIONS
                for th in KPA_PANIC_THRESHOLDS
            ]
        else:
            raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")
    return [*specs, PointSpec(ORACLE)]


@dataclass(frozen=True)
class Point:
    trace: str
    routing: str
    policy: str
    label: str
    params: dict[str, float]
    default: bool
    slo_attainment: float
    replica_seconds: float
    requests: int
    wall_s: float

    def to_record(self) -> dict[str, Any]:
        return {"kind": "point", **dataclasses.asdict(self)}


def _run_one(
    args: tuple[trace_mod.Trace, PointSpec, model.Routing, int],
) -> Point:
    trace, spec, routing, seed = args
    svc = suite.service()
    started = time.perf_counter()
    result = simulate(
        trace,
        spec.build(trace, svc, routing),
        svc,
        seed=seed,
        min_replicas=1,
        max_replicas=100,  # as `servectl bench`; each policy's own max is the suite's 60
        record_decisions=False,
        routing=routing,
    )
    return Point(
        trace=trace.name,
        routing=routing.value,
        policy=spec.policy,
        label=spec.label,
        params=dict(spec.params),
        default=spec.is_default,
        slo_attainment=result.slo_attainment,
        replica_seconds=result.replica_seconds,
        requests=result.requests,
        wall_s=time.perf_counter() - started,
    )


Progress = Callable[[Point, int, int], None]


def run_frontier(
    traces: Sequence[trace_mod.Trace],
    specs: Sequence[PointSpec],
    routings: Sequence[model.Routing],
    *,
    seed: int = 0,
    jobs: int | None = None,
    progress: Progress | None = None,
) -> list[Point]:
    """Every (routing, trace, configuration) run, in that order; ``jobs`` processes
    (default: the CPU count; 1 runs in this process)."""
    work = [(t, s, r, seed) for r in routings for t in traces for s in specs]
    jobs = max(1, jobs or os.cpu_count() or 1)
    points: list[Point] = []
    if jobs == 1:
        for item in work:
            points.append(_run_one(item))
            if progress is not None:
                progress(points[-1], len(points), len(work))
        return points
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for point in pool.map(_run_one, work):
            points.append(point)
            if progress is not None:
                progress(point, len(points), len(work))
    return points


# ------------------------------------------------------------------------- analysis


def pareto(points: Iterable[Point]) -> list[Point]:
    """The Pareto-optimal points (no other costs no more and attains more), by cost."""
    ordered = sorted(points, key=lambda p: (p.replica_seconds, -p.slo_attainment))
    front: list[Point] = []
    best = -math.inf
    for point in ordered:
        if point.slo_attainment > best:
            front.append(point)
            best = point.slo_attainment
    return front


def best_within(points: Iterable[Point], cost: float) -> Point | None:
    """The configuration with the highest attainment costing at most ``cost``."""
    within = [p for p in points if p.replica_seconds <= cost]
    return max(within, key=lambda p: (p.slo_attainment, -p.replica_seconds), default=None)


def cheapest_reaching(points: Iterable[Point], attainment: float) -> Point | None:
    """The cheapest configuration attaining at least ``attainment``."""
    reaching = [p for p in points if p.slo_attainment >= attainment]
    return min(reaching, key=lambda p: p.replica_seconds, default=None)


@dataclass(frozen=True)
class Verdict:
    """servectl's default point against one baseline's frontier on one trace."""

    trace: str
    routing: str
    baseline: str
    servectl_slo: float
    servectl_replica_seconds: float
    best_at_cost: Point | None  # the baseline's best configuration at servectl's cost
    cheapest_match: Point | None  # its cheapest configuration reaching servectl's SLO
    dominated_by: Point | None  # one configuration at most as dear and at least as good

    @property
    def on_or_above(self) -> bool:
        return self.dominated_by is None

    @property
    def slo_gap(self) -> float | None:
        """servectl minus the frontier at servectl's cost (fraction; None: the baseline
        has no configuration that cheap)."""
        if self.best_at_cost is None:
            return None
        return self.servectl_slo - self.best_at_cost.slo_attainment

    @property
    def cost_ratio(self) -> float | None:
        """The baseline's cost to match servectl's SLO over servectl's (None: never)."""
        if self.cheapest_match is None:
            return None
        return self.cheapest_match.replica_seconds / self.servectl_replica_seconds

    def to_record(self) -> dict[str, Any]:
        def label(p: Point | None) -> str | None:
            return None if p is None else p.label

        return {
            "kind": "verdict",
            "trace": self.trace,
            "routing": self.routing,
            "baseline": self.baseline,
            "servectl_slo": self.servectl_slo,
            "servectl_replica_seconds": self.servectl_replica_seconds,
            "on_or_above": self.on_or_above,
            "slo_gap": self.slo_gap,
            "best_at_cost": label(self.best_at_cost),
            "best_at_cost_slo": None
            if self.best_at_cost is None
            else self.best_at_cost.slo_attainment,
            "cost_to_match": None
            if self.cheapest_match is None
            else self.cheapest_match.replica_seconds,
            "cost_to_match_config": label(self.cheapest_match),
            "cost_ratio": self.cost_ratio,
            "dominated_by": label(self.dominated_by),
        }


def verdicts(points: Sequence[Point], baselines: Sequence[str] = (HPA, KPA)) -> list[Verdict]:
    """Per (routing, trace) and baseline: servectl's default against the frontier."""
    groups: dict[tuple[str, str], list[Point]] = {}
    for point in points:
        groups.setdefault((point.routing, point.trace), []).append(point)
    out: list[Verdict] = []
    for (routing, trace), group in groups.items():
        mine = next((p for p in group if p.policy == SERVECTL and p.default), None)
        if mine is None:
            continue
        for baseline in baselines:
            theirs = [p for p in group if p.policy == baseline]
            if not theirs:
                continue
            dominated = [
                p
                for p in theirs
                if p.replica_seconds <= mine.replica_seconds
                and p.slo_attainment >= mine.slo_attainment
            ]
            out.append(
                Verdict(
                    trace=trace,
                    routing=routing,
                    baseline=baseline,
                    servectl_slo=mine.slo_attainment,
                    servectl_replica_seconds=mine.replica_seconds,
                    best_at_cost=best_within(theirs, mine.replica_seconds),
                    cheapest_match=cheapest_reaching(theirs, mine.slo_attainment),
                    dominated_by=min(dominated, key=lambda p: p.replica_seconds, default=None),
                )
            )
    return out


@dataclass(frozen=True)
class SuiteSummary:
    """Over the suite, per routing: servectl's default against the oracle and the best
    baseline configuration of each trace."""

    routing: str
    servectl_replica_seconds: float
    oracle_replica_seconds: float
    traces_at_or_above_best_baseline_slo: int
    traces: int
    behind: tuple[str, ...]  # traces where some baseline configuration attains more

    @property
    def oracle_ratio(self) -> float:
        return self.servectl_replica_seconds / self.oracle_replica_seconds

    def to_record(self) -> dict[str, Any]:
        return {"kind": "suite", **dataclasses.asdict(self), "oracle_ratio": self.oracle_ratio}


def suite_summaries(points: Sequence[Point]) -> list[SuiteSummary]:
    by_routing: dict[str, dict[str, list[Point]]] = {}
    for point in points:
        by_routing.setdefault(point.routing, {}).setdefault(point.trace, []).append(point)
    out: list[SuiteSummary] = []
    for routing, by_trace in by_routing.items():
        mine_total = oracle_total = 0.0
        at_or_above = 0
        behind: list[str] = []
        counted = 0
        for trace, group in by_trace.items():
            mine = next((p for p in group if p.policy == SERVECTL and p.default), None)
            corner = next((p for p in group if p.policy == ORACLE), None)
            baseline = [p for p in group if p.policy in (HPA, KPA)]
            if mine is None or corner is None:
                continue
            counted += 1
            mine_total += mine.replica_seconds
            oracle_total += corner.replica_seconds
            best = max((p.slo_attainment for p in baseline), default=-math.inf)
            if mine.slo_attainment >= best:
                at_or_above += 1
            else:
                behind.append(trace)
        if counted:
            out.append(
                SuiteSummary(
                    routing=routing,
                    servectl_replica_seconds=mine_total,
                    oracle_replica_seconds=oracle_total,
                    traces_at_or_above_best_baseline_slo=at_or_above,
                    traces=counted,
                    behind=tuple(behind),
                )
            )
    return out


# ------------------------------------------------------------------------- output


def _pct(x: float) -> str:
    return f"{100 * x:.4f}%"


def verdict_rows(items: Sequence[Verdict]) -> tuple[list[str], list[list[str]]]:
    header = [
        "TRACE",
        "BASELINE",
        "SERVECTL SLO",
        "SERVECTL REPLICA·S",
        "BASELINE BEST AT THAT COST",
        "SLO GAP PP",
        "COST TO MATCH",
        "ON/ABOVE",
    ]
    rows: list[list[str]] = []
    for v in items:
        best = "none that cheap"
        if v.best_at_cost is not None:
            best = f"{_pct(v.best_at_cost.slo_attainment)} {v.best_at_cost.label}"
        gap = "—" if v.slo_gap is None else f"{100 * v.slo_gap:+.4f}"
        match = "never"
        if v.cheapest_match is not None and v.cost_ratio is not None:
            match = f"{v.cost_ratio:.2f}x {v.cheapest_match.label}"
        verdict = (
            "yes" if v.on_or_above else f"NO: {v.dominated_by.label if v.dominated_by else ''}"
        )
        rows.append(
            [
                v.trace,
                v.baseline,
                _pct(v.servectl_slo),
                f"{v.servectl_replica_seconds:,.0f}",
                best,
                gap,
                match,
                verdict,
            ]
        )
    return header, rows


def point_rows(points: Sequence[Point]) -> tuple[list[str], list[list[str]]]:
    header = ["TRACE", "CONFIG", "SLO", "REPLICA·S", "WALL S"]
    rows = [
        [
            p.trace,
            p.label + (" (default)" if p.default else ""),
            _pct(p.slo_attainment),
            f"{p.replica_seconds:,.0f}",
            f"{p.wall_s:.1f}",
        ]
        for p in points
    ]
    return header, rows


def plot_frontiers(points: Sequence[Point], path: str, slo_ms: float) -> str:
    """One PNG per call: a panel per trace, SLO misses (log) against replica-seconds;
    each policy's configurations as markers joined along its frontier (a step: the best
    attainment at that cost or less), servectl's default as a star, the oracle as a cross."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    traces: list[str] = []
    for p in points:
        if p.trace not in traces:
            traces.append(p.trace)
    cols = min(3, len(traces))
    rows = math.ceil(len(traces) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.2 * rows), squeeze=False)
    colors = {SERVECTL: "tab:blue", HPA: "tab:orange", KPA: "tab:green", ORACLE: "black"}
    floor = 1e-7  # a miss rate of zero is drawn at this

    def miss(p: Point) -> float:
        return max(1.0 - p.slo_attainment, floor)

    for ax, trace in zip(axes.flat, traces, strict=False):
        group = [p for p in points if p.trace == trace]
        for policy in (HPA, KPA, SERVECTL):
            mine = [p for p in group if p.policy == policy]
            if not mine:
                continue
            ax.scatter(
                [p.replica_seconds for p in mine],
                [miss(p) for p in mine],
                s=14,
                color=colors[policy],
                alpha=0.5,
            )
            front = pareto(mine)
            xs: list[float] = []
            ys: list[float] = []
            for i, p in enumerate(front):
                if i:
                    xs.append(p.replica_seconds)
                    ys.append(miss(front[i - 1]))
                xs.append(p.replica_seconds)
                ys.append(miss(p))
            ax.plot(xs, ys, color=colors[policy], linewidth=1.2, label=f"{policy} frontier")
        default = next((p for p in group if p.policy == SERVECTL and p.default), None)
        if default is not None:
            ax.scatter(
                [default.replica_seconds],
                [miss(default)],
                marker="*",
                s=180,
                color=colors[SERVECTL],
                edgecolor="black",
                zorder=5,
                label="servectl default",
            )
        corner = next((p for p in group if p.policy == ORACLE), None)
        if corner is not None:
            ax.scatter(
                [corner.replica_seconds],
                [miss(corner)],
                marker="X",
                s=80,
                color=colors[ORACLE],
                zorder=5,
                label="oracle",
            )
        ax.set_yscale("log")
        ax.set_title(trace)
        ax.set_xlabel("replica-seconds")
        ax.set_ylabel(f"requests missing the {slo_ms:g} ms SLO")
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=7, loc="upper right")
    for ax in list(axes.flat)[len(traces) :]:
        ax.set_visible(False)
    routing = points[0].routing.replace("_", " ") if points else ""
    fig.suptitle(f"SLO misses against cost, every configuration ({routing})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
