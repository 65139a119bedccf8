"""The demo's story against a target in memory: what the recorder keeps, what the figures
say, what the report prints. The runtimes themselves are tested by the local runtime's and
the real node's end-to-end tests."""

from __future__ import annotations

import itertools
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

from servectl.demo import report
from servectl.demo import story as story_module
from servectl.demo.story import (
    DemoError,
    DemoResult,
    DemoSettings,
    PhaseResult,
    Recorder,
    Sample,
    Story,
    capacity_figure,
    cores,
    p99_of,
    revisions_of,
    scaled_up,
    step_figures,
)


class Memory:
    """A Target whose status, signals and events the test sets."""

    where = "memory"

    def __init__(self) -> None:
        self.doc: dict[str, Any] = {}
        self.sig: dict[str, Any] = {}
        self.pending: list[dict[str, Any]] = []
        self.rollouts: list[int] = []
        self.broken: str | None = None
        self.slo: float | None = None
        self.cpu: float | None = None  # None: the target cannot read its replicas' CPU
        self.cost_s = 0.0  # CPU seconds each cpu_seconds() call adds (one request's)

    def front_url(self) -> str:
        return "http://127.0.0.1:1"

    def status(self) -> dict[str, Any]:
        return self.doc

    def signals(self) -> dict[str, Any]:
        return self.sig

    def new_events(self) -> list[dict[str, Any]]:
        found, self.pending = self.pending, []
        return found

    def start_rollout(self, version: int) -> None:
        self.rollouts.append(version)

    def set_slo(self, slo_ms: float) -> None:
        self.slo = slo_ms

    def cpu_seconds(self) -> float | None:
        self.cpu = None if self.cpu is None else self.cpu + self.cost_s
        return self.cpu

    def check(self) -> None:
        if self.broken:
            raise DemoError(self.broken)


def status(*revisions: tuple[str, int, int, int], phase: str = "Idle") -> dict[str, Any]:
    return {
        "revisions": [
            {"name": n, "readyReplicas": r, "desiredReplicas": d, "weight": w}
            for n, r, d, w in revisions
        ],
        "rollout": {"phase": phase},
    }


def test_the_recorder_keeps_what_the_target_said_with_times_from_the_load() -> None:
    target = Memory()
    target.doc = status(("cost-v1", 1, 2, 100), phase="Progressing")
    target.sig = {"rps": 12.5, "latencyMs": {"p99": 80.0}, "cpuUtilization": 64.0}
    target.pending = [{"time": 1_000.5, "type": "Normal", "reason": "Scaled", "message": "m"}]
    seen: list[dict[str, Any]] = []
    recorder = Recorder(target, t0=1_000.0, phase=lambda: ("scale-up", 25.0), on_event=seen.append)
    recorder.sample()
    recorder.sample()  # the event is not seen twice
    first = recorder.samples[0]
    assert (first.phase, first.offered_rps, first.rps, first.p99_ms) == ("scale-up", 25.0, 12.5, 80)
    assert first.cpu_utilization == 64.0 and first.rollout == "Progressing"
    assert first.revisions == {"cost-v1": {"ready": 1, "desired": 2, "weight": 100}}
    assert (
        recorder.events
        == seen
        == [{"t": 0.5, "type": "Normal", "reason": "Scaled", "message": "m"}]
    )


def test_missing_signals_read_as_none() -> None:
    assert p99_of({}) is None and p99_of({"latencyMs": None}) is None
    assert p99_of({"latencyMs": {"p99": 12}}) == 12.0
    assert revisions_of({}) == {}


@pytest.mark.parametrize(
    ("message", "up"),
    [
        ("total replicas 1 -> 3 (cpu)", True),
        ("total replicas 3 -> 1 (cpu)", False),
        ("total replicas x -> 1", False),
        ("weights 20/80", False),
    ],
)
def test_a_scaled_event_says_whether_the_count_rose(message: str, up: bool) -> None:
    assert scaled_up(message) is up


def sample(t: float, p99: float | None) -> Sample:
    return Sample(t, "scale-up", 25.0, 20.0, p99, None, "Idle", {})


def test_step_figures_are_the_first_scale_up_and_five_samples_under_the_slo() -> None:
    events = [
        {"t": 5.0, "reason": "Scaled", "message": "total replicas 1 -> 2 (before the step)"},
        {"t": 18.0, "reason": "Scaled", "message": "total replicas 2 -> 1 (down)"},
        {"t": 19.5, "reason": "Scaled", "message": "total replicas 1 -> 3 (cpu)"},
    ]
    # Under the SLO at once (ignored: within 2 s of the step), over, under for 4, over,
    # then under for 5 from t=24.
    p99s = [100, 100, 900, 900, 100, 100, 100, 100, 900, 100, 100, 100, 100, 100, 100]
    samples = [sample(15.0 + i, v) for i, v in enumerate(p99s)]
    decision, recovered = step_figures(events, samples, t_step=15.0, slo_ms=250)
    assert decision == pytest.approx(4.5)
    assert recovered == pytest.approx(24.0 - 15.0)
    assert step_figures([], [sample(16, None)], 15.0, 250) == (None, None)


def test_capacity_is_the_first_sample_with_more_ready_replicas_than_at_the_step() -> None:
    def ready(t: float, *counts: int) -> Sample:
        revisions = {f"cost-v{i}": {"ready": n} for i, n in enumerate(counts)}
        return Sample(t, "scale-up", 25.0, 20.0, None, None, "Idle", revisions)

    samples = [ready(14, 2), ready(15, 2), ready(16, 1, 1), ready(17, 2), ready(19, 2, 1)]
    assert capacity_figure(samples, t_step=15.0) == pytest.approx(4.0)  # 16: 2 in all
    assert capacity_figure(samples[:4], t_step=15.0) is None
    assert capacity_figure(samples[2:], t_step=15.0) is None  # nothing sampled before it


def test_the_story_waits_names_what_it_waited_for_and_stops_when_the_runtime_does(
    tmp_path: Path,
) -> None:
    target = Memory()
    story = Story(DemoSettings(out=tmp_path), target, lambda line: None)
    with pytest.raises(DemoError, match=r"timed out after 0\.1 s waiting for Godot"):
        story.wait(lambda: False, 0.1, "Godot")
    # A timed-out wait says what the autoscaler last decided, in its own words.
    target.doc = status(("cost-v2", 3, 3, 100))
    target.doc["autoscaling"] = {"message": "burst memory: standing capacity for the peak"}
    with pytest.raises(DemoError, match=r"the scale-down: 3 replicas: burst memory: standing"):
        story.wait(lambda: False, 0.1, "the scale-down", story._decision)
    target.doc = {}
    with pytest.raises(DemoError, match=r"0 replicas: no decision recorded"):
        story.wait(lambda: False, 0.1, "the scale-down", story._decision)
    target.broken = "the controller exited (1); see controller.log"
    with pytest.raises(DemoError, match="controller exited"):
        story.wait(lambda: False, 30, "anything")


def test_settled_and_steady_read_the_targets_status_and_signals(tmp_path: Path) -> None:
    target = Memory()
    story = Story(DemoSettings(out=tmp_path, base_rps=8.0, slo_ms=250), target, print)
    target.doc = status(("cost-v1", 2, 3, 100))
    target.sig = {"rps": 40.0, "latencyMs": {"p99": 100.0}}
    assert not story._settled()  # one replica not ready yet
    target.doc = status(("cost-v1", 3, 3, 100))
    assert story._settled()
    target.sig = {"rps": 40.0, "latencyMs": {"p99": 300.0}}
    assert not story._settled()  # over the SLO
    target.doc = status(("cost-v1", 1, 1, 100))
    target.sig = {"rps": 7.0}
    assert story._steady_at_base()
    target.sig = {"rps": 5.0}
    assert not story._steady_at_base()  # not at the base load yet


def result(tmp_path: Path) -> DemoResult:
    phases = [
        PhaseResult("scale-up", 15, 40, "settled", requests=900, failures=30, model_failures=30),
        PhaseResult("canary v2", 40, 120, "Completed"),
        PhaseResult("failing v3", 120, 200, "Aborted"),
        PhaseResult("scale-down", 200, 240, "scaled down", requests=200),
    ]
    samples = [
        Sample(float(t), "x", 25.0, 20.0, 100.0, 50.0, "Idle", {"cost-v1": {"ready": 1}})
        for t in range(5)
    ]
    return DemoResult(
        settings=DemoSettings(out=tmp_path / "out"),
        where="a test",
        phases=phases,
        samples=samples,
        events=[{"t": 3.0, "type": "Normal", "reason": "Scaled", "message": "1 -> 2"}],
        step_t=15.0,
        decision_s=2.5,
        recovered_s=None,
        wall_s=300.0,
        setup_s=60.0,
        notes=["pods: created to Ready in 7 s"],
    )


def test_the_report_names_the_runtime_every_figure_and_the_notes(tmp_path: Path) -> None:
    done = result(tmp_path)
    report.write_report(done)
    assert done.report is not None and done.plot is not None and done.plot.exists()
    text = done.report.read_text()
    assert "Measured on a test" in text and "(60 s of set-up)" in text
    assert "| scale-up | 15-40 s | settled | 900 | 30 (30 by the model, 0 other) |" in text
    assert "first scale-up decision: 2.5 s" in text and "(and staying 5 s): not seen" in text
    assert "- pods: created to Ready in 7 s" in text
    assert "| 3 | Scaled | 1 -> 2 |" in text
    assert (done.settings.out / "samples.json").exists()


def test_the_pace_lowers_the_base_load_and_raises_the_slo_only_where_needed_and_not_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []
    target = Memory()
    story = Story(DemoSettings(out=tmp_path, base_rps=8.0, slo_ms=250), target, said.append)
    monkeypatch.setattr(story, "_time_requests", lambda: (100.0, None))  # 10 req/s a replica
    story.pace()
    assert (story.settings.base_rps, story.settings.slo_ms) == (2.5, 500.0)
    assert target.slo == 500.0  # the service's latency signal moved too
    assert "base load 2.5 req/s, not 8" in said[-1] and "SLO 500 ms, not 250" in said[-1]
    # Given on the command line: kept as given.
    target = Memory()
    settings = DemoSettings(out=tmp_path, base_rps=8.0, slo_ms=250, pace_rate=False)
    story = Story(settings, target, said.append)
    monkeypatch.setattr(story, "_time_requests", lambda: (100.0, None))
    story.pace()
    assert (story.settings.base_rps, story.settings.slo_ms) == (8.0, 500.0)
    # A fast machine: the defaults stand.
    story = Story(DemoSettings(out=tmp_path, base_rps=8.0, slo_ms=250), target, said.append)
    monkeypatch.setattr(story, "_time_requests", lambda: (20.0, None))
    story.pace()
    assert (story.settings.base_rps, story.settings.slo_ms) == (8.0, 250)
    assert said[-1].endswith("defaults kept")


def test_where_the_target_reads_cpu_the_pace_sizes_by_the_cpu_request_over_a_requests_cost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []
    target = Memory()
    settings = DemoSettings(out=tmp_path, base_rps=5.0, slo_ms=250, cpu="250m")
    story = Story(settings, target, said.append)
    # 32 ms alone, 54 ms of CPU (two threads): a 250m replica serves 4.6 req/s, not 31.
    monkeypatch.setattr(story, "_time_requests", lambda: (32.0, 0.054))
    story.pace()
    assert story.settings.base_rps == 1.6  # 35 % of 0.25 / 0.054
    assert story.settings.slo_ms == 250  # 5 x 32 ms is less
    assert "costs 54 ms of CPU" in said[-1] and "~4.6 req/s" in said[-1]
    assert (cores("250m"), cores("2"), cores("1500m")) == (0.25, 2.0, 1.5)


def test_the_cost_of_a_request_is_the_cpu_the_timed_requests_added(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import http.server
    import threading

    monkeypatch.setattr(story_module, "PACE_PROBE_GAP_S", 0.05)
    arrived: list[float] = []

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            arrived.append(time.perf_counter())
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        target = Memory()
        target.front_url = lambda: f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[method-assign]
        target.cpu, target.cost_s = 10.0, 0.75  # each read adds 0.75 s
        median_ms, cost = Story(DemoSettings(out=tmp_path), target, print)._time_requests()
        assert median_ms > 0
        assert cost == pytest.approx(0.75 / 15)  # two reads, 15 timed requests apart
        # Paced, not back to back: a burst of probes read as a surge (burst memory).
        # The median gap: one request the busy test machine delays shortens the gap after
        # it (0.045 s seen under -n 4), a burst would make every gap a few milliseconds.
        gaps = [b - a for a, b in itertools.pairwise(arrived)]
        assert len(arrived) == 18 and statistics.median(gaps) >= 0.05 * 0.9, gaps
        target.cpu = None
        assert Story(DemoSettings(out=tmp_path), target, print)._time_requests()[1] is None
    finally:
        server.shutdown()
