"""The demo's story, the same on every runtime, and what it measures.

Under a Locust load it applies itself through the target's front (HAProxy on the local
runtime, the Gateway on a cluster):

1. **scale-up**: the load steps up x5; the service scales out and p99 comes back under
   the SLO;
2. **canary**: v2 (a good version) rolls out under load, is analysed and promoted;
3. **rollback**: v3 (it fails 10 % of its requests) rolls out, fails its analysis and is
   rolled back automatically;
4. **scale-down**: the load goes back down and so do the replicas.

A :class:`Recorder` samples the target every second (replicas, weights, rps, p99, phase,
events) while it runs; servectl.demo.report turns that and Locust's own counts into a
Markdown report with a PNG timeline. Every figure in the report was measured in this run.

A :class:`Target` is what the story needs from a runtime, and nothing else: this module
imports none (import-linter keeps it so).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import statistics
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from servectl.loadtest import runner

SERVICE = "cost"
MODEL = "cost_model"
WARMUP_RAMP_S = 20.0
STEP_AT_S = 15.0
HANDOVER_S = 2.0
"""Seconds two Locust runs overlap, once the new one sends, when one phase's load takes over
from the last one's (the rate is their sum meanwhile, at most for a rate window's fifth). A
gap with no traffic between them re-armed the autoscaler's surge detector, and the load
coming back read as a second surge: burst memory then held standing capacity for the last
10 minutes' peak, and the scale-down never came (a local demo, 2026-12-05)."""
INJECTED = "injected failure"  # the text of v3's own failures (servectl.modelserver.demo)
PACE_BUSY = 0.25
"""The largest share of one replica's capacity the base load takes, unless --base-rps. At
35 % the latency signal asked for 1.03 replicas on the base load (a scale-out and back
during the warm-up, then the step's scale-out read as a re-grow: burst memory)."""
PACE_CPU_BUSY = 0.35
"""The same, where the target reads the CPU a request costs (its capacity is then its CPU
request over that, which a request's time alone underrates: TensorFlow uses two threads)."""
PACE_SLO_SERVICE_TIMES = 5.0
"""The SLO is at least this many service times of one request alone, unless --slo-ms."""
PACE_SAMPLES = 15
PACE_PROBE_GAP_S = 1.0
"""Seconds between the pace probe's requests' starts: at most one request a second, the
rate the warm-up ramp starts from. Sent back to back (~22 req/s) the probe read as a surge,
the warm-up ramp after it as a second one, and burst memory held two replicas through the
demo's scale-down, 4 minutes later (CI, 2026-12-05)."""


def cores(quantity: str) -> float:
    """A Kubernetes CPU quantity in cores: ``"250m"`` is 0.25, ``"2"`` is 2."""
    return float(quantity[:-1]) / 1000.0 if quantity.endswith("m") else float(quantity)


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
    pace_rate: bool = True
    """Lower ``base_rps`` where one replica would be over PACE_BUSY busy on it (see pace)."""
    pace_slo: bool = True
    """Raise ``slo_ms`` to PACE_SLO_SERVICE_TIMES service times where that is more."""
    standby: int = 0
    """Warm standby replicas per serving revision (``spec.autoscaling.standby``; 0: none)."""

    @property
    def models(self) -> Path:
        return self.out / "models"


ROLLOUT: dict[str, Any] = {
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
}
"""The demo's rollout: a canary at 20 % then 50 %, judged on errors and p99 each time."""


def autoscaling(settings: DemoSettings, cold_start_s: float) -> dict[str, Any]:
    """CPU and p99 signals; ``cold_start_s``: how long a new replica takes to serve there
    (the engine projects a rising load over it)."""
    doc: dict[str, Any] = {
        "minReplicas": 1,
        "maxReplicas": settings.max_replicas,
        "signals": [
            {"type": "cpu", "targetUtilization": 70},
            {"type": "latency", "percentile": 99, "targetMs": settings.slo_ms},
        ],
        "behavior": {"scaleDown": {"stabilizationSeconds": 20}},
        "coldStartSeconds": cold_start_s,
    }
    if settings.standby:
        doc["standby"] = {"replicas": settings.standby}
    return doc


class Target(Protocol):
    """A runtime with the demo's service deployed on it. Methods may be called from the
    recorder's thread and the story's at once."""

    where: str
    """Where the story runs, in words ("the local runtime", "a real one-node cluster")."""

    def front_url(self) -> str:
        """The service's REST front on 127.0.0.1, where Locust sends its requests."""
        ...

    def status(self) -> dict[str, Any]:
        """The ModelService's status as its JSON (``revisions``, ``rollout``, ...)."""
        ...

    def signals(self) -> dict[str, Any]:
        """The service's signals as servectl reads them now: ``rps``,
        ``latencyMs: {p99: ...}``, ``cpuUtilization`` (each absent or None if unknown)."""
        ...

    def new_events(self) -> list[dict[str, Any]]:
        """Events about the service since the last call: ``time`` (epoch seconds),
        ``type``, ``reason``, ``message``."""
        ...

    def start_rollout(self, version: int) -> None:
        """Roll the service out to ``version`` as a user would there."""
        ...

    def set_slo(self, slo_ms: float) -> None:
        """Change the service's p99 target (its latency signal) as a user would there."""
        ...

    def cpu_seconds(self) -> float | None:
        """CPU seconds the service's replicas have used so far (their cgroups), or None
        where the target cannot read them."""
        ...

    def check(self) -> None:
        """Raise DemoError if the runtime stopped (the message says where to look)."""
        ...


def wait_until(
    check: Callable[[], bool],
    timeout_s: float,
    what: str,
    alive: Callable[[], None],
    why: Callable[[], str] | None = None,
) -> float:
    """Poll ``check`` every 0.5 s until true; the seconds it took. ``alive`` raises when
    the runtime stopped; DemoError names ``what`` after ``timeout_s``, and what ``why``
    says the state is then."""
    started = time.monotonic()
    while not check():
        alive()
        if time.monotonic() - started > timeout_s:
            said = f": {why()}" if why is not None else ""
            raise DemoError(f"timed out after {timeout_s:g} s waiting for {what}{said}")
        time.sleep(0.5)
    return time.monotonic() - started


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


def revisions_of(status: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    return {
        r["name"]: {
            "ready": int(r.get("readyReplicas", 0)),
            "desired": int(r.get("desiredReplicas", 0)),
            "weight": int(r.get("weight", 0)),
        }
        for r in status.get("revisions", [])
    }


def p99_of(signals: Mapping[str, Any]) -> float | None:
    value = (signals.get("latencyMs") or {}).get("p99")
    return None if value is None else float(value)


@dataclass
class Recorder:
    """Samples the target every ``every_s`` seconds from a thread (start/stop)."""

    target: Target
    t0: float
    phase: Callable[[], tuple[str, float]]  # the demo's phase and offered rps now
    every_s: float = 1.0
    samples: list[Sample] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    on_event: Callable[[dict[str, Any]], None] | None = None
    on_sample: Callable[[Sample], None] | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _last_whole: int = -1

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="demo-recorder", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # a busy runtime: try again next second
                self.sample()
            self._stop.wait(self.every_s)

    def sample(self) -> None:
        now = time.time()
        phase, offered = self.phase()
        status = self.target.status()
        signals = self.target.signals()
        self.samples.append(
            Sample(
                t=round(now - self.t0, 2),
                phase=phase,
                offered_rps=offered,
                rps=signals.get("rps"),
                p99_ms=p99_of(signals),
                cpu_utilization=signals.get("cpuUtilization"),
                rollout=str((status.get("rollout") or {}).get("phase", "Idle")),
                revisions=revisions_of(status),
            )
        )
        sample = self.samples[-1]
        if self.on_sample is not None and int(sample.t) // 5 != self._last_whole:
            self._last_whole = int(sample.t) // 5
            self.on_sample(sample)
        for event in self.target.new_events():
            record = {
                "t": round(float(event["time"]) - self.t0, 2),
                "type": event["type"],
                "reason": event["reason"],
                "message": event["message"],
            }
            self.events.append(record)
            if self.on_event is not None:
                self.on_event(record)


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
    where: str
    phases: list[PhaseResult]
    samples: list[Sample]
    events: list[dict[str, Any]]
    step_t: float
    decision_s: float | None  # load step -> first scale-up decision
    recovered_s: float | None  # load step -> p99 back under the SLO (and staying)
    wall_s: float  # the whole demo, set-up included
    setup_s: float = 0.0  # of which set-up (builds, runtime start, first deploy)
    notes: list[str] = field(default_factory=list)  # lines the report adds, per runtime
    capacity_s: float | None = None  # load step -> the first replica it added serving
    report: Path | None = None
    plot: Path | None = None


class Load:
    """One Locust run in a thread against ``url``, stopped on demand."""

    def __init__(self, out: Path, url: str, name: str, trace: Sequence[tuple[float, float]]):
        self.stop_event = threading.Event()
        out.mkdir(parents=True, exist_ok=True)
        trace_file = out / f"{name}.csv"
        trace_file.write_text("t,rps\n" + "".join(f"{t:g},{r:g}\n" for t, r in trace))
        self.config = runner.LoadTestConfig(
            model=MODEL,
            target=url,
            shape="trace",
            trace=trace_file,
            duration_s=None,
            out_dir=out,
            name=name,
        )
        self.result: runner.LoadTestResult | None = None
        self.error: BaseException | None = None
        self.sending = threading.Event()
        """Set once Locust has sent its first requests."""
        self.started_at: float | None = None
        """When Locust's run began (epoch seconds): the trace's time 0."""
        self.thread = threading.Thread(target=self._run, name=f"locust-{name}", daemon=True)

    def _progress(self, progress: runner.Progress) -> None:
        if self.started_at is None:
            self.started_at = time.time() - progress.elapsed_s
        if progress.requests > 0:
            self.sending.set()

    def _run(self) -> None:
        try:
            self.result = runner.run(
                self.config, stop=self.stop_event, progress=self._progress, progress_every_s=1.0
            )
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


def _counts(result: runner.LoadTestResult) -> tuple[int, int, int, float | None]:
    total = result.summary.total
    model = sum(f.occurrences for f in result.summary.failures if INJECTED in f.message)
    return total.requests, total.failures, model, total.p99_ms


class Story:
    """The demo's four phases against ``target``; ``say`` gets a line of progress at a
    time."""

    def __init__(self, settings: DemoSettings, target: Target, say: Callable[[str], None]):
        self.settings = settings
        self.target = target
        self.say = say
        self._phase = ("setup", 0.0)
        self.t0 = time.time()

    def phase(self) -> tuple[str, float]:
        return self._phase

    # -- helpers

    def wait(
        self,
        check: Callable[[], bool],
        timeout_s: float,
        what: str,
        why: Callable[[], str] | None = None,
    ) -> float:
        return wait_until(check, timeout_s, what, self.target.check, why)

    def _decision(self) -> str:
        """The autoscaler's last decision in its own words (why the replicas are what
        they are)."""
        autoscaling = self.target.status().get("autoscaling") or {}
        total = self._total_desired()
        return f"{total} replicas: {autoscaling.get('message') or 'no decision recorded'}"

    def _rollout_doc(self) -> dict[str, Any]:
        return dict(self.target.status().get("rollout") or {})

    def _rollout(self, version: int, timeout_s: float) -> str:
        self.target.start_rollout(version)
        # Wait for the controller to take the change, then for the end.
        self.wait(
            lambda: self._rollout_doc().get("canaryVersion") == version,
            30,
            f"the rollout to v{version} to start",
        )
        self.wait(
            lambda: self._rollout_doc().get("phase") in ("Completed", "Aborted", "Degraded"),
            timeout_s,
            f"the rollout to v{version} to finish",
        )
        return str(self._rollout_doc().get("phase"))

    def _total_desired(self) -> int:
        return sum(r["desired"] for r in revisions_of(self.target.status()).values())

    def _settled(self) -> bool:
        revisions = revisions_of(self.target.status()).values()
        desired = sum(r["desired"] for r in revisions)
        ready = sum(r["ready"] for r in revisions)
        p99 = p99_of(self.target.signals())
        return desired >= 2 and ready == desired and p99 is not None and p99 < self.settings.slo_ms

    def _steady_at_base(self) -> bool:
        rps = self.target.signals().get("rps")
        base = self.settings.base_rps
        return self._total_desired() == 1 and rps is not None and abs(rps - base) < 0.25 * base

    def _load(self, name: str, trace: Sequence[tuple[float, float]]) -> Load:
        load = Load(self.settings.out / "loadtest", self.target.front_url(), name, trace)
        load.start()
        return load

    def _handover(
        self,
        running: list[Load],
        leader: Load,
        name: str,
        trace: Sequence[tuple[float, float]],
        sending: Callable[[], None] = lambda: None,
    ) -> tuple[Load, runner.LoadTestResult]:
        """Start Locust run ``name``; once it sends, call ``sending`` and stop ``leader``
        HANDOVER_S later: the load never stops between phases. The new run and what the old
        one counted."""
        follower = self._load(name, trace)
        running.append(follower)
        follower.sending.wait(timeout=30)  # Locust's start: a second or two
        sending()
        time.sleep(HANDOVER_S)
        running.remove(leader)
        return follower, self._finish(leader)

    def _stepped(self, rate: float) -> Callable[[], None]:
        def stepped() -> None:
            self._phase = ("scale-up", rate)

        return stepped

    def _finish(self, load: Load) -> runner.LoadTestResult:
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

    def _time_requests(self) -> tuple[float, float | None]:
        """PACE_SAMPLES requests sent one at a time, PACE_PROBE_GAP_S apart (after 3 to
        warm up): their median time in ms (one replica's, with no queue) and the CPU seconds
        each cost the service's replicas (None where the target cannot tell)."""
        body = json.dumps({"instances": [[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]]}).encode()
        url = f"{self.target.front_url()}/v1/models/{MODEL}:predict"
        took = []
        used: float | None = None
        began = -PACE_PROBE_GAP_S  # the first request goes at once
        for i in range(PACE_SAMPLES + 3):
            if i == 3:
                used = self.target.cpu_seconds()
            request = urllib.request.Request(
                url, data=body, headers={"Content-Type": "application/json"}
            )
            time.sleep(max(0.0, PACE_PROBE_GAP_S - (time.perf_counter() - began)))
            began = time.perf_counter()
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    answer.read()
            except OSError as exc:
                raise DemoError(f"a prediction through {url} failed: {exc}") from None
            if i >= 3:
                took.append(time.perf_counter() - began)
        now = self.target.cpu_seconds() if used is not None else None
        cost = (now - used) / PACE_SAMPLES if now is not None and used is not None else None
        return statistics.median(took) * 1000.0, cost if cost and cost > 0 else None

    def pace(self) -> None:
        """Size the load and the SLO to this machine. A request's CPU cost differs between
        machines by more than twice: a base load that keeps one replica a third busy on
        one saturates it on another, and then the story is not the one told (the
        service scales out before the step; p99 never comes under the SLO)."""
        s = self.settings
        if not (s.pace_rate or s.pace_slo):
            return
        service_ms, cost_s = self._time_requests()
        slo = float(round(PACE_SLO_SERVICE_TIMES * service_ms))
        if cost_s is not None:
            # A replica with a CPU request and no limit (a pod) may use idle cores, but
            # servectl sizes it by its request: that is its capacity.
            capacity = cores(s.cpu) / cost_s
            fits = max(1.0, round(PACE_CPU_BUSY * capacity, 1))
            said = (
                f"pace: a request costs {cost_s * 1000:.0f} ms of CPU here ({service_ms:.0f} ms "
                f"alone; a replica at {s.cpu} serves ~{capacity:.1f} req/s)"
            )
        else:
            fits = max(1.0, round(PACE_BUSY * 1000.0 / service_ms, 1))
            said = (
                f"pace: a request alone takes {service_ms:.0f} ms here (one replica serves "
                f"~{1000.0 / service_ms:.0f} req/s)"
            )
        changes = []
        if s.pace_rate and fits < s.base_rps:
            changes.append(f"base load {fits:g} req/s, not {s.base_rps:g} (--base-rps sets it)")
            s = dataclasses.replace(s, base_rps=fits)
        if s.pace_slo and slo > s.slo_ms:
            changes.append(f"SLO {slo:g} ms, not {s.slo_ms:g} (--slo-ms sets it)")
            s = dataclasses.replace(s, slo_ms=slo)
            self.target.set_slo(slo)
        self.settings = s
        self.say(f"{said}: {'; '.join(changes)}" if changes else f"{said}: defaults kept")

    # -- the story

    def run(self, started: float) -> DemoResult:
        """The four phases; ``started`` (monotonic): when the demo began, set-up included."""
        self.pace()
        s = self.settings
        base, high = s.base_rps, s.base_rps * s.step
        setup_s = time.monotonic() - started
        # Warm-up: the base load until the service is steady on it (first requests, first
        # scrapes and rates settle), so the step is the only change the story shows.
        # A ramp, not a step from nothing: the autoscaler projects a rising load over a
        # cold start, and a jump from idle would read as the start of a burst.
        self.say(f"warm-up: ramping to {base:g} req/s, until the service is steady on it ...")
        running: list[Load] = []  # stopped, whatever happens
        try:
            warmup = self._load("warmup", [(0, 1), (WARMUP_RAMP_S, base), (3600, base)])
            running.append(warmup)
            time.sleep(WARMUP_RAMP_S)
            self.wait(
                self._steady_at_base,
                90,
                "the service to be steady on the base load",
                lambda: f"{self._decision()}; {self.target.signals().get('rps')} req/s read",
            )
            self.target.new_events()  # the set-up's events are not the story's
            self.t0 = time.time()
            recorder = Recorder(self.target, self.t0, self.phase)
            recorder.on_event = self._event
            recorder.on_sample = self._sample
            recorder.start()
            phases: list[PhaseResult] = []
            try:
                # 1. A load step x5, held through the two rollouts. The baseline is the
                # warm-up's own run, not a new one: a handover there doubled the rate read
                # for its overlap and the panic rule asked a second replica before the step
                # (2026-12-05). The step's run takes over at the step, where the overlap
                # adds the base load to the high one (1/step more) for HANDOVER_S.
                self._phase = ("baseline", base)
                self.say(f"load: {base:g} req/s, stepping to {high:g} req/s at t~{STEP_AT_S:g} s")
                time.sleep(STEP_AT_S)
                load, _ = self._handover(
                    running, warmup, "high", [(0, high), (3600, high)], self._stepped(high)
                )
                t_step = (load.started_at or time.time()) - self.t0
                self.wait(self._settled, 150, "the scale-up to settle")
                phases.append(PhaseResult("scale-up", t_step, time.time() - self.t0, "settled"))
                # 2. A good canary under that load.
                self._phase = ("canary v2", high)
                t = time.time() - self.t0
                self.say("rollout: v2 (a good version) as a canary, analysed at 20 % and 50 %")
                outcome = self._rollout(2, 240)
                phases.append(PhaseResult("canary v2", t, time.time() - self.t0, outcome))
                # 3. A failing version: rolled back automatically.
                self._phase = ("failing v3", high)
                t = time.time() - self.t0
                self.say("rollout: v3 (fails 10 % of its requests)")
                outcome = self._rollout(3, 240)
                phases.append(PhaseResult("failing v3", t, time.time() - self.t0, outcome))
                # 4. The load goes back down.
                self._phase = ("scale-down", base)
                t = time.time() - self.t0
                self.say(f"load: back to {base:g} req/s")
                low, high_result = self._handover(running, load, "low", [(0, base), (3600, base)])
                self.wait(lambda: self._total_desired() <= 1, 180, "the scale-down", self._decision)
                running.remove(low)
                low_result = self._finish(low)
                phases.append(PhaseResult("scale-down", t, time.time() - self.t0, "scaled down"))
                time.sleep(3)  # the timeline shows the last change land
            finally:
                recorder.stop()
        finally:
            for left in running:
                with contextlib.suppress(DemoError):
                    left.finish()
        attribute(phases, high_result, low_result)
        decision_s, recovered_s = step_figures(recorder.events, recorder.samples, t_step, s.slo_ms)
        return DemoResult(
            settings=s,
            where=self.target.where,
            phases=phases,
            samples=recorder.samples,
            events=recorder.events,
            step_t=t_step,
            decision_s=decision_s,
            recovered_s=recovered_s,
            capacity_s=capacity_figure(recorder.samples, t_step),
            wall_s=time.monotonic() - started,
            setup_s=setup_s,
        )


def attribute(
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


def scaled_up(message: str) -> bool:
    """A Scaled event's message ("total replicas 1 -> 3 (...)") says the count rose."""
    try:
        before, after = message.split("total replicas ", 1)[1].split(" (", 1)[0].split(" -> ")
        return int(after) > int(before)
    except (IndexError, ValueError):
        return False


def capacity_figure(samples: Sequence[Sample], t_step: float) -> float | None:
    """Load step -> the first sample with more ready replicas than at the step (a sample a
    second: a cold start's replica, or a standby one taken), or None if none came."""
    before = [s for s in samples if s.t <= t_step]
    if not before:
        return None
    at_step = sum(r.get("ready", 0) for r in before[-1].revisions.values())
    for sample in samples:
        if sample.t > t_step and sum(r.get("ready", 0) for r in sample.revisions.values()) > (
            at_step
        ):
            return sample.t - t_step
    return None


def step_figures(
    events: Sequence[Mapping[str, Any]], samples: Sequence[Sample], t_step: float, slo_ms: float
) -> tuple[float | None, float | None]:
    """Load step -> first scale-up event; load step -> p99 under the SLO for 5 samples."""
    decision = next(
        (
            float(e["t"]) - t_step
            for e in events
            if e["reason"] == "Scaled" and e["t"] >= t_step and scaled_up(e["message"])
        ),
        None,
    )
    recovered = None
    run = 0
    for sample in samples:
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
