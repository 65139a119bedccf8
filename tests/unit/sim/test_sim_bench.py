"""Bench harness and plots: every pair, comparisons, table, JSON, PNG, speed check."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from servectl.backends.sim import bench, run
from servectl.sim import model, oracle, plot, traces

SERVICE = model.ServiceModel()


def _records() -> list[bench.BenchRecord]:
    trace_list = [traces.step(200, 600, 120, 300), traces.truncate(traces.ramp(100, 400, 300), 240)]
    policies: dict[str, bench.PolicyFactory] = {
        "servectl": lambda _t: bench.FixedReplicas(8),
        "cheap": lambda _t: bench.FixedReplicas(3),
        "oracle": lambda t: oracle.OraclePolicy(t, SERVICE),
    }
    calls: list[tuple[str, str, int, int]] = []
    records = bench.run_bench(
        trace_list, policies, SERVICE, seed=1, progress=lambda *a: calls.append(a)
    )
    assert calls[0] == ("step", "servectl", 1, 6) and calls[-1] == ("ramp", "oracle", 6, 6)
    return records


def test_run_bench_summarize_and_table() -> None:
    records = _records()
    assert [(r.trace, r.policy) for r in records] == [
        (t, p) for t in ("step", "ramp") for p in ("servectl", "cheap", "oracle")
    ]
    step_servectl = records[0]
    assert step_servectl.replica_seconds == 8 * 300 and step_servectl.wall_s > 0
    assert step_servectl.requests > 0 and step_servectl.recovery_s is not None

    summary = bench.summarize(records, subject="servectl")
    assert [c.trace for c in summary] == ["step", "ramp", bench.SUITE]
    step = summary[0]
    versus = {v.policy: v for v in step.versus}
    assert set(versus) == {"cheap", "oracle"}
    assert versus["cheap"].replica_seconds_ratio == pytest.approx(8 / 3)
    assert versus["cheap"].slo_attainment_diff > 0
    suite = summary[-1]
    assert suite.replica_seconds == 8 * 300 + 8 * 240
    cheap_total = 3 * 300 + 3 * 240
    assert {v.policy: v for v in suite.versus}["cheap"].replica_seconds_ratio == pytest.approx(
        suite.replica_seconds / cheap_total
    )
    with pytest.raises(ValueError, match="subject"):
        bench.summarize(records, subject="nobody")

    table = bench.format_table(records)
    assert table[0][:2] == ["trace", "policy"] and len(table) == 7
    assert all(len(row) == len(table[0]) for row in table)
    oracle_row = table[3]
    assert oracle_row[1] == "oracle" and oracle_row[4] == "1.00"

    for record in records:
        doc = json.loads(json.dumps(record.to_record(), allow_nan=False))
        assert doc["trace"] == record.trace and doc["recovery"] in {"none", "recovered", "never"}


def test_speed_check_returns_wall_seconds() -> None:
    wall = bench.speed_check(seconds=30, rps=200)
    assert 0 < wall < 10


def test_plot_timeline_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    trace = traces.step(100, 400, 60, 120)
    results = {
        "fixed": run.simulate(trace, bench.FixedReplicas(3), SERVICE),
        "oracle": run.simulate(trace, oracle.OraclePolicy(trace, SERVICE), SERVICE),
    }
    out = plot.plot_timeline(results, tmp_path / "sub" / "t.png", SERVICE.slo_ms, title="step")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert not math.isnan(float(np.nansum(results["fixed"].p99_ms)))
