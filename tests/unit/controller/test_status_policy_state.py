"""What status shows of the policy state: everything but the forecast's bucket history."""

from __future__ import annotations

from servectl.autoscaling import config, engine, forecast
from servectl.controller import status
from servectl.testing import make_snapshot


def test_status_leaves_out_the_forecast_history_the_loop_state_keeps() -> None:
    policy = engine.EnginePolicy(config.AutoscalingConfig())
    _, state = policy.decide(make_snapshot(1000.0, current=2, rps=50.0, cpu_usage_cores=1.0), {})
    assert forecast.from_state(state["forecast"], forecast.ForecastConfig())["bucket"] is not None
    shown = status._readable(state)
    assert "forecast" not in shown
    assert shown == {k: v for k, v in state.items() if k != "forecast"}
    assert shown["service_s"] == state["service_s"]  # the rest is untouched
