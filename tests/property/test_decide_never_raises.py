"""Every policy decides on every snapshot ``from_dict`` accepts, and never raises.

For each policy servectl ships (its engine under several signal configurations and in
recommend mode, the HPA and KPA baselines, the engine wrapped by every ready-made CEL
policy in ``policies/`` and by a few inline ones), on broadly generated snapshot
documents (``tests/snapshot_strategies.py``: inf, NaN, huge, negative and zero numbers,
missing keys, empty pods, wrong types):

- ``snapshot.from_dict`` either returns a Snapshot or raises ``SnapshotError`` (its
  documented error), with a message that names a field;
- ``decide`` never raises, also when given back the state it returned on the previous
  snapshot (persisted as JSON, as the controller does), and the decision is sane:
  ``replicas`` an int within the bounds (the documented exceptions: recommend mode keeps
  the current count, HPA leaves a target scaled to zero alone, KPA holds the count
  without data), a ``Reason``, numbers JSON can carry (no NaN or infinity) in the
  decision and in the new state.

The policies are configured as ``servectl policy eval`` configures them without
``--spec``: the bounds are the first snapshot's ``replicas.min`` and ``replicas.max``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from servectl.autoscaling import config, engine, registry, snapshot
from servectl.autoscaling.cel_policy import compile_expression
from servectl.autoscaling.config import SignalTarget, SignalType
from servectl.autoscaling.decision import Decision, Reason
from servectl.autoscaling.policy import Policy
from tests.snapshot_strategies import NON_FINITE, numbers, snapshot_docs

REPO = Path(__file__).resolve().parents[2]

CPU = SignalTarget(SignalType.CPU, 70.0)
LATENCY = SignalTarget(SignalType.LATENCY, 150.0, 99.0)
RPS = SignalTarget(SignalType.RPS, 50.0)
CONCURRENCY = SignalTarget(SignalType.CONCURRENCY, 10.0)
GPU = SignalTarget(SignalType.GPU, 80.0)

SIGNAL_SETS: dict[str, tuple[SignalTarget, ...]] = {
    "cpu": (CPU,),
    "latency": (LATENCY,),
    "rps": (RPS,),
    "concurrency": (CONCURRENCY,),
    "gpu": (GPU,),
    "all": (CPU, LATENCY, RPS, CONCURRENCY, GPU),
}

INLINE_CEL = {
    "plus-one": "recommended + 1",
    "scaled-with-state": (
        '{"replicas": double(recommended) * 1.5, "reason": "SCALED",'
        ' "state": {"n": has(state.n) ? state.n + 1 : 1, "at": time.now}}'
    ),
    "divide-by-zero-double": "signals.rps.orDefault(0.0) / 0.0",
    "int-overflow": "int(signals.cpu_usage_cores.orDefault(1.0) * 1e300)",
    "huge-int": "replicas.max * 1000000000",
    "by-the-hour": "time.hour >= 8 && time.weekday <= 4 ? replicas.max : replicas.min",
    "missing-key": "signals.latency_ms.p99 > 100.0 ? replicas.current + 1 : recommended",
    "canary": '{"replicas": recommended + rollout.canary_weight, "reason": rollout.phase}',
}


def library_policies() -> dict[str, tuple[str, dict[str, float]]]:
    """The ready-made CEL policies: name -> (expression, params)."""
    found = {}
    for path in sorted((REPO / "policies").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        spec = doc["spec"]
        found[path.stem] = (spec["cel"], {k: float(v) for k, v in spec["params"].items()})
    return found


Builder = Callable[[int, int], Policy]


def _servectl(signals: tuple[SignalTarget, ...], **changes: Any) -> Builder:
    def build(low: int, high: int) -> Policy:
        cfg = config.AutoscalingConfig(
            min_replicas=low, max_replicas=high, signals=signals, **changes
        )
        return registry.build("servectl", cfg)

    return build


def _baseline(name: str, signals: tuple[SignalTarget, ...]) -> Builder:
    def build(low: int, high: int) -> Policy:
        cfg = config.AutoscalingConfig(min_replicas=low, max_replicas=high, signals=signals)
        return registry.build(name, cfg)

    return build


def _custom(name: str, expression: str, params: dict[str, float]) -> Builder:
    program = compile_expression(expression)

    def build(low: int, high: int) -> Policy:
        cfg = config.AutoscalingConfig(
            min_replicas=low, max_replicas=high, signals=(CPU, LATENCY, CONCURRENCY)
        )
        return registry.build("servectl", cfg, engine.CustomPolicy(name, program, params))

    return build


POLICIES: dict[str, Builder] = {
    **{f"servectl[{name}]": _servectl(signals) for name, signals in SIGNAL_SETS.items()},
    "servectl[recommend]": _servectl(SIGNAL_SETS["all"], mode=config.Mode.RECOMMEND),
    "hpa[cpu]": _baseline("hpa", (CPU,)),
    "hpa[all]": _baseline("hpa", SIGNAL_SETS["all"]),
    "kpa": _baseline("kpa", (CONCURRENCY,)),
    **{
        f"servectl+{name}": _custom(name, expression, params)
        for name, (expression, params) in library_policies().items()
    },
    **{f"servectl+{name}": _custom(name, cel, {}) for name, cel in INLINE_CEL.items()},
}


def check_decision(
    policy_name: str, snap: snapshot.Snapshot, decision: Decision, low: int, high: int
) -> None:
    """The contract of a decision, for a policy configured with bounds [low, high]."""
    where = f"{policy_name} on {snapshot.to_dict(snap)}: {decision}"
    assert type(decision.replicas) is int, where
    assert isinstance(decision.reason, Reason), where
    assert isinstance(decision.detail, str) and decision.detail, where
    current = snap.replicas.current
    if policy_name == "servectl[recommend]":
        assert decision.replicas == current, where
        assert decision.reason is Reason.RECOMMEND_ONLY, where
    elif policy_name.startswith("hpa"):
        # Kubernetes: a target scaled to zero by hand is left alone (scaling disabled).
        disabled = current == 0 and low != 0 and decision.replicas == 0
        assert disabled or low <= decision.replicas <= high, where
    elif policy_name == "kpa":
        # Knative: without data for a stable window there is no decision at all; its
        # bounds are [max(min, 1), max].
        holding = decision.reason is Reason.METRICS_MISSING and decision.replicas == current
        assert holding or max(low, 1) <= decision.replicas <= high, where
    else:
        assert low <= decision.replicas <= high, where
    assert decision.recommended is None or type(decision.recommended) is int, where
    # What status, events and `policy eval` print is strict JSON.
    json.dumps(decision.to_dict(), allow_nan=False)


def run_trace(policy_name: str, docs: list[dict[str, Any]]) -> None:
    """``servectl policy eval`` on a trace, minus the printing."""
    snaps = []
    for doc in docs:
        try:
            snaps.append(snapshot.from_dict(doc))
        except snapshot.SnapshotError as error:
            assert str(error), "a SnapshotError names the field"
            return
    first = snaps[0].replicas
    policy = POLICIES[policy_name](first.min, first.max)
    state = policy.initial_state()
    applied: int | None = None
    for snap in snaps:
        if applied is not None:
            snap = snap.with_replicas(current=applied)
        decision, state = policy.decide(snap, state)
        check_decision(policy_name, snap, decision, first.min, first.max)
        # Persisted between cycles as JSON (status, the local store, --show-state).
        state = json.loads(json.dumps(state, allow_nan=False))
        applied = decision.replicas


@st.composite
def traces(draw: st.DrawFn) -> list[dict[str, Any]]:
    """One to three snapshot documents a few seconds apart (sometimes not)."""
    docs = [draw(snapshot_docs)]
    for _ in range(draw(st.integers(0, 2))):
        doc = draw(snapshot_docs)
        before = docs[-1].get("time")
        if type(before) is float or (type(before) is int and abs(before) < 2**53):
            step = draw(st.sampled_from([2.0, 2.0, 15.0, 0.0, -1.0, 600.0]))
            doc["time"] = before + step
        docs.append(doc)
    return docs


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=traces())
@example(
    docs=[
        {
            "time": 1795444200.0,
            "replicas": {"current": 6, "ready": 6, "min": 1, "max": 50},
            "signals": {"rps": math.inf, "cpu_usage_cores": 10.4, "concurrency": 14.2},
        }
    ]
)
@example(docs=[{"time": 1.0, "replicas": {"current": 3}, "signals": {"cpu_usage_cores": 1e308}}])
@example(
    docs=[
        {
            "time": 100.0,
            "replicas": {"current": 2, "ready": 2, "max": 2**31 - 1},
            "signals": {"rps": 1e300, "cpu_usage_cores": 1e-300, "concurrency": 1e300},
            "pods": [],
        }
    ]
)
# Found by this test and a sweep of extreme values (each crashed the engine):
# a zero CPU per request learnt, then no ready replica (ZeroDivisionError);
@example(
    docs=[
        {
            "time": 100.0,
            "replicas": {"current": 2, "ready": 2},
            "signals": {"rps": 10.0, "cpu_usage_cores": 0.0, "concurrency": 1.0},
        },
        {
            "time": 102.0,
            "replicas": {"current": 2, "ready": 0},
            "signals": {"rps": 10.0, "cpu_usage_cores": 0.0, "concurrency": 100.0},
        },
    ]
)
# the largest double in flight: an infinite proposal (OverflowError in math.ceil);
@example(
    docs=[
        {
            "time": 100.0,
            "replicas": {"current": 5, "ready": 5},
            "signals": {"rps": 1000.0, "cpu_usage_cores": 5.0, "concurrency": 3.0},
        },
        {
            "time": 102.0,
            "replicas": {"current": 5, "ready": 0},
            "signals": {"rps": 0, "cpu_usage_cores": 0, "concurrency": 1.7976931348623157e308},
        },
    ]
)
# the largest double in CPU: an infinite latency sizing (OverflowError in queueing).
@example(
    docs=[
        {
            "time": 100.0,
            "replicas": {"current": 5, "ready": 5},
            "signals": {"rps": 1000.0, "cpu_usage_cores": 5.0, "concurrency": 3.0},
        },
        {
            "time": 102.0,
            "replicas": {"current": 5, "ready": 0},
            "signals": {"rps": 0, "cpu_usage_cores": 1.7976931348623157e308, "concurrency": 0},
        },
    ]
)
def test_decide_never_raises(docs: list[dict[str, Any]]) -> None:
    # Every policy on every example: generating the documents costs more than deciding.
    for policy_name in POLICIES:
        try:
            run_trace(policy_name, docs)
        except Exception as error:
            error.add_note(f"policy: {policy_name}")
            raise


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=st.lists(st.one_of(NON_FINITE, numbers(0.0, 1e4), st.none()), min_size=13, max_size=13),
    ready=st.integers(0, 8),
)
def test_snapshots_built_in_code_are_safe_too(values: list[float | None], ready: int) -> None:
    """The metrics assembly and the simulator build Snapshots directly, with floats:
    non-finite ones become missing there too, and the engine decides."""
    (util, usage, duty, rps, conc, err, p99, age, start, pod_cpu, request, pod_conc,
     pod_gpu) = values  # fmt: skip
    signals = snapshot.Signals(
        cpu_utilization=util,
        cpu_usage_cores=usage,
        gpu_duty_cycle=duty,
        rps=rps,
        concurrency=conc,
        latency_ms={} if p99 is None else {"p99": p99},
        error_rate=err,
        age_s=0.0 if age is None else age,
    )
    pod = snapshot.PodSample(
        name="pod-0",
        start_time=0.0 if start is None else start,
        cpu_usage_cores=pod_cpu,
        cpu_request_cores=1.0 if request is None else request,
        concurrency=pod_conc,
        gpu_duty_cycle=pod_gpu,
    )
    for value in (
        *(getattr(signals, f.name) for f in dataclasses.fields(signals) if f.name != "latency_ms"),
        *signals.latency_ms.values(),
        *(getattr(pod, f.name) for f in dataclasses.fields(pod) if f.name not in ("name", "ready")),
    ):
        assert value is None or not math.isnan(value), (signals, pod)
    assert all(math.isfinite(v) for v in signals.latency_ms.values())
    snap = snapshot.Snapshot(
        time=1_000.0,
        replicas=snapshot.Replicas(current=max(ready, 1), ready=ready, min=1, max=20),
        signals=signals,
        pods=(pod,),
    )
    for policy_name, build in POLICIES.items():
        policy = build(1, 20)
        decision, state = policy.decide(snap, policy.initial_state())
        check_decision(policy_name, snap, decision, 1, 20)
        json.dumps(state, allow_nan=False)
