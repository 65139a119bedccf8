"""The ready-made policies in policies/: each compiles and passes its own test trace,
and the trace runner really fails when an expectation is wrong."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from servectl.autoscaling import cel_policy, policytest

POLICIES = Path(__file__).resolve().parents[3] / "policies"
POLICY_FILES = sorted(POLICIES.glob("*.yaml"))


def load(path: Path) -> Any:
    with path.open(encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def trace_for(path: Path) -> Any:
    return load(POLICIES / "tests" / path.name)


def test_the_library_has_the_documented_policies() -> None:
    names = {path.stem for path in POLICY_FILES}
    assert {"latency-slo", "gpu-duty-cycle", "business-hours", "cost-cap"} <= names


@pytest.mark.parametrize("path", POLICY_FILES, ids=lambda p: p.stem)
def test_policy_document_is_well_formed(path: Path) -> None:
    doc = load(path)
    parsed = policytest.read_policy_document(doc)
    assert parsed.name == path.stem
    assert parsed.description
    assert parsed.params, "a library policy exposes its numbers as params"
    assert parsed.policy.params_read <= set(parsed.params)


@pytest.mark.parametrize("path", POLICY_FILES, ids=lambda p: p.stem)
def test_policy_passes_its_trace(path: Path) -> None:
    report = policytest.run_policy_tests(load(path), trace_for(path))
    assert report.passed, "\n".join([report.summary, *report.lines()])


@pytest.mark.parametrize("path", POLICY_FILES, ids=lambda p: p.stem)
def test_trace_covers_both_branches_and_a_missing_signal(path: Path) -> None:
    trace = trace_for(path)
    report = policytest.run_policy_tests(load(path), trace)
    reasons = {step.actual["reason"] for step in report.steps if step.actual is not None}
    assert len(reasons) >= 2, f"every step took the same branch: {reasons}"

    def has_null(value: Any) -> bool:
        if value is None:
            return True
        if isinstance(value, dict):
            return any(has_null(v) for v in value.values())
        return False

    assert any(has_null(step.get("snapshot", {}).get("signals")) for step in trace["steps"]), (
        "no step with a missing signal"
    )


# ----------------------------------------------------------------------------- the runner

LATENCY = POLICIES / "latency-slo.yaml"


def test_a_wrong_expectation_is_reported_as_a_failure() -> None:
    trace = copy.deepcopy(trace_for(LATENCY))
    trace["steps"][2]["expect"]["replicas"] = 99
    report = policytest.run_policy_tests(load(LATENCY), trace)
    assert not report.passed
    (failure,) = report.failures
    assert failure.index == 2
    assert failure.name == trace["steps"][2]["name"]
    assert failure.expected["replicas"] == 99
    assert failure.actual is not None and failure.actual["replicas"] == 8
    assert failure.problems == ("replicas: expected 99, got 8",)
    assert "1 failed" in report.summary
    assert any(line.startswith("FAIL steps[2]") for line in report.lines())


def test_a_wrong_reason_is_reported() -> None:
    trace = {"steps": [{"recommended": 3, "expect": {"replicas": 3, "reason": "COST_CAP"}}]}
    report = policytest.run_policy_tests(load(LATENCY), trace)
    assert not report.passed
    assert "reason: expected one containing 'COST_CAP', got None" in report.failures[0].problems


def test_a_compile_error_is_reported_not_raised() -> None:
    doc = load(LATENCY)
    doc["spec"]["cel"] = "recommended +"
    report = policytest.run_policy_tests(doc, trace_for(LATENCY))
    assert not report.passed and not report.steps
    assert report.errors[0].startswith("spec.cel: line 1, column 14:")


def test_a_malformed_document_is_reported_not_raised() -> None:
    report = policytest.run_policy_tests({"kind": "ModelService"}, {"steps": []})
    assert not report.passed and report.errors
    doc = load(LATENCY)
    del doc["spec"]["params"]
    report = policytest.run_policy_tests(doc, trace_for(LATENCY))
    assert "params.targetMs" in report.errors[0]


def test_malformed_steps_are_reported_and_the_others_still_run() -> None:
    trace = {
        "steps": [
            {"name": "no recommended", "expect": {"replicas": 3}},
            {"recommended": 3, "expect": {"replicas": 3}},
            "not a map",
            {"recommended": 3, "expect": {"replicas": 3}, "snapshot": {"signals": {"qps": 1}}},
            {"recommended": 3, "expect": {"replicas": "3"}},
            {"recommended": 3, "expect": {"replicas": 3}, "typo": 1},
        ]
    }
    report = policytest.run_policy_tests(load(LATENCY), trace)
    passed = [step.passed for step in report.steps]
    assert passed == [False, True, False, False, False, False]
    assert report.steps[0].problems[0].startswith("malformed step: recommended")
    assert "qps" in report.steps[3].problems[0]
    assert "typo" in report.steps[5].problems[0]


def test_empty_or_mismatched_trace_is_an_error() -> None:
    assert not policytest.run_policy_tests(load(LATENCY), {"steps": []}).passed
    report = policytest.run_policy_tests(load(LATENCY), {"policy": "cost-cap", "steps": [{}]})
    assert "cost-cap" in report.errors[0]


def test_expected_runtime_errors_and_unexpected_ones() -> None:
    doc = load(LATENCY)
    no_target = {"targetMs": 0}
    doc["spec"]["cel"] = "int(signals.rps) / int(params.targetMs)"
    trace = {
        "steps": [
            {"recommended": 1, "params": no_target, "expect": {"error": "division by zero"}},
            {"recommended": 1, "params": no_target, "expect": {"replicas": 1}},
            {"recommended": 1, "expect": {"error": "division by zero"}},
        ]
    }
    report = policytest.run_policy_tests(doc, trace)
    assert [s.passed for s in report.steps] == [True, False, False]
    assert report.steps[1].problems[0].startswith("policy failed: division by zero")
    assert report.steps[1].actual == {
        "error": report.steps[1].problems[0][len("policy failed: ") :]
    }


def test_state_flows_from_step_to_step_unless_a_step_sets_it() -> None:
    doc = load(LATENCY)
    doc["spec"]["cel"] = '{"replicas": recommended, "state": {"n": has(state.n) ? state.n + 1 : 1}}'
    doc["spec"]["params"] = {}
    trace = {
        "steps": [
            {"recommended": 1, "expect": {"replicas": 1, "state": {"n": 1}}},
            {"recommended": 1, "expect": {"replicas": 1, "state": {"n": 2}}},
            {"recommended": 1, "state": {"n": 10}, "expect": {"replicas": 1, "state": {"n": 11}}},
            {"recommended": 1, "expect": {"replicas": 1, "state": {"n": 99}}},
        ]
    }
    report = policytest.run_policy_tests(doc, trace)
    assert [s.passed for s in report.steps] == [True, True, True, False]
    assert report.steps[3].problems == ("state: expected {'n': 99}, got {'n': 12}",)


def test_time_may_be_written_as_iso_8601_or_a_yaml_timestamp() -> None:
    business = POLICIES / "business-hours.yaml"
    trace = yaml.safe_load(
        """
        steps:
          - snapshot: {time: 2024-06-10T09:00:00Z}     # YAML timestamp, Monday
            recommended: 1
            expect: {replicas: 6}
          - snapshot: {time: "2024-06-10 20:00:00"}    # no zone: UTC
            recommended: 1
            expect: {replicas: 1}
          - snapshot: {time: "2024-06-10T09:00:00+02:00"}   # 07:00 UTC
            recommended: 1
            expect: {replicas: 1}
          - snapshot: {time: "yesterday"}
            recommended: 1
            expect: {replicas: 1}
        """
    )
    report = policytest.run_policy_tests(load(business), trace)
    assert [s.passed for s in report.steps] == [True, True, True, False]
    assert "ISO 8601" in report.steps[3].problems[0]


def test_the_default_snapshot_is_a_valid_snapshot_document() -> None:
    from servectl.autoscaling import snapshot

    snap = snapshot.from_dict(policytest.DEFAULT_SNAPSHOT)
    assert snap.replicas.current == 4 and snap.signals.latency(99) == 100.0
    activation = cel_policy.snapshot_activation(snap, 4)
    assert activation["time"]["weekday"] == 0 and activation["time"]["hour"] == 12


def test_merge_replaces_with_null_and_merges_maps() -> None:
    merged = policytest.merged(
        policytest.DEFAULT_SNAPSHOT,
        {"signals": {"rps": None, "latency_ms": {"p99": 300.0}}, "replicas": {"ready": 2}},
    )
    assert merged["signals"]["rps"] is None
    assert merged["signals"]["latency_ms"] == {"p50": 40.0, "p90": 70.0, "p99": 300.0}
    assert merged["replicas"] == {"current": 4, "ready": 2, "min": 1, "max": 20}
    assert policytest.DEFAULT_SNAPSHOT["signals"]["rps"] == 200.0  # not mutated
