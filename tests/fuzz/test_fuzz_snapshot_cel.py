"""Fuzz targets: snapshot parsing and CEL policy compilation never crash.

- ``snapshot.from_dict`` on arbitrary JSON trees, and on valid documents with an
  arbitrary tree grafted onto one field, raises nothing but ``SnapshotError``; what it
  accepts round-trips through ``to_dict``.
- ``cel_policy.compile_expression`` on arbitrary strings and near-valid expressions
  raises nothing but ``PolicyCompileError``; the static result check (``cel_types``)
  never raises; a compiled policy's evaluation raises nothing but
  ``PolicyRuntimeError``; the same text as a ScalingPolicy (``validation``) raises
  nothing but ``SpecError``, and as an analysis condition nothing but
  ``ConditionCompileError``.
- Deep nesting (10,000 levels) is a clear compile error, not a RecursionError, a hang
  or a crash of the Rust library (run in a child process, so a crash fails the test).

The generators are ``tests/snapshot_strategies.py``'s, shared with the property test
``tests/property/test_decide_never_raises.py``. ``HYPOTHESIS_PROFILE=fuzz`` runs them
for long (tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings

from servectl.api import conditions, validation
from servectl.autoscaling import cel_policy, cel_types, snapshot
from tests.snapshot_strategies import (
    cel_sources,
    grafted_docs,
    json_trees,
    snapshot_docs,
    valid_snapshot_docs,
)

REPO = Path(__file__).resolve().parents[2]
FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def parse_or_refuse(doc: Any) -> snapshot.Snapshot | None:
    try:
        snap = snapshot.from_dict(doc)
    except snapshot.SnapshotError as error:
        assert str(error)
        return None
    assert snapshot.from_dict(json.loads(json.dumps(snapshot.to_dict(snap)))) == snap
    return snap


@FUZZ
@given(json_trees)
def test_from_dict_on_any_json_tree(doc: Any) -> None:
    parse_or_refuse(doc)


@FUZZ
@given(grafted_docs())
def test_from_dict_on_a_document_with_a_grafted_tree(doc: Any) -> None:
    parse_or_refuse(doc)


@FUZZ
@given(snapshot_docs)
def test_from_dict_on_broad_documents(doc: Any) -> None:
    parse_or_refuse(doc)


def compile_or_refuse(source: str) -> cel_policy.CompiledPolicy | None:
    try:
        return cel_policy.compile_expression(source)
    except cel_policy.PolicyCompileError as error:
        assert error.message
        return None


SCALING_POLICY = {
    "apiVersion": "servectl.io/v1alpha1",
    "kind": "ScalingPolicy",
    "metadata": {"name": "fuzz"},
    "spec": {"description": "fuzzed", "params": {"targetMs": 150.0}},
}


@FUZZ
@given(source=cel_sources, doc=valid_snapshot_docs())
@example(
    source="(" * 10_000 + "recommended" + ")" * 10_000, doc={"time": 1, "replicas": {"current": 1}}
)
@example(source="'" + "\\" * 3, doc={"time": 1, "replicas": {"current": 1}})
def test_cel_compiles_or_refuses_and_evaluates_or_fails(source: str, doc: dict[str, Any]) -> None:
    problem = cel_types.result_problem(source)
    assert problem is None or problem.startswith("the expression can only return")
    compiled = compile_or_refuse(source)
    if compiled is not None:
        snap = snapshot.from_dict(doc)
        try:
            result = compiled.evaluate(snap, 3, {"targetMs": 150.0}, {"n": 1})
        except cel_policy.PolicyRuntimeError as error:
            assert error.message
        else:
            assert type(result.replicas) is int and result.replicas >= 0
    policy = {**SCALING_POLICY, "spec": {**SCALING_POLICY["spec"], "cel": source}}
    try:
        validation.load_scaling_policy(policy)
    except validation.SpecError as error:
        assert error.issues
    try:
        conditions.compile_condition(source)
    except conditions.ConditionCompileError as error:
        assert error.message


# ----------------------------------------------------------------------------- deep nesting

DEPTH = 10_000


@pytest.mark.parametrize(
    "source",
    [
        "(" * DEPTH + "recommended" + ")" * DEPTH,
        "[" * DEPTH + "]" * DEPTH,
        '{"replicas": ' * DEPTH + "1" + "}" * DEPTH,
        "math.greatest(" * DEPTH + "1" + ")" * DEPTH,
        "true ? 1 : " * DEPTH + "1",
        "-" * DEPTH + "recommended",
        "!" * DEPTH + "true",
        " + ".join(["recommended"] * DEPTH),
    ],
    ids=["parens", "lists", "maps", "calls", "ternaries", "negations", "nots", "sums"],
)
def test_a_deep_expression_is_a_clear_compile_error(source: str) -> None:
    started = time.perf_counter()
    with pytest.raises(cel_policy.PolicyCompileError) as info:
        cel_policy.compile_expression(source)
    assert "keep it under 8192" in str(info.value)  # too long before it is too deep
    cel_types.result_problem(source)  # the static check gives up, it does not recurse
    assert time.perf_counter() - started < 10


@pytest.mark.parametrize("depth", [97, 500, 4_000])
def test_nesting_beyond_the_parser_limit_is_named(depth: int) -> None:
    with pytest.raises(cel_policy.PolicyCompileError) as info:
        cel_policy.compile_expression("(" * depth + "recommended" + ")" * depth)
    assert "nests too deeply (more than 96 levels" in str(info.value)
    assert (info.value.line, info.value.column) == (1, 97)


def test_deep_unary_chains_under_the_size_limit_compile_and_run() -> None:
    for source in ("-" * 8_000 + "recommended", "!" * 8_000 + "true ? 1 : 2"):
        compiled = cel_policy.compile_expression(source)
        snap = snapshot.from_dict({"time": 1, "replicas": {"current": 1}})
        assert compiled.evaluate(snap, 3).replicas in (1, 3)
    # 8000 negations of a bool: the static check must not recurse either.
    assert cel_types.result_type("!" * 8_000 + "true") == cel_types.BOOL


def test_the_library_survives_deep_input_in_a_child_process() -> None:
    """A Rust stack overflow would abort the process: run the raw library and servectl's
    entry points in a child, so a crash is a failed test with its output."""
    script = textwrap.dedent(
        f"""
        import cel
        from servectl.api import conditions
        from servectl.autoscaling import cel_policy, cel_types
        depth = {DEPTH}
        sources = [
            "(" * depth + "1" + ")" * depth,
            "[" * depth + "]" * depth,
            "{{1: " * depth + "1" + "}}" * depth,
            "-" * depth + "1",
            "!" * depth + "true",
            "+".join(["1"] * depth),
            "a" + ".b" * depth,
        ]
        for source in sources:
            try:
                cel.compile(source)
            except ValueError:
                pass
            cel_types.result_problem(source)
            try:
                cel_policy.compile_expression(source)
            except cel_policy.PolicyCompileError:
                pass
            try:
                conditions.compile_condition(source)
            except conditions.ConditionCompileError:
                pass
        print("survived", len(sources))
        """
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "survived 7" in done.stdout
