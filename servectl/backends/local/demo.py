"""``servectl demo``: the local runtime's whole story in about four minutes, measured.

It exports the demo SavedModels, starts the runtime, deploys ``cost_model`` v1, and then,
under a Locust load it applies itself:

1. **scale-up**: the load steps up ×5; the service scales out and p99 comes back under
   the SLO;
2. **canary**: v2 (a good version) rolls out under load, is analysed and promoted;
3. **rollback**: v3 (it fails 10 % of its requests) rolls out, fails its analysis and is
   rolled back automatically;
4. **scale-down**: the load goes back down and so do the replicas.

A :class:`Recorder` samples the store every second (replicas, weights, rps, p99, phase,
events) while it runs; :func:`write_report` turns that and Locust's own counts into a
Markdown report with a PNG timeline. Every figure in the report was measured in this run.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from servectl.backends.local.client import LocalClient
from servectl.loadtest import runner

SERVICE = "cost"
MODEL = "cost_model"
WARMUP_RAMP_S = 20.0
INJECTED = "injected failure"  # the text of v3's own failures (servectl.modelserver.demo)


class DemoError(RuntimeError):
    """The demo could not go on; the message says where and what to look at."""


@dataclass(frozen=True)
class DemoSettings:
    out: Path
    base_rps: float = 8.0
    step: float = 5.0
    slo_ms: float = 250.0
    cost: int = 400
    cpu: str = "500m"
    max_replicas: int = 4
    keep: bool = False

    @property
    def state_dir(self) -> Path:
        return self.out / "state"

    @property
    def models(self) -> Path:
        return self.out / "models"


def service_doc(settings: DemoSettings) -> dict[str, Any]:
    """The demo's ModelService: CPU and p99 signals, a canary judged on errors and p99."""
    return {
        "apiVersion": "servectl.io/v1alpha1",
        "kind": "ModelService",
        "metadata": {"name": SERVICE},
        "spec": {
            "model": {
                "name": MODEL,
                "basePath": str((settings.models / MODEL).resolve()),
                "version": 1,
            },
            "runtime": {"resources": {"cpu": settings.cpu, "memory": "1Gi"}},
            "autoscaling": {
                "minReplicas": 1,
                "maxReplicas": settings.max_replicas,
                "signals": [
                    {"type": "cpu", "targetUtilization": 70},
                    {"type": "latency", "percentile": 99, "targetMs": settings.slo_ms},
                ],
                "behavior": {"scaleDown": {"stabilizationSeconds": 20}},
                # A local replica serves ~5 s after it starts (docs/local-runtime.md); the
                # engine projects a rising load over this lead time.
                "coldStartSeconds": 6,
            },
            "rollout": {
                "strategy": "canary",
                "steps": [
                    {"setWeight": 20},
                    {"analysis": {}},
                    {"setWeight": 50},
                    {"analysis": {}},
                    {"setWeight": 100},
                ],
                "analysis": {
                    "interval": "10s",
                    "minSamples": 40,
                    "maxExtensions": 6,
                    "checks": [
                        {"metric": "errorRate", "max": 0.02},
                        {"metric": "latencyP99", "maxRatioToStable": 2.0},
                    ],
                },
                "drainSeconds": 5,
            },
        },
    }


# ----------------------------------------------------------------------------- recording


@dataclass
class Sample:
    t: float  # seconds since the demo's load began
    phase: str
    offered_rps: float
    rps: float | None
    p99_ms: float | None
    cpu_utilization: float | None
    rollout: str
    revisions: dict[str, dict[str, int]]  # name -> ready, desired, weight


def _last_cycle(client: LocalClient) -> dict[str, Any]:
    """The demo service's last cycle as the controller recorded it ({} before the first)."""
    cycle = client.last_cycle("default", SERVICE)
    return cycle.record if cycle is not None else {}


@dataclass
class Recorder:
    """Samples the store every ``every_s`` seconds from a thread (start/stop)."""

    client_dir: Path
    t0: float
    phase: Callable[[], tuple[str, float]]  # the demo's phase and offered rps now
    every_s: float = 1.0
    samples: list[Sample] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    on_event: Callable[[dict[str, Any]], None] | None = None
    on_sample: Callable[[Sample], None] | None = None
    _last_whole: int = -1

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="demo-recorder", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        client = LocalClient(self.client_dir)
        last_event = 0
        try:
            while not self._stop.is_set():
                with contextlib.suppress(Exception):  # a busy store: try again next second
                    last_event = self._sample(client, last_event)
                self._stop.wait(self.every_s)
        finally:
            client.close()

    def _sample(self, client: LocalClient, last_event: int) -> int:
        now = time.time()
        phase, offered = self.phase()
        status = client.status("default", SERVICE) or {}
        signals = _last_cycle(client).get("service", {})
        self.samples.append(
            Sample(
                t=round(now - self.t0, 2),
                phase=phase,
                offered_rps=offered,
                rps=signals.get("rps"),
                p99_ms=(signals.get("latencyMs") or {}).get("p99"),
                cpu_utilization=signals.get("cpuUtilization"),
                rollout=str((status.get("rollout") or {}).get("phase", "Idle")),
                revisions={
                    r["name"]: {
                        "ready": int(r.get("readyReplicas", 0)),
                        "desired": int(r.get("desiredReplicas", 0)),
                        "weight": int(r.get("weight", 0)),
                    }
                    for r in status.get("revisions", [])
                },
            )
        )
        sample = self.samples[-1]
        if self.on_sample is not None and int(sample.t) // 5 != self._last_whole:
            self._last_whole = int(sample.t) // 5
            self.on_sample(sample)
        for event in client.events("default", SERVICE, since_id=last_event):
            record = {
                "t": round(event.time - self.t0, 2),
                "type": event.type,
                "reason": event.reason,
                "message": event.message,
            }
            self.events.append(record)
            last_event = event.id
            if self.on_event is not None:
                self.on_event(record)
        return last_event


# ----------------------------------------------------------------------------- the run


@dataclass
class PhaseResult:
    name: str
    start_t: float
    end_t: float
    outcome: str
    requests: int = 0
    failures: int = 0
    model_failures: int = 0  # failures the model itself returned (v3's injected ones)
    p99_ms: float | None = None


@dataclass
class DemoResult:
    settings: DemoSettings
    phases: list[PhaseResult]
    samples: list[Sample]
    events: list[dict[str, Any]]
    step_t: float
    decision_s: float | None  # load step -> first scale-up decision
    recovered_s: float | None  # load step -> p99 back under the SLO (and staying)
    wall_s: float
    report: Path | None = None
    plot: Path | None = None


class _Load:
    """One Locust run in a thread, stopped on demand."""

    def __init__(self, settings: DemoSettings, name: str, trace: Sequence[tuple[float, float]]):
        self.stop_event = threading.Event()
        out = settings.out / "loadtest"
        out.mkdir(parents=True, exist_ok=True)
        trace_file = out / f"{name}.csv"
        trace_file.write_text("t,rps\n" + "".join(f"{t:g},{r:g}\n" for t, r in trace))
        rest_port = _front_port(settings)
        self.config = runner.LoadTestConfig(
            model=MODEL,
            target=f"http://127.0.0.1:{rest_port}",
            shape="trace",
            trace=trace_file,
            duration_s=None,
            out_dir=out,
            name=name,
        )
        self.result: runner.LoadTestResult | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"locust-{name}", daemon=True)

    def _run(self) -> None:
        try:
            self.result = runner.run(self.config, stop=self.stop_event)
        except BaseException as exc:  # reported by the demo
            self.error = exc

    def start(self) -> None:
        self.thread.start()

    def finish(self) -> runner.LoadTestResult:
        self.stop_event.set()
        self.thread.join(timeout=60)
        if self.error is not None:
            raise DemoError(f"the load test failed: {self.error}")
        if self.result is None:
            raise DemoError("the load test did not finish")
        return self.result


def _front_port(settings: DemoSettings) -> int:
    client = LocalClient(settings.state_dir)
    try:
        record = client.record("default", SERVICE)
    finally:
        client.close()
    if record is None:
        raise DemoError("the service has no front port yet")
    return record.rest_port


def _counts(result: runner.LoadTestResult) -> tuple[int, int, int, float | None]:
    total = result.summary.total
    model = sum(f.occurrences for f in result.summary.failures if INJECTED in f.message)
    return total.requests, total.failures, model, total.p99_ms


class Demo:
    """The demo's steps; ``say`` gets a line of progress at a time."""

    def __init__(self, settings: DemoSettings, say: Callable[[str], None]) -> None:
        self.settings = settings
        self.say = say
        self.controller: subprocess.Popen[bytes] | None = None
        self.client: LocalClient | None = None
        self._phase = ("setup", 0.0)
        self.t0 = time.time()

    # -- set-up

    def export_models(self) -> None:
        marker = self.settings.models / MODEL / "4" / "saved_model.pb"
        if marker.exists():
            self.say(f"demo models already in {self.settings.models}")
            return
        from servectl.modelserver.demo import export_demo

        self.say(f"exporting the demo SavedModels to {self.settings.models} ...")
        export_demo(self.settings.models, cost=self.settings.cost, force=True)

    def start_runtime(self) -> LocalClient:
        state = self.settings.state_dir
        state.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "servectl", "down", "--state-dir", str(state)],
            capture_output=True,
            check=False,
            timeout=120,
        )
        for stale in ("state.db", "state.db-wal", "state.db-shm"):
            with contextlib.suppress(FileNotFoundError):
                (state / stale).unlink()
        client = LocalClient(state)
        started = time.time()
        log = (state / "controller.log").open("ab")
        self.controller = subprocess.Popen(
            [sys.executable, "-m", "servectl", "controller", "--state-dir", str(state)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        pid = self.controller.pid

        def ticked() -> bool:
            beat = client.store.get_setting("heartbeat") or {}
            return beat.get("pid") == pid and float(beat.get("time", 0)) >= started

        self._wait(ticked, 60, "the controller's first tick")
        self.client = client
        self.say(f"runtime up (controller pid {pid}, state {state})")
        return client

    def deploy(self) -> None:
        from servectl.api import validation

        assert self.client is not None
        service = validation.load_model_service(service_doc(self.settings))
        self.client.deploy(service)
        self.say("deployed cost v1 (min 1, max 4, 0.5 core each); waiting for it to serve ...")
        self._wait(lambda: self._ready().get(f"{SERVICE}-v1", 0) >= 1, 120, "cost-v1 to be ready")

    # -- helpers

    def _ready(self) -> dict[str, int]:
        assert self.client is not None
        status = self.client.status("default", SERVICE) or {}
        return {r["name"]: int(r.get("readyReplicas", 0)) for r in status.get("revisions", [])}

    def _status(self) -> dict[str, Any]:
        assert self.client is not None
        return self.client.status("default", SERVICE) or {}

    def _wait(self, check: Callable[[], bool], timeout_s: float, what: str) -> float:
        started = time.monotonic()
        while not check():
            if self.controller is not None and self.controller.poll() is not None:
                raise DemoError(
                    f"the controller exited ({self.controller.returncode}) waiting for {what}; "
                    f"see {self.settings.state_dir / 'controller.log'}"
                )
            if time.monotonic() - started > timeout_s:
                raise DemoError(f"timed out after {timeout_s:g} s waiting for {what}")
            time.sleep(0.5)
        return time.monotonic() - started

    def phase(self) -> tuple[str, float]:
        return self._phase

    def _rollout(self, version: int, until: Sequence[str], timeout_s: float) -> str:
        from servectl.rollout.machine import Op

        assert self.client is not None
        self.client.rollout("default", SERVICE, Op.START, version)
        # Wait for the controller to take the command, then for the end.
        self._wait(
            lambda: (self._status().get("rollout") or {}).get("canaryVersion") == version,
            30,
            f"the rollout to v{version} to start",
        )
        self._wait(
            lambda: (self._status().get("rollout") or {}).get("phase") in until,
            timeout_s,
            f"the rollout to v{version} to finish",
        )
        return str((self._status().get("rollout") or {}).get("phase"))

    # -- the story

    def run(self) -> DemoResult:
        s = self.settings
        started = time.monotonic()
        self.export_models()
        self.start_runtime()
        try:
            self.deploy()
            return self._story(started)
        finally:
            if not s.keep:
                self.stop()

    def _story(self, started: float) -> DemoResult:
        s = self.settings
        base, high = s.base_rps, s.base_rps * s.step
        # Warm-up: the base load until the service is steady on it (first requests, first
        # scrapes and rates settle), so the step is the only change the story shows.
        # A ramp, not a step from nothing: the autoscaler projects a rising load over a
        # cold start, and a jump from idle would read as the start of a burst.
        self.say(f"warm-up: ramping to {base:g} req/s, until the service is steady on it ...")
        warmup = _Load(s, "warmup", [(0, 1), (WARMUP_RAMP_S, base), (3600, base)])
        warmup.start()
        try:
            time.sleep(WARMUP_RAMP_S)
            self._wait(self._steady_at_base, 60, "the service to be steady on the base load")
        finally:
            self._finish(warmup)
        self.t0 = time.time()
        recorder = Recorder(s.state_dir, self.t0, self.phase)
        recorder.on_event = self._event
        recorder.on_sample = self._sample
        recorder.start()
        phases: list[PhaseResult] = []
        step_at = 15.0
        try:
            # 1. A load step x5, held through the two rollouts.
            self._phase = ("baseline", base)
            load = _Load(s, "high", [(0, base), (step_at - 1, base), (step_at, high), (3600, high)])
            load.start()
            self.say(f"load: {base:g} req/s, stepping to {high:g} req/s at t={step_at:g} s")
            time.sleep(step_at)
            self._phase = ("scale-up", high)
            t_step = time.time() - self.t0
            self._wait(lambda: self._settled(s.slo_ms), 120, "the scale-up to settle")
            phases.append(PhaseResult("scale-up", t_step, time.time() - self.t0, "settled"))
            # 2. A good canary under that load.
            self._phase = ("canary v2", high)
            t = time.time() - self.t0
            self.say("rollout: v2 (a good version) as a canary, analysed at 20 % and 50 %")
            outcome = self._rollout(2, ("Completed", "Aborted", "Degraded"), 180)
            phases.append(PhaseResult("canary v2", t, time.time() - self.t0, outcome))
            # 3. A failing version: rolled back automatically.
            self._phase = ("failing v3", high)
            t = time.time() - self.t0
            self.say("rollout: v3 (fails 10 % of its requests)")
            outcome = self._rollout(3, ("Aborted", "Completed", "Degraded"), 180)
            phases.append(PhaseResult("failing v3", t, time.time() - self.t0, outcome))
            high_result = self._finish(load)
            # 4. The load goes back down.
            self._phase = ("scale-down", base)
            t = time.time() - self.t0
            self.say(f"load: back to {base:g} req/s")
            low = _Load(s, "low", [(0, base), (3600, base)])
            low.start()
            try:
                self._wait(lambda: self._total_desired() <= 1, 120, "the scale-down")
            finally:
                low_result = self._finish(low)
            phases.append(PhaseResult("scale-down", t, time.time() - self.t0, "scaled down"))
            time.sleep(3)  # the timeline shows the last change land
        finally:
            recorder.stop()
        _attribute(phases, high_result, low_result)
        decision_s, recovered_s = _step_figures(recorder, t_step, s.slo_ms)
        result = DemoResult(
            settings=s,
            phases=phases,
            samples=recorder.samples,
            events=recorder.events,
            step_t=t_step,
            decision_s=decision_s,
            recovered_s=recovered_s,
            wall_s=time.monotonic() - started,
        )
        write_report(result)
        return result

    def _finish(self, load: _Load) -> runner.LoadTestResult:
        result = load.finish()
        if result.forced_stop:
            self.say(
                f"warning: Locust ({load.config.name}) did not stop within "
                f"{runner.STOP_GRACE_S:g} s and was killed; its counts are those of its last "
                f"report, a second or more before (log: {result.log_file})"
            )
        return result

    def _event(self, event: Mapping[str, Any]) -> None:
        # Weights move a few percent a tick while capacity comes up: the status line
        # every few seconds shows them; the events worth a line are the decisions.
        if event["reason"] != "WeightsChanged":
            self.say(f"  {event['reason']}: {event['message']}")

    def _sample(self, sample: Sample) -> None:
        revisions = "  ".join(
            f"{name} {r['ready']}/{r['desired']} @{r['weight']}%"
            for name, r in sorted(sample.revisions.items())
        )
        p99 = f"{sample.p99_ms:.0f} ms" if sample.p99_ms is not None else "-"
        rps = f"{sample.rps:.0f}" if sample.rps is not None else "-"
        self.say(
            f"t={sample.t:4.0f} s  {sample.phase:<11} load {sample.offered_rps:3.0f} req/s  "
            f"served {rps:>3}  p99 {p99:>7}  {revisions}"
        )

    def _settled(self, slo_ms: float) -> bool:
        status = self._status()
        revisions = status.get("revisions", [])
        desired = sum(int(r.get("desiredReplicas", 0)) for r in revisions)
        ready = sum(int(r.get("readyReplicas", 0)) for r in revisions)
        assert self.client is not None
        cycle = _last_cycle(self.client)
        p99 = (cycle.get("service", {}).get("latencyMs") or {}).get("p99")
        return desired >= 2 and ready == desired and p99 is not None and p99 < slo_ms

    def _steady_at_base(self) -> bool:
        assert self.client is not None
        rps = _last_cycle(self.client).get("service", {}).get("rps")
        return (
            self._total_desired() == 1
            and rps is not None
            and abs(rps - self.settings.base_rps) < 0.25 * self.settings.base_rps
        )

    def _total_desired(self) -> int:
        return sum(int(r.get("desiredReplicas", 0)) for r in self._status().get("revisions", []))

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        if self.controller is not None and self.controller.poll() is None:
            os.kill(self.controller.pid, signal.SIGTERM)
            try:
                self.controller.wait(timeout=90)
            except subprocess.TimeoutExpired:
                self.controller.kill()
        self.say("runtime stopped (servectl demo --keep leaves it running)")


def _attribute(
    phases: Sequence[PhaseResult], high: runner.LoadTestResult, low: runner.LoadTestResult
) -> None:
    """Locust's counts per load run: the high load spans scale-up and both rollouts."""
    requests, failures, model, p99 = _counts(high)
    for phase in phases[:3]:
        phase.p99_ms = p99
    phases[0].requests, phases[0].failures = requests, failures
    phases[0].model_failures = model
    requests, failures, model, p99 = _counts(low)
    phases[-1].requests, phases[-1].failures, phases[-1].model_failures = requests, failures, model
    phases[-1].p99_ms = p99


def _scaled_up(message: str) -> bool:
    """A Scaled event's message ("total replicas 1 -> 3 (...)") says the count rose."""
    try:
        before, after = message.split("total replicas ", 1)[1].split(" (", 1)[0].split(" -> ")
        return int(after) > int(before)
    except (IndexError, ValueError):
        return False


def _step_figures(
    recorder: Recorder, t_step: float, slo_ms: float
) -> tuple[float | None, float | None]:
    """Load step -> first scale-up event; load step -> p99 under the SLO for 5 samples."""
    decision = next(
        (
            e["t"] - t_step
            for e in recorder.events
            if e["reason"] == "Scaled" and e["t"] >= t_step and _scaled_up(e["message"])
        ),
        None,
    )
    recovered = None
    run = 0
    for sample in recorder.samples:
        if sample.t < t_step:
            continue
        if sample.p99_ms is not None and sample.p99_ms < slo_ms and sample.t > t_step + 2:
            run += 1
            if run == 5:
                recovered = sample.t - 4 - t_step
                break
        else:
            run = 0
    return decision, recovered


# ----------------------------------------------------------------------------- the report


def write_report(result: DemoResult) -> None:
    out = result.settings.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "samples.json").write_text(
        json.dumps(
            {"samples": [asdict(s) for s in result.samples], "events": result.events}, indent=1
        )
    )
    try:
        result.plot = plot_timeline(result, out / "timeline.png")
    except ImportError:
        result.plot = None
    result.report = out / "report.md"
    result.report.write_text(report_markdown(result))


def summary_rows(result: DemoResult) -> list[list[str]]:
    rows = []
    for p in result.phases:
        caused = p.failures - p.model_failures
        rows.append(
            [
                p.name,
                f"{p.start_t:.0f}-{p.end_t:.0f} s",
                p.outcome,
                str(p.requests) if p.requests else "",
                (f"{p.failures} ({p.model_failures} by the model, {caused} other)")
                if p.requests
                else "",
            ]
        )
    return rows


def report_markdown(result: DemoResult) -> str:
    s = result.settings
    lines = [
        "# servectl demo: what happened",
        "",
        f"Measured on this machine ({os.cpu_count()} cores) in {result.wall_s:.0f} s. "
        f"Load: {s.base_rps:g} req/s, stepping x{s.step:g}; SLO p99 {s.slo_ms:g} ms; "
        f"replicas of {s.cpu} CPU each, at most {s.max_replicas}.",
        "",
        "| phase | time | outcome | requests | failed |",
        "|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in summary_rows(result)]
    lines += [
        "",
        "Requests and failures are Locust's: the first load run spans the scale-up and both "
        'rollouts, the second the scale-down. Failures "by the model" are v3\'s own injected '
        'errors (HTTP 400); "other" would be servectl\'s (routing to an unready replica, '
        "a request cut by a scale-down).",
        "",
        "- load step to the first scale-up decision: "
        + (f"{result.decision_s:.1f} s" if result.decision_s is not None else "none"),
        f"- load step to p99 back under {s.slo_ms:g} ms (and staying 5 s): "
        + (f"{result.recovered_s:.1f} s" if result.recovered_s is not None else "not seen"),
        "",
    ]
    if result.plot is not None:
        lines += [f"![timeline]({result.plot.name})", ""]
    lines += ["## Decisions", "", "| t (s) | event | why |", "|---|---|---|"]
    lines += [f"| {e['t']:.0f} | {e['reason']} | {e['message']} |" for e in result.events]
    lines.append("")
    return "\n".join(lines)


def plot_timeline(result: DemoResult, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = result.samples
    t = [x.t for x in samples]
    names = sorted({name for x in samples for name in x.revisions})
    fig, axes = plt.subplots(4, 1, figsize=(11, 10), sharex=True)
    load_ax, rep_ax, weight_ax, lat_ax = axes
    load_ax.plot(t, [x.offered_rps for x in samples], color="0.5", label="offered")
    load_ax.plot(t, [x.rps if x.rps is not None else float("nan") for x in samples], label="served")
    load_ax.set_ylabel("req/s")
    load_ax.legend(loc="upper left", fontsize=8)
    for name in names:
        ready = [x.revisions.get(name, {}).get("ready", 0) for x in samples]
        desired = [x.revisions.get(name, {}).get("desired", 0) for x in samples]
        (line,) = rep_ax.step(t, ready, where="post", label=f"{name} ready")
        rep_ax.step(t, desired, where="post", linestyle="--", color=line.get_color(), alpha=0.6)
        weight_ax.step(
            t,
            [x.revisions.get(name, {}).get("weight", 0) for x in samples],
            where="post",
            label=name,
        )
    rep_ax.set_ylabel("replicas\n(dashed: desired)")
    rep_ax.legend(loc="upper left", fontsize=8)
    weight_ax.set_ylabel("weight %")
    weight_ax.legend(loc="upper left", fontsize=8)
    lat_ax.plot(
        t, [x.p99_ms if x.p99_ms is not None else float("nan") for x in samples], label="p99"
    )
    lat_ax.axhline(result.settings.slo_ms, color="red", linestyle="--", label="SLO")
    lat_ax.set_yscale("log")
    lat_ax.set_ylabel("p99 ms")
    lat_ax.set_xlabel("seconds since the load began")
    lat_ax.legend(loc="upper left", fontsize=8)
    for phase in result.phases:
        for ax in axes:
            ax.axvline(phase.start_t, color="0.7", linewidth=0.8)
        load_ax.text(
            phase.start_t + 1,
            0.97,
            phase.name,
            transform=load_ax.get_xaxis_transform(),
            fontsize=8,
            va="top",
        )
    fig.suptitle("servectl demo (measured)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def phase_table(phases: Sequence[PhaseResult]) -> list[Mapping[str, Any]]:
    return [asdict(p) for p in phases]
