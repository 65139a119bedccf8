"""A revision that is scraped fine but has served nothing reads as zero requests, not as
missing metrics (issue 25, item 1).

TF Serving (and servectl's model server) create the request and latency series at the
first request. The ``scraped`` part of the requests and latency queries says, per
revision, when its model servers were last scraped (0: one scrape fails), so the
assembly can tell "no series because nothing was served" (a measurement: rps 0) from "no
series because the scrape fails or Prometheus lost the target" (a gap: rule 8 holds).
"""

from __future__ import annotations

import math

import pytest

from servectl.api.models import ConditionStatus
from servectl.controller.observe import RevisionState, observe
from servectl.metrics.assemble import Reason, assemble, condition
from servectl.metrics.config import MetricsConfig
from tests.unit.metrics.test_assemble import NS, SVC, T, Tick, healthy

STALE_AFTER = 60.0


def scraped(tick: Tick, revision: str, at: float = T - 1.0, *, service: str = SVC) -> Tick:
    """The ``scraped`` parts of both TF Serving queries for ``revision`` (0: a scrape fails)."""
    labels = {"namespace": NS, "service": service, "revision": revision}
    for signal in ("requests", "latency"):
        tick._add(signal, "scraped", at, labels)
    return tick


def idle(tick: Tick, revision: str, *, at: float = T - 1.0) -> Tick:
    """A replica that burns a little CPU, is scraped, and has served no request."""
    tick.pod(revision, f"{revision}-a", usage=0.01, request=0.5)
    return scraped(tick, revision, at)


def test_scraped_with_no_request_series_is_zero_requests_not_missing() -> None:
    snap = assemble(T, idle(Tick(), "r1").results(), MetricsConfig())
    r1 = snap.revision(NS, SVC, "r1")
    assert r1.missing == ("gpu",)  # no GPU here; requests and latency are present
    assert r1.signals.rps == 0.0
    # No requests: no latency value and no error rate (an empty histogram is no value).
    assert r1.signals.latency_ms == {}
    assert r1.signals.error_rate is None
    assert r1.signals.concurrency == 0.0
    assert r1.ages["requests"] == pytest.approx(1.0)
    for value in vars(r1.signals).values():
        assert not isinstance(value, float) or math.isfinite(value)
    cond = condition(snap, NS, SVC)
    assert cond.status is ConditionStatus.TRUE, cond.message
    service = snap.service(NS, SVC)
    assert service.missing == ("gpu",) and service.signals.rps == 0.0


def test_a_failing_scrape_with_no_series_is_missing() -> None:
    snap = assemble(T, idle(Tick(), "r1", at=0.0).results(), MetricsConfig())
    r1 = snap.revision(NS, SVC, "r1")
    assert set(r1.missing) >= {"requests", "latency"}
    assert r1.signals.rps is None
    assert set(r1.scrape_failing) == {"requests", "latency"}
    cond = condition(snap, NS, SVC)
    assert cond.status is ConditionStatus.FALSE
    assert cond.reason == Reason.PARTIAL
    assert "requests missing for r1 (the scrape of its model server fails: up is 0)" in (
        cond.message
    )
    assert snap.service(NS, SVC).signals.rps is None  # the autoscaler holds (rule 8)


def test_no_target_at_all_is_missing() -> None:
    # The target is gone from Prometheus (no `up` sample): nothing says it served nothing.
    tick = Tick().pod("r1", "r1-a", usage=0.01, request=0.5)
    snap = assemble(T, tick.results(), MetricsConfig(), expected=[(NS, SVC, "r1")])
    r1 = snap.revision(NS, SVC, "r1")
    assert {"requests", "latency"} <= set(r1.missing)
    assert r1.scrape_failing == ()
    assert condition(snap, NS, SVC).status is ConditionStatus.FALSE


def test_a_stale_scrape_is_stale_not_zero() -> None:
    old = T - STALE_AFTER - 30.0
    snap = assemble(T, idle(Tick(), "r1", at=old).results(), MetricsConfig())
    r1 = snap.revision(NS, SVC, "r1")
    assert {"requests", "latency"} <= set(r1.stale)
    assert r1.signals.rps is None
    cond = condition(snap, NS, SVC)
    assert cond.status is ConditionStatus.FALSE and cond.reason == Reason.STALE
    assert "requests stale for r1 (90 s old)" in cond.message


def test_one_failing_target_among_several_is_a_failing_scrape() -> None:
    # The part is the minimum over the revision's targets: any target down gives 0.
    tick = idle(Tick(), "r1")
    scraped(tick, "r1", at=0.0)  # a second target of r1, down
    r1 = assemble(T, tick.results(), MetricsConfig()).revision(NS, SVC, "r1")
    assert "requests" in r1.missing and r1.signals.rps is None


def test_series_win_over_the_scrape_part() -> None:
    tick = scraped(healthy(Tick(), "r1", rps=12.0), "r1")
    r1 = assemble(T, tick.results(), MetricsConfig()).revision(NS, SVC, "r1")
    assert r1.signals.rps == pytest.approx(12.0)
    assert r1.signals.latency_ms  # the histogram's percentiles, as without the part
    assert r1.missing == ("gpu",)


def test_a_failing_scrape_does_not_hide_series_that_answered() -> None:
    # Another of r1's targets fails, but r1's series are there: its rate is what was served.
    tick = scraped(healthy(Tick(), "r1", rps=12.0), "r1", at=0.0)
    r1 = assemble(T, tick.results(), MetricsConfig()).revision(NS, SVC, "r1")
    assert r1.signals.rps == pytest.approx(12.0) and r1.missing == ("gpu",)


def test_an_idle_canary_beside_a_serving_stable() -> None:
    tick = idle(healthy(Tick(), "r1", rps=8.0), "r2")
    snap = assemble(T, tick.results(), MetricsConfig())
    assert snap.revision(NS, SVC, "r2").signals.rps == 0.0
    service = snap.service(NS, SVC)
    assert service.missing == ("gpu",)
    assert service.signals.rps == pytest.approx(8.0)
    assert service.signals.latency_ms  # r1's histogram; r2's empty one adds nothing
    assert condition(snap, NS, SVC).status is ConditionStatus.TRUE


def test_a_failed_latency_query_is_not_read_as_idle() -> None:
    # Each signal carries its own scrape part: the requests query's cannot stand in for a
    # latency query that failed.
    from servectl.metrics.assemble import Problem

    failed = Problem("latency", Reason.TIMEOUT, "latency: timed out")
    snap = assemble(T, idle(Tick(), "r1").results(latency=failed), MetricsConfig())
    r1 = snap.revision(NS, SVC, "r1")
    assert r1.signals.rps == 0.0
    assert "latency" in r1.missing
    assert condition(snap, NS, SVC).status is ConditionStatus.FALSE


def test_an_idle_service_observes_metrics_ok() -> None:
    # What the planner reads: rule 8 holds nothing for an idle, well-scraped service.
    snap = assemble(T, idle(Tick(), "r1").results(), MetricsConfig())
    observed = observe(
        T,
        snap,
        [RevisionState("r1", 1, desired=1, ready=1, weight=100, available=True)],
        namespace=NS,
        service=SVC,
        min_replicas=1,
        max_replicas=4,
    )
    assert observed.metrics_ok, observed.metrics_detail
    assert observed.service.signals.rps == 0.0
