"""Replay a ScalingPolicy's test trace: the pure core of ``servectl policy test``.

The CLI reads ``policies/<name>.yaml`` and ``policies/tests/<name>.yaml`` and hands the
parsed documents to :func:`run_policy_tests`, which compiles the policy, evaluates it
on every step and compares the result with the step's expectation. Nothing here
raises on a bad document: compile errors and malformed steps are reported, so one
run shows every problem. docs/policies.md documents the test file format.

A trace is a timeline: the state a step's evaluation returns is the state the next
step starts from, unless that step sets ``state`` itself.
"""

from __future__ import annotations

import copy
import datetime as _dt
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from servectl.autoscaling import cel_policy, snapshot

API_VERSION: Final = "servectl.io/v1alpha1"
POLICY_KIND: Final = "ScalingPolicy"

#: Every step's snapshot is its partial snapshot merged onto this one (JSON form,
#: docs/snapshot.md). Monday 2024-06-10 12:00:00 UTC, four healthy replicas, every
#: signal present and comfortably inside typical targets.
DEFAULT_SNAPSHOT: Final[Mapping[str, Any]] = {
    "time": 1718020800.0,
    "replicas": {"current": 4, "ready": 4, "min": 1, "max": 20},
    "signals": {
        "cpu_utilization": 50.0,
        "cpu_usage_cores": 2.0,
        "gpu_duty_cycle": 60.0,
        "rps": 200.0,
        "concurrency": 4.0,
        "error_rate": 0.0,
        "latency_ms": {"p50": 40.0, "p90": 70.0, "p99": 100.0},
        "age_s": 1.0,
    },
    "rollout": {"phase": "Idle", "step": 0, "canary_weight": 0},
}

_STEP_KEYS: Final = frozenset({"name", "snapshot", "recommended", "params", "state", "expect"})
_EXPECT_KEYS: Final = frozenset({"replicas", "reason", "state", "error"})
_TEST_DOC_KEYS: Final = frozenset({"policy", "snapshot", "params", "steps"})


class PolicyDocumentError(ValueError):
    """A ScalingPolicy document is malformed; the message names the field."""


@dataclass(frozen=True)
class PolicyDocument:
    """A parsed ScalingPolicy: its name, compiled expression and default params."""

    name: str
    description: str
    policy: cel_policy.CompiledPolicy
    params: Mapping[str, float]


@dataclass(frozen=True)
class StepOutcome:
    """One step of a trace. ``index`` is the 0-based position in ``steps``.

    ``actual`` is ``{"replicas", "reason", "state"}``, ``{"error": message}`` when the
    policy failed at run time, or None when the step could not run (malformed).
    ``problems`` says what did not match, one line each; empty when it passed.
    """

    index: int
    name: str
    passed: bool
    expected: Mapping[str, Any]
    actual: Mapping[str, Any] | None
    problems: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"steps[{self.index}] {self.name}"


@dataclass(frozen=True)
class PolicyTestReport:
    """The outcome of one test trace. ``errors`` are whole-run problems (the policy
    does not compile, the document is malformed); a run with any passes nothing."""

    policy: str
    steps: tuple[StepOutcome, ...] = ()
    errors: tuple[str, ...] = field(default=())

    @property
    def passed(self) -> bool:
        return not self.errors and bool(self.steps) and all(s.passed for s in self.steps)

    @property
    def failures(self) -> tuple[StepOutcome, ...]:
        return tuple(s for s in self.steps if not s.passed)

    @property
    def summary(self) -> str:
        """One line: ``"9 steps: 9 passed, 0 failed"``, or the first whole-run error."""
        if self.errors:
            more = f" (+{len(self.errors) - 1} more)" if len(self.errors) > 1 else ""
            return f"error: {self.errors[0]}{more}"
        failed = len(self.failures)
        return f"{len(self.steps)} steps: {len(self.steps) - failed} passed, {failed} failed"

    def lines(self) -> list[str]:
        """The detail under :attr:`summary`: whole-run errors, then one line per step
        with what did not match indented under a failing one."""
        out = [f"error: {error}" for error in self.errors]
        for step in self.steps:
            out.append(f"{'ok  ' if step.passed else 'FAIL'} {step.label}")
            out.extend(f"     {problem}" for problem in step.problems)
        return out


# ----------------------------------------------------------------------------- documents


def _number_map(value: object, where: str) -> dict[str, float]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PolicyDocumentError(f"{where}: expected a map of names to numbers")
    out: dict[str, float] = {}
    for name, number in value.items():
        if (
            not isinstance(name, str)
            or isinstance(number, bool)
            or not isinstance(number, int | float)
            or not math.isfinite(number)
        ):
            raise PolicyDocumentError(f"{where}.{name}: expected a finite number, got {number!r}")
        out[name] = float(number)
    return out


def read_policy_document(doc: Mapping[str, Any]) -> PolicyDocument:
    """Parse and compile a ScalingPolicy document (already loaded from YAML or JSON).

    Raises :class:`PolicyDocumentError` for a malformed document and
    :class:`cel_policy.PolicyCompileError` for an expression that does not compile.
    """
    if not isinstance(doc, Mapping):
        raise PolicyDocumentError("expected a ScalingPolicy document (a map)")
    if doc.get("apiVersion") != API_VERSION:
        raise PolicyDocumentError(
            f"apiVersion: expected {API_VERSION}, got {doc.get('apiVersion')!r}"
        )
    if doc.get("kind") != POLICY_KIND:
        raise PolicyDocumentError(f"kind: expected {POLICY_KIND}, got {doc.get('kind')!r}")
    metadata = doc.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if not isinstance(name, str) or not name:
        raise PolicyDocumentError("metadata.name: required")
    spec = doc.get("spec")
    if not isinstance(spec, Mapping):
        raise PolicyDocumentError("spec: required, with cel (and optionally params, description)")
    expression = spec.get("cel")
    if not isinstance(expression, str):
        raise PolicyDocumentError("spec.cel: required, the policy's CEL expression as a string")
    description = spec.get("description", "")
    params = _number_map(spec.get("params"), "spec.params")
    compiled = cel_policy.compile_expression(expression)
    missing = sorted(compiled.params_read - set(params))
    if missing:
        raise PolicyDocumentError(
            f"spec.params: the expression reads {', '.join('params.' + m for m in missing)} "
            "but spec.params does not set it"
        )
    return PolicyDocument(name, str(description or ""), compiled, params)


# ----------------------------------------------------------------------------- steps


class _StepError(ValueError):
    """A malformed step; reported on that step, the run goes on."""


def merged(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """``overlay`` on ``base``: maps merge key by key, any other value replaces
    (so ``latency_ms: null`` or ``{p99: null}`` removes measurements)."""
    out: dict[str, Any] = copy.deepcopy(dict(base))
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _as_unix_seconds(value: object) -> object:
    """Test files may write ``time`` as an ISO 8601 string or a YAML timestamp
    (a time without a zone is UTC); the snapshot's JSON form takes seconds."""
    moment: _dt.datetime | None = None
    if isinstance(value, _dt.datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise _StepError(f"snapshot.time: {value!r} is not ISO 8601 nor seconds") from None
    if moment is None:
        return value
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.UTC)
    return moment.timestamp()


def _step_snapshot(base: Mapping[str, Any], partial: object) -> snapshot.Snapshot:
    if partial is None:
        partial = {}
    if not isinstance(partial, Mapping):
        raise _StepError("snapshot: expected a map (a partial snapshot, docs/snapshot.md)")
    doc = merged(base, partial)
    doc["time"] = _as_unix_seconds(doc.get("time"))
    try:
        return snapshot.from_dict(doc)
    except snapshot.SnapshotError as error:
        raise _StepError(f"snapshot.{error}") from None


def _expectation(raw: object) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise _StepError("expect: required, a map with replicas (and optionally reason, state)")
    unknown = sorted(str(k) for k in set(raw) - _EXPECT_KEYS)
    if unknown:
        raise _StepError(
            f"expect: unknown key(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(sorted(_EXPECT_KEYS))}"
        )
    if "error" in raw:
        if not isinstance(raw["error"], str) or set(raw) != {"error"}:
            raise _StepError("expect.error: a substring of the expected error, and nothing else")
        return dict(raw)
    replicas = raw.get("replicas")
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        raise _StepError(f"expect.replicas: required integer, got {replicas!r}")
    if "reason" in raw and raw["reason"] is not None and not isinstance(raw["reason"], str):
        raise _StepError("expect.reason: a substring of the expected reason, or null for none")
    if "state" in raw and not isinstance(raw["state"], Mapping):
        raise _StepError("expect.state: a map")
    return dict(raw)


def _compare(expected: Mapping[str, Any], result: cel_policy.PolicyResult) -> list[str]:
    problems: list[str] = []
    if result.replicas != expected["replicas"]:
        problems.append(f"replicas: expected {expected['replicas']}, got {result.replicas}")
    if "reason" in expected:
        want = expected["reason"]
        if want is None and result.reason is not None:
            problems.append(f"reason: expected none, got {result.reason!r}")
        elif want is not None and (result.reason is None or want not in result.reason):
            problems.append(f"reason: expected one containing {want!r}, got {result.reason!r}")
    if "state" in expected and dict(expected["state"]) != result.state:
        problems.append(f"state: expected {dict(expected['state'])!r}, got {result.state!r}")
    return problems


def _run_step(
    index: int,
    raw: object,
    document: PolicyDocument,
    base_snapshot: Mapping[str, Any],
    base_params: Mapping[str, float],
    state: dict[str, Any],
) -> tuple[StepOutcome, dict[str, Any]]:
    name = f"step {index}"
    expected: dict[str, Any] = {}
    try:
        if not isinstance(raw, Mapping):
            raise _StepError("expected a map with snapshot, recommended and expect")
        name = str(raw.get("name", name))
        unknown = sorted(str(k) for k in set(raw) - _STEP_KEYS)
        if unknown:
            raise _StepError(
                f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(_STEP_KEYS))}"
            )
        expected = _expectation(raw.get("expect"))
        recommended = raw.get("recommended")
        if isinstance(recommended, bool) or not isinstance(recommended, int) or recommended < 0:
            raise _StepError(f"recommended: required integer ≥ 0, got {recommended!r}")
        snap = _step_snapshot(base_snapshot, raw.get("snapshot"))
        try:
            params = {**base_params, **_number_map(raw.get("params"), "params")}
        except PolicyDocumentError as error:
            raise _StepError(str(error)) from None
        if "state" in raw:
            if not isinstance(raw["state"], Mapping):
                raise _StepError("state: expected a map")
            state = dict(raw["state"])
    except _StepError as error:
        return StepOutcome(index, name, False, expected, None, (f"malformed step: {error}",)), state

    try:
        result = document.policy.evaluate(snap, recommended, params, state)
    except cel_policy.PolicyRuntimeError as error:
        failure: dict[str, Any] = {"error": error.message}
        want = expected.get("error")
        if want is not None and want in error.message:
            return StepOutcome(index, name, True, expected, failure), state
        problem = (
            f"error: expected one containing {want!r}, got {error.message!r}"
            if want is not None
            else f"policy failed: {error.message}"
        )
        return StepOutcome(index, name, False, expected, failure, (problem,)), state

    actual = {"replicas": result.replicas, "reason": result.reason, "state": result.state}
    if "error" in expected:
        problems = [f"error: expected one containing {expected['error']!r}, got a result"]
    else:
        problems = _compare(expected, result)
    return (
        StepOutcome(index, name, not problems, expected, actual, tuple(problems)),
        result.state,
    )


def run_policy_tests(
    policy_doc: Mapping[str, Any], test_doc: Mapping[str, Any]
) -> PolicyTestReport:
    """Run a test trace against a ScalingPolicy; every problem ends up in the report."""
    name = "?"
    metadata = policy_doc.get("metadata") if isinstance(policy_doc, Mapping) else None
    if isinstance(metadata, Mapping) and isinstance(metadata.get("name"), str):
        name = metadata["name"]
    try:
        document = read_policy_document(policy_doc)
    except cel_policy.PolicyCompileError as error:
        return PolicyTestReport(name, errors=(f"spec.cel: {error}",))
    except PolicyDocumentError as error:
        return PolicyTestReport(name, errors=(str(error),))

    doc: Any = test_doc
    if isinstance(doc, list):  # a bare list of steps is accepted too
        doc = {"steps": doc}
    if not isinstance(doc, Mapping):
        return PolicyTestReport(name, errors=("test document: expected a map with steps",))
    errors: list[str] = []
    unknown = sorted(str(k) for k in set(doc) - _TEST_DOC_KEYS)
    if unknown:
        errors.append(
            f"test document: unknown key(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(sorted(_TEST_DOC_KEYS))}"
        )
    if "policy" in doc and doc["policy"] != document.name:
        errors.append(f"policy: the test is for {doc['policy']!r}, the policy is {document.name!r}")
    steps = doc.get("steps")
    if not isinstance(steps, list) or not steps:
        errors.append("steps: required, a non-empty list")
    base_snapshot: Mapping[str, Any] = DEFAULT_SNAPSHOT
    if doc.get("snapshot") is not None:
        if isinstance(doc["snapshot"], Mapping):
            base_snapshot = merged(DEFAULT_SNAPSHOT, doc["snapshot"])
        else:
            errors.append("snapshot: expected a map (merged onto the default for every step)")
    base_params: Mapping[str, float] = document.params
    try:
        base_params = {**document.params, **_number_map(doc.get("params"), "params")}
    except PolicyDocumentError as error:
        errors.append(str(error))
    if errors or not isinstance(steps, list):
        return PolicyTestReport(document.name, errors=tuple(errors))

    outcomes: list[StepOutcome] = []
    state: dict[str, Any] = {}
    for index, raw in enumerate(steps):
        outcome, state = _run_step(index, raw, document, base_snapshot, base_params, state)
        outcomes.append(outcome)
    return PolicyTestReport(document.name, tuple(outcomes))
