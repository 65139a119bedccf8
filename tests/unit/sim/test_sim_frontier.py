"""The frontier bench: the grid, the frontier arithmetic, and a short real sweep."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from servectl.autoscaling import engine, hpa, kpa
from servectl.backends.sim import bench
from servectl.backends.sim import frontier as fr
from servectl.sim import model, suite, traces


def point(
    policy: str,
    cost: float,
    slo: float,
    *,
    default: bool = False,
    trace: str = "t",
    routing: str = "round_robin",
    label: str | None = None,
) -> fr.Point:
    return fr.Point(
        trace=trace,
        routing=routing,
        policy=policy,
        label=label or f"{policy} {cost:g}",
        params={},
        default=default,
        slo_attainment=slo,
        replica_seconds=cost,
        requests=1000,
        wall_s=0.0,
    )


def test_the_grid_covers_the_issues_ranges_and_ends_with_the_oracle() -> None:
    specs = fr.grid()
    by_policy: dict[str, list[fr.PointSpec]] = {}
    for spec in specs:
        by_policy.setdefault(spec.policy, []).append(spec)
    hpa_targets = sorted(dict(s.params)["cpu_target"] for s in by_policy["hpa"])
    assert hpa_targets[0] == 40.0 and hpa_targets[-1] == 90.0 and len(hpa_targets) == 6
    kpa_points = {tuple(dict(s.params).values()) for s in by_policy["kpa"]}
    assert (0.5, 150.0) in kpa_points and (0.9, 400.0) in kpa_points and len(kpa_points) == 15
    assert specs[-1] == fr.PointSpec("oracle")
    # Exactly one default per policy, and it is the configuration `servectl bench` runs.
    defaults = [s for s in specs if s.is_default]
    assert sorted(s.policy for s in defaults) == ["hpa", "kpa", "servectl"]
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        fr.grid(["nope"])


def test_each_spec_builds_the_configuration_it_names() -> None:
    svc = suite.service()
    trace = traces.step(100, 200, 60, 120)
    hpa_spec = fr.PointSpec("hpa", (("cpu_target", 55.0),))
    built = hpa_spec.build(trace, svc)
    assert isinstance(built, hpa.HPAPolicy)
    assert [getattr(m, "target_utilization", None) for m in built.config.metrics] == [55]
    kpa_spec = fr.PointSpec("kpa", (("target_utilization", 0.9), ("panic_threshold", 400.0)))
    k = kpa_spec.build(trace, svc)
    assert isinstance(k, kpa.KPAPolicy)
    assert k.config.target_utilization == 0.9 and k.config.panic_threshold == 4.0
    assert k.config.target == svc.threads_per_replica
    mine = fr.PointSpec("servectl", (("cpu_target", 80.0),)).build(trace, svc)
    assert isinstance(mine, engine.EnginePolicy)
    targets = {s.type.value: s.target for s in mine.config.signals}
    assert targets == {"cpu": 80.0, "latency": svc.slo_ms}  # the latency signal is kept
    assert kpa_spec.label == "kpa util 0.9 panic 400%"
    assert hpa_spec.label == "hpa cpu 55%"


def test_pareto_keeps_only_points_nothing_cheaper_beats() -> None:
    pts = [
        point("hpa", 10, 0.90),
        point("hpa", 20, 0.95),
        point("hpa", 15, 0.80),
        point("hpa", 30, 0.95),
        point("hpa", 40, 0.99),
    ]
    assert [(p.replica_seconds, p.slo_attainment) for p in fr.pareto(pts)] == [
        (10, 0.90),
        (20, 0.95),
        (40, 0.99),
    ]


def test_best_within_and_cheapest_reaching_are_step_functions_not_interpolations() -> None:
    pts = [point("kpa", 10, 0.90), point("kpa", 20, 0.95), point("kpa", 40, 0.99)]
    assert fr.best_within(pts, 30).slo_attainment == 0.95  # type: ignore[union-attr]
    assert fr.best_within(pts, 9) is None
    assert fr.cheapest_reaching(pts, 0.96).replica_seconds == 40  # type: ignore[union-attr]
    assert fr.cheapest_reaching(pts, 0.995) is None


def test_verdicts_judge_servectls_default_against_each_frontier() -> None:
    pts = [
        point("servectl", 25, 0.97, default=True),
        point("servectl", 20, 0.90),  # a non-default servectl point is not judged
        point("hpa", 20, 0.95),
        point("hpa", 50, 0.98),
        point("kpa", 24, 0.975, label="kpa cheap and better"),
        point("kpa", 60, 0.99),
    ]
    by = {v.baseline: v for v in fr.verdicts(pts)}
    h, k = by["hpa"], by["kpa"]
    assert h.on_or_above and h.dominated_by is None
    assert h.slo_gap == pytest.approx(0.02)  # 0.97 - 0.95 at servectl's cost
    assert h.cost_ratio == pytest.approx(2.0)  # hpa needs 50 replica·s to reach 0.97
    assert not k.on_or_above and k.dominated_by is not None
    assert k.dominated_by.label == "kpa cheap and better"
    assert k.slo_gap == pytest.approx(-0.005)
    record = k.to_record()
    assert record["on_or_above"] is False and record["dominated_by"] == "kpa cheap and better"
    json.dumps(record)  # JSON-ready
    header, rows = fr.verdict_rows([h, k])
    assert len(rows) == 2 and len(rows[0]) == len(header)
    assert rows[1][-1] == "NO: kpa cheap and better" and rows[0][-1] == "yes"


def test_a_baseline_with_no_configuration_that_cheap_has_no_gap_and_never_matches() -> None:
    pts = [point("servectl", 10, 0.99, default=True), point("hpa", 20, 0.98)]
    (v,) = fr.verdicts(pts, baselines=("hpa",))
    assert v.best_at_cost is None and v.slo_gap is None
    assert v.cheapest_match is None and v.cost_ratio is None and v.on_or_above


def test_suite_summaries_sum_costs_and_name_the_traces_where_servectl_is_behind() -> None:
    pts = [
        point("servectl", 30, 0.99, default=True, trace="a"),
        point("hpa", 20, 0.98, trace="a"),
        point("oracle", 20, 0.999, trace="a"),
        point("servectl", 40, 0.95, default=True, trace="b"),
        point("kpa", 80, 0.96, trace="b"),
        point("oracle", 30, 0.999, trace="b"),
        point("servectl", 40, 0.95, default=True, trace="b", routing="least_request"),
        point("oracle", 40, 0.999, trace="b", routing="least_request"),
    ]
    by = {s.routing: s for s in fr.suite_summaries(pts)}
    rr = by["round_robin"]
    assert rr.servectl_replica_seconds == 70 and rr.oracle_replica_seconds == 50
    assert rr.oracle_ratio == pytest.approx(1.4)
    assert rr.traces == 2 and rr.traces_at_or_above_best_baseline_slo == 1
    assert rr.behind == ("b",)  # kpa's dearest configuration attains more there
    assert by["least_request"].traces_at_or_above_best_baseline_slo == 1


def test_a_short_real_sweep_reproduces_the_bench_at_the_default_points(tmp_path: Path) -> None:
    trace = traces.truncate(traces.standard_suite(0)[1], 240)  # step, first 4 minutes
    specs = [
        fr.PointSpec("servectl"),
        fr.PointSpec("servectl", (("cpu_target", 70.0),)),
        fr.PointSpec("hpa", (("cpu_target", 70.0),)),
        fr.PointSpec("hpa", (("cpu_target", 40.0),)),
        fr.PointSpec("kpa", (("target_utilization", 0.7), ("panic_threshold", 200.0))),
        fr.PointSpec("oracle"),
    ]
    seen: list[int] = []
    points = fr.run_frontier(
        [trace], specs, [model.Routing.ROUND_ROBIN], jobs=1, progress=lambda p, i, n: seen.append(i)
    )
    assert seen == [1, 2, 3, 4, 5, 6]
    assert [p.default for p in points] == [True, False, True, False, True, False]
    assert [p.label for p in points[:2]] == ["servectl", "servectl cpu 70%"]
    svc = suite.service()
    reference = bench.run_bench(
        [trace],
        {name: f for name, f in suite.policies(svc).items()},
        svc,
        seed=0,
    )
    ref = {r.policy: (r.slo_attainment, r.replica_seconds) for r in reference}
    for p in points:
        if p.default or p.policy == "oracle":
            assert (p.slo_attainment, p.replica_seconds) == ref[p.policy], p.label
    # Halving HPA's CPU target buys capacity: more replica·s.
    hpa40 = next(p for p in points if p.label == "hpa cpu 40%")
    hpa70 = next(p for p in points if p.label == "hpa cpu 70%")
    assert hpa40.replica_seconds > hpa70.replica_seconds
    png = fr.plot_frontiers(points, str(tmp_path / "f.png"), svc.slo_ms)
    assert (tmp_path / "f.png").stat().st_size > 10_000 and png.endswith("f.png")


def test_the_worker_pool_gives_the_same_points_as_one_process() -> None:
    trace = traces.truncate(traces.standard_suite(0)[2], 120)
    specs = [fr.PointSpec("hpa", (("cpu_target", 60.0),)), fr.PointSpec("oracle")]
    one = fr.run_frontier([trace], specs, [model.Routing.LEAST_REQUEST], jobs=1)
    two = fr.run_frontier([trace], specs, [model.Routing.LEAST_REQUEST], jobs=2)

    def strip(points: list[fr.Point]) -> list[fr.Point]:
        return [dataclasses.replace(p, wall_s=0.0) for p in points]

    assert strip(one) == strip(two)
    assert {p.routing for p in one} == {"least_request"}
