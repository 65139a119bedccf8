"""Every simulator entry point runs through ``reconcile_once`` against a ``SimBackend``.

``reconcile_once`` is replaced by a counting wrapper where the simulator driver calls it;
each command must make exactly one call per controller tick of every run it makes (no
second loop, no shortcut around the controller).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Any

import pytest

from servectl.backends.sim import run as sim_run
from servectl.backends.sim.backend import SimBackend
from servectl.controller import reconcile
from tests.unit.cli.helpers import servectl


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    calls: Counter[str] = Counter()
    original = reconcile.reconcile_once

    def counting(backend: Any, decider: Any, now: float) -> reconcile.Cycle:
        assert isinstance(backend, SimBackend)
        calls[decider.name] += 1
        return original(backend, decider, now)

    monkeypatch.setattr(sim_run, "reconcile_once", counting)
    return calls


def ticks(seconds: int, period_s: float) -> int:
    return math.ceil(seconds / period_s)


def test_simulate(counted: Counter[str]) -> None:
    result = servectl("simulate", "--trace", "step", "--minutes", "2", "--compare", "hpa,kpa")
    assert result.exit_code == 0, result.output
    assert counted == {"servectl": ticks(120, 2), "hpa": ticks(120, 15), "kpa": ticks(120, 2)}


def test_bench(counted: Counter[str]) -> None:
    result = servectl("bench", "--traces", "spike", "--policies", "servectl,hpa", "-o", "json")
    assert result.exit_code == 0, result.output
    assert counted == {"servectl": ticks(3600, 2), "hpa": ticks(3600, 15)}


def test_rollout_simulate(counted: Counter[str]) -> None:
    result = servectl(
        "rollout", "simulate", "--trace", "step", "--minutes", "5", "--at", "30",
        "--compare", "argo-style", "-o", "json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert counted == {"servectl": ticks(300, 2), "argo-style": ticks(300, 15)}


def test_bench_rollouts(counted: Counter[str]) -> None:
    result = servectl(
        "bench", "--rollouts", "--traces", "spike", "--policies", "servectl,flagger-style",
        "-o", "json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    # Each controller runs the trace twice: with and without the rollout.
    assert set(counted) == {"servectl", "flagger-style"}
    assert counted["servectl"] == 2 * ticks(3600, 2)
    assert counted["flagger-style"] == 2 * ticks(3600, 15)


def test_bench_routing_both_runs_each_routing_and_says_which(counted: Counter[str]) -> None:
    result = servectl(
        "bench", "--traces", "spike", "--policies", "servectl", "--routing", "both", "-o", "json"
    )
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["routing"] for r in records] == ["round_robin", "least_request"]
    assert counted == {"servectl": 2 * ticks(3600, 2)}
    table = servectl("bench", "--traces", "spike", "--policies", "servectl")
    assert table.exit_code == 0, table.output
    assert "round robin within a revision" in table.stdout
    assert "HAProxy (balance leastconn)" in " ".join(table.stderr.split())
