"""Traces: generator shapes, determinism, the standard suite, CSV reading."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from servectl.sim import traces


def test_step_spike_ramp_diurnal_shapes() -> None:
    s = traces.step(200, 800, at_s=5, duration_s=10)
    assert s.rps.tolist() == [200] * 5 + [800] * 5
    sp = traces.spike(300, 1200, at_s=3, length_s=2, duration_s=8)
    assert sp.rps.tolist() == [300, 300, 300, 1200, 1200, 300, 300, 300]
    r = traces.ramp(100, 1000, 10)
    assert r.rps[0] == 100 and r.rps[-1] == 1000 and np.all(np.diff(r.rps) > 0)
    d = traces.diurnal(150, 900, period_s=100, duration_s=100)
    assert d.rps[0] == pytest.approx(150)
    assert d.rps[50] == pytest.approx(900)
    assert d.rps.min() >= 150 - 1e-9 and d.rps.max() <= 900 + 1e-9


def test_trace_is_read_only_and_validated() -> None:
    t = traces.step(1, 2, 1, 3)
    with pytest.raises(ValueError):
        t.rps[0] = 5
    with pytest.raises(traces.TraceError):
        traces.Trace("bad", np.array([1.0, -1.0]))
    with pytest.raises(traces.TraceError):
        traces.Trace("empty", np.array([]))


def test_seeded_generators_are_deterministic() -> None:
    a = traces.steady(600, 600, noise=0.05, seed=3)
    b = traces.steady(600, 600, noise=0.05, seed=3)
    c = traces.steady(600, 600, noise=0.05, seed=4)
    assert np.array_equal(a.rps, b.rps)
    assert not np.array_equal(a.rps, c.rps)
    assert np.array_equal(traces.bursty(400, 600, seed=1).rps, traces.bursty(400, 600, seed=1).rps)


def test_steady_stays_near_its_mean() -> None:
    t = traces.steady(600, 3600, noise=0.05, seed=0)
    assert t.mean_rps == pytest.approx(600, rel=0.1)
    assert t.rps.min() > 300 and t.peak_rps < 900


def test_bursty_mean_is_exact_and_heavy_tailed() -> None:
    t = traces.bursty(400, 3600, seed=0)
    assert t.mean_rps == pytest.approx(400, rel=1e-3)
    assert t.rps.min() == pytest.approx(240)  # the base
    assert t.peak_rps <= 1000 + 1e-6
    assert t.peak_rps > 2 * 400 * 0.9  # some burst is large


def test_standard_suite() -> None:
    suite = traces.standard_suite(seed=0)
    assert [t.name for t in suite] == ["steady_noisy", "step", "spike", "ramp", "diurnal", "bursty"]
    for t in suite:
        assert t.duration_s == 3600
        assert 300 <= t.peak_rps <= 1200 + 1e-6, t.name
        assert t.description
    by_name = {t.name: t for t in suite}
    assert by_name["step"].rps[1199] == 200 and by_name["step"].rps[1200] == 800
    assert by_name["spike"].rps[1800:1920].min() == 1200 and by_name["spike"].rps[1920] == 300
    assert by_name["bursty"].mean_rps == pytest.approx(400, rel=1e-3)
    again = traces.standard_suite(seed=0)
    assert all(np.array_equal(a.rps, b.rps) for a, b in zip(suite, again, strict=True))


def test_scaled_and_truncate() -> None:
    t = traces.step(100, 200, 2, 4)
    assert traces.scaled(t, 1.5).rps.tolist() == [150, 150, 300, 300]
    assert traces.truncate(t, 3).rps.tolist() == [100, 100, 200]
    with pytest.raises(traces.TraceError):
        traces.scaled(t, -1)


def test_from_csv_interpolates_to_seconds(tmp_path: Path) -> None:
    path = tmp_path / "load.csv"
    path.write_text("t,rps\n0,100\n4,500\n# comment\n\n6,500\n")
    t = traces.from_csv(path)
    assert t.name == "load"
    assert t.rps.tolist() == [100, 200, 300, 400, 500, 500, 500]


def test_from_csv_starting_late_repeats_the_first_rate(tmp_path: Path) -> None:
    path = tmp_path / "late.csv"
    path.write_text("t,rps\n2,10\n3,20\n")
    assert traces.from_csv(path).rps.tolist() == [10, 10, 10, 20]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("t,rps\n0,100\n1,abc\n", ":3: t and rps must be numbers"),
        ("t,rps\n0,100\n5,1\n5,2\n", ":4: t must increase"),
        ("t,rps\n0,100\n1,-3\n", ":3: rps must be >= 0"),
        ("t,rps\n0,100,7\n", ":2: expected 2 columns"),
        ("time,load\n0,1\n", ":1: expected the header 't,rps'"),
        ("t,rps\n-1,5\n", ":2: t must be >= 0"),
        ("t,rps\n0,inf\n", ":2: t and rps must be finite"),
        ("", "empty file"),
        ("t,rps\n", "no data rows"),
    ],
)
def test_from_csv_errors_name_the_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(traces.TraceError) as caught:
        traces.from_csv(path)
    assert message in str(caught.value)
    assert str(path) in str(caught.value)


def test_from_csv_counts_request_timestamps_per_second(tmp_path: Path) -> None:
    path = tmp_path / "access.csv"
    # Unix times from a log, out of order, with a comment and a blank line.
    path.write_text(
        "timestamp\n# from nginx\n1700000000.2\n1700000000.9\n1700000002.5\n\n"
        "1700000000.0\n1700000003.99\n1700000002.0\n"
    )
    t = traces.from_csv(path)
    assert t.rps.tolist() == [3, 0, 2, 1]
    assert t.name == "access" and "6 requests" in t.description


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("timestamp\n1,2\n", ":2: expected 1 column"),
        ("timestamp\n1\nnoon\n", ":3: timestamp must be a number"),
        ("timestamp\nnan\n", ":2: timestamp must be finite"),
        ("timestamp\n", "no data rows"),
        ("timestamp\n0\n1700000000000\n", "are some in milliseconds?"),
    ],
)
def test_timestamp_csv_errors_name_the_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(traces.TraceError) as caught:
        traces.from_csv(path)
    assert message in str(caught.value)
    assert str(path) in str(caught.value)
