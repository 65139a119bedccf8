"""An analysis short of samples stays Inconclusive (rule 7) and the rollout's status says
so in numbers: "waiting for traffic: 0 of 100 samples at 20 %" (issue 25, item 1)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from servectl.api import models
from servectl.rollout import analysis, machine
from servectl.rollout.counters import Counters
from servectl.rollout.machine import Op, Phase
from servectl.rollout.machine.analysis_step import waiting_for_traffic


def spec(**analysis_fields: Any) -> models.RolloutSpec:
    return models.RolloutSpec.model_validate(
        {
            "steps": [{"setWeight": 20}, {"analysis": {}}, {"setWeight": 100}],
            "analysis": {
                "interval": "30s",
                "minSamples": 100,
                "checks": [{"metric": "errorRate", "max": 0.01}],
                **analysis_fields,
            },
        }
    )


def view(now: float, requests: float = 0.0, *, metrics_ok: bool = True) -> machine.View:
    def counters(served: float) -> Counters:
        return Counters(time=now, requests=served, errors=0.0, cpu_seconds=0.0)

    return machine.View(
        now=now,
        weights={1: 80, 2: 20},
        header=None,
        ready={1: 1, 2: 1},
        needed={1: 1, 2: 1},
        available={1: True, 2: True},
        counters={1: counters(4 * requests), 2: counters(requests)},
        metrics_ok=metrics_ok,
    )


def at_the_analysis(rollout: models.RolloutSpec) -> machine.RolloutState:
    """Started, 20 % applied, the analysis step's baseline taken at t=1."""
    state = machine.command(machine.initial(1), Op.START, rollout, 0.0, version=2)
    state, _ = machine.advance(state, rollout, view(1.0))
    assert state.step == 1 and state.baseline
    return state


def test_an_idle_canary_waits_for_traffic_in_numbers() -> None:
    rollout = spec()
    state = at_the_analysis(rollout)
    state, intent = machine.advance(state, rollout, view(31.0))
    assert state.step == 1 and state.phase is Phase.PROGRESSING
    assert state.verdicts[-1].verdict == models.Verdict.INCONCLUSIVE
    assert state.message.startswith("waiting for traffic: 0 of 100 samples at 20 %")
    assert intent.message == state.message and intent.weights == {1: 80, 2: 20}
    # Between two evaluations the message stands.
    state, _ = machine.advance(state, rollout, view(45.0, requests=30))
    assert state.message.startswith("waiting for traffic: 0 of 100 samples at 20 %")
    # Samples accumulate across extensions; the count follows them.
    state, _ = machine.advance(state, rollout, view(61.0, requests=40))
    assert state.message.startswith("waiting for traffic: 40 of 100 samples at 20 %")
    assert "extended 2x" in state.message
    # Enough samples: judged, passed, next step.
    state, _ = machine.advance(state, rollout, view(91.0, requests=150))
    assert state.verdicts[-1].verdict == models.Verdict.SUCCESSFUL
    assert state.step == 2


def test_after_max_extensions_it_pauses_and_says_what_it_waited_for() -> None:
    rollout = spec(maxExtensions=1)
    state = at_the_analysis(rollout)
    state, _ = machine.advance(state, rollout, view(31.0))
    state, _ = machine.advance(state, rollout, view(61.0, requests=7))
    assert state.phase is Phase.PAUSED
    assert "waiting for traffic: 7 of 100 samples at 20 %" in state.message
    assert "generate load" in state.message


def test_missing_metrics_are_not_called_waiting_for_traffic() -> None:
    rollout = spec()
    state = at_the_analysis(rollout)
    state, _ = machine.advance(state, rollout, view(31.0, metrics_ok=False))
    assert state.verdicts[-1].verdict == models.Verdict.INCONCLUSIVE
    assert "waiting for traffic" not in state.message
    assert "metrics are stale or missing" in state.message


def test_the_verdict_knows_the_samples_it_needed() -> None:
    check = models.AnalysisCheck(metric="errorRate", max=0.01)
    short = analysis.Window(requests=12, errors=0, cpu_seconds=0, latency_buckets=(), seconds=30)
    result = analysis.judge([check], short, None, min_samples=100, bounds_us=())
    assert (result.samples, result.needed, result.short_of_samples) == (12, 100, True)
    enough = analysis.judge(
        [check], replace(short, requests=500), None, min_samples=100, bounds_us=()
    )
    assert enough.verdict == models.Verdict.SUCCESSFUL and not enough.short_of_samples
    note = waiting_for_traffic(result, 10)
    assert note == "waiting for traffic: 12 of 100 samples at 10 %"
