"""A trace's own day length, and servectl told the seasons of a compressed trace."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from servectl.sim import suite, traces


def test_a_trace_keeps_its_day_through_every_transformation() -> None:
    day = traces.diurnal_weekly(100, 200, days=1, day_s=3600, noise=0.0, wander=0.0)
    assert day.day_s == 3600
    assert traces.truncate(day, 600).day_s == 3600
    assert traces.scaled(day, 2.0).day_s == 3600
    assert traces.step(1, 2, 5, 10).day_s == 86400  # real time unless told otherwise
    by_name = {t.name: t.day_s for t in traces.production_suite(0)}
    assert by_name["business_day"] == 3600 and by_name["slow_ramp"] == 86400


@pytest.mark.parametrize("day_s", [0, 23, 3600.5, True])
def test_an_unusable_day_is_refused_with_the_trace_named(day_s: object) -> None:
    with pytest.raises(traces.TraceError, match="trace 'x': day_s"):
        traces.Trace(name="x", rps=np.ones(3), day_s=day_s)  # type: ignore[arg-type]


def test_servectl_is_told_the_seasons_of_a_compressed_trace() -> None:
    svc = suite.service()
    cfg = suite.autoscaling_config(svc)
    compressed = traces.Trace(name="c", rps=np.ones(10), day_s=3600)
    real = traces.Trace(name="r", rps=np.ones(10))
    told = suite.with_seasons(cfg, compressed)
    assert told.forecast is not None and told.forecast.periods_s == (3600.0, 25200.0)
    assert told.forecast.timing_slack_buckets == cfg.forecast.timing_slack_buckets  # type: ignore[union-attr]
    assert suite.with_seasons(cfg, real) is cfg
    off = dataclasses.replace(cfg, forecast=None)
    assert suite.with_seasons(off, compressed).forecast is None
    # `servectl simulate --trace week_compressed` builds servectl this way.
    policy = suite.policies(svc, ["servectl"])["servectl"](compressed)
    assert policy.config.forecast.periods_s == (3600.0, 25200.0)  # type: ignore[attr-defined]
