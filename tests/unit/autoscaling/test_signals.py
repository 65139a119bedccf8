"""Per-signal proposals: each signal sized on demand, None when its inputs are missing."""

from __future__ import annotations

import pytest

from servectl.autoscaling import config, signals
from servectl.testing import make_snapshot


def demand(**kw: object) -> signals.Demand:
    base: dict[str, object] = {
        "rate": 600.0,
        "projected_rate": 600.0,
        "service_s": 0.02,
        "wait_budget_s": 0.1,
        "request_cores": 2.0,
        "threads": 2,
    }
    base.update(kw)
    return signals.Demand(**base)  # type: ignore[arg-type]


def target(kind: config.SignalType, value: float, percentile: float = 99.0) -> config.SignalTarget:
    return config.SignalTarget(kind, value, percentile)


@pytest.mark.parametrize(
    ("signal", "snap_kw", "demand_kw", "expected"),
    [
        # cpu: 12 cores / (2 x 0.6) = 10
        (target(config.SignalType.CPU, 60), {"cpu_usage_cores": 12.0}, {}, 10.0),
        # cpu from utilization when usage is absent: 75 % of 8 x 2 cores = 12 cores
        (target(config.SignalType.CPU, 60), {"cpu_utilization": 75.0, "current": 8}, {}, 10.0),
        # cpu: demand beats saturated usage (700 req/s x 20 ms = 14 cores)
        (
            target(config.SignalType.CPU, 70),
            {"cpu_usage_cores": 8.0},
            {"projected_rate": 700.0},
            10.0,
        ),
        # gpu: 4 ready x 90 % / 60 % = 6
        (target(config.SignalType.GPU, 60), {"gpu_duty_cycle": 90.0, "current": 4}, {}, 6.0),
        # gpu with growth 1.5 (rate 600 -> projected 900): 9
        (
            target(config.SignalType.GPU, 60),
            {"gpu_duty_cycle": 90.0, "current": 4},
            {"projected_rate": 900.0},
            9.0,
        ),
        # rps: 600 / 50 per replica = 12
        (target(config.SignalType.RPS, 50), {}, {}, 12.0),
        # concurrency: 30 in flight / 3 per replica = 10
        (target(config.SignalType.CONCURRENCY, 3), {"concurrency": 30.0}, {}, 10.0),
    ],
)
def test_proportional_proposals(
    signal: config.SignalTarget,
    snap_kw: dict[str, float],
    demand_kw: dict[str, float],
    expected: float,
) -> None:
    snap = make_snapshot(**snap_kw)  # type: ignore[arg-type]
    prop = signals.propose(signal, snap, demand(**demand_kw), 50)
    assert prop is not None
    assert prop.replicas == pytest.approx(expected)
    assert prop.signal == signals.signal_name(signal)
    assert prop.detail


@pytest.mark.parametrize(
    ("signal", "demand_kw"),
    [
        (target(config.SignalType.CPU, 70), {}),
        (target(config.SignalType.GPU, 70), {}),
        (target(config.SignalType.RPS, 50), {"projected_rate": None}),
        (target(config.SignalType.CONCURRENCY, 3), {}),
        (target(config.SignalType.LATENCY, 150), {"wait_budget_s": None}),
        (target(config.SignalType.LATENCY, 150), {"service_s": None}),
    ],
)
def test_missing_inputs_give_no_proposal(
    signal: config.SignalTarget, demand_kw: dict[str, object]
) -> None:
    assert signals.propose(signal, make_snapshot(), demand(**demand_kw), 50) is None


def test_latency_proposal_names_the_percentile_and_reports_the_observation() -> None:
    signal = target(config.SignalType.LATENCY, 150, 99.9)
    snap = make_snapshot(latency_ms={"p99.9": 130.0})
    prop = signals.propose(signal, snap, demand(), 50)
    assert prop is not None
    assert prop.signal == "latency_p99.9"
    assert "observed 130 ms" in prop.detail


def test_growth_is_never_below_one() -> None:
    assert demand(projected_rate=500.0).growth == 1.0
    assert demand(rate=0.0).growth == 1.0
    assert demand(projected_rate=900.0).growth == pytest.approx(1.5)
