"""How a decision's detail writes a moment (servectl.autoscaling.decision.instant)."""

from __future__ import annotations

from servectl.autoscaling.decision import instant


def test_a_moment_is_an_rfc3339_utc_second() -> None:
    assert instant(1796452570.9) == "2026-12-05T06:36:10Z"


def test_a_moment_past_the_calendar_says_its_last_or_first_second() -> None:
    # A snapshot at the end of year 9999 and a panic hold after it (hypothesis found it).
    assert instant(253402300799.0 + 60) == "9999-12-31T23:59:59Z"
    assert instant(-1e15) == "0001-01-01T00:00:00Z"
    assert instant(float("inf")) == "9999-12-31T23:59:59Z"
    assert instant(float("nan")) == "an unknown time"
