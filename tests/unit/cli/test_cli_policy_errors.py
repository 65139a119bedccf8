"""``servectl policy eval`` / ``policy test`` / ``validate`` on bad snapshots and bad
policies: a non-zero exit and a message naming the file and field, never a traceback;
a CEL policy that can only return a string is refused before it runs; a policy that
fails at run time (reason POLICY_ERROR) makes the command exit 1 after printing."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from servectl.cli import main as cli_main
from tests.unit.cli.helpers import flat, runner, servectl

REPO = Path(__file__).resolve().parents[3]
SNAPSHOT = REPO / "docs" / "examples" / "snapshot.json"


def no_traceback(result: Result) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__}: {result.exception}"
    )
    assert "Traceback" not in result.output


def snapshot_with(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(SNAPSHOT.read_text())
    for path, value in changes.items():
        *parents, last = path.split("__")
        target = doc
        for part in parents:
            target = target[part]
        target[last] = value
    return doc


def policy_yaml(cel: str, name: str = "strpol") -> str:
    return (
        "apiVersion: servectl.io/v1alpha1\nkind: ScalingPolicy\n"
        f"metadata:\n  name: {name}\nspec:\n  description: a test policy\n"
        f"  cel: {json.dumps(cel)}\n"
    )


# ----------------------------------------------------------------------------- item 1


def test_policy_eval_decides_on_an_infinite_rps() -> None:
    # Used to crash with ZeroDivisionError (rps inf) / OverflowError (CPU inf).
    for signal in ("rps", "cpu_usage_cores"):
        doc = snapshot_with(**{f"signals__{signal}": math.inf})
        result = runner.invoke(cli_main.app, ["policy", "eval", "-"], input=json.dumps(doc))
        no_traceback(result)
        assert result.exit_code == 0, result.output
        decision = json.loads(result.stdout)
        assert 1 <= decision["replicas"] <= 50


# ----------------------------------------------------------------------------- item 3

STRING_POLICIES = ['"hello"', "'x' + 'y'", '{"replicas": "three"}', "rollout.phase"]


@pytest.mark.parametrize("cel", STRING_POLICIES)
def test_validate_refuses_a_scaling_policy_that_can_only_return_a_string(
    tmp_path: Path, cel: str
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(policy_yaml(cel))
    result = servectl("validate", path)
    assert result.exit_code == 1
    message = flat(result.stderr)
    assert "spec.cel: the expression can only return" in message
    assert 'fix: return an int (the replica count) or {"replicas": n' in message


def test_validate_refuses_an_inline_policy_that_can_only_return_a_string(tmp_path: Path) -> None:
    path = tmp_path / "svc.yaml"
    path.write_text(
        "apiVersion: servectl.io/v1alpha1\nkind: ModelService\nmetadata:\n  name: svc\n"
        "spec:\n  model: {name: m, basePath: s3://models/m}\n"
        '  autoscaling:\n    policy:\n      cel: \'{"replicas": "three"}\'\n'
    )
    result = servectl("validate", path)
    assert result.exit_code == 1
    assert (
        "spec.autoscaling.policy.cel: the expression can only return a map whose replicas "
        "can only be a string" in flat(result.stderr)
    )


@pytest.mark.parametrize("cel", STRING_POLICIES)
def test_policy_eval_refuses_a_policy_that_can_only_return_a_string(
    tmp_path: Path, cel: str
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(policy_yaml(cel))
    from_file = servectl("policy", "eval", SNAPSHOT, "--policy-file", path)
    inline = servectl("policy", "eval", SNAPSHOT, "--cel", cel)
    for result in (from_file, inline):
        no_traceback(result)
        assert result.exit_code == 2
        assert result.stdout == ""
        assert "can only return" in flat(result.stderr)
    assert "spec.cel:" in flat(from_file.stderr)


def test_policy_eval_exits_1_when_the_policy_fails_and_still_prints_the_decision() -> None:
    # A string on one branch compiles (it may never be taken); here it is taken.
    result = servectl("policy", "eval", SNAPSHOT, "--cel", 'recommended > 0 ? "many" : 1')
    no_traceback(result)
    assert result.exit_code == 1
    decision = json.loads(result.stdout)
    assert decision["reason"] == "POLICY_ERROR"
    assert "policy returned a string 'many'" in decision["detail"]
    assert "POLICY_ERROR" in flat(result.stderr)


def test_policy_eval_trace_exits_1_when_the_policy_fails_on_one_snapshot(tmp_path: Path) -> None:
    quiet = snapshot_with(time=1_795_444_200.0)
    later = snapshot_with(time=1_795_444_202.0, signals__gpu_duty_cycle=None)
    quiet["signals"]["gpu_duty_cycle"] = 50.0
    path = tmp_path / "trace.json"
    path.write_text("\n".join(json.dumps(doc) for doc in (quiet, later)))
    result = servectl("policy", "eval", path, "--cel", "int(signals.gpu_duty_cycle) / 10")
    assert result.exit_code == 1
    reasons = [json.loads(line)["reason"] for line in result.stdout.splitlines()]
    assert reasons[1] == "POLICY_ERROR" and reasons[0] != "POLICY_ERROR"
    assert "on 1 of 2 snapshots" in flat(result.stderr)


def test_policy_eval_exits_0_when_the_policy_works() -> None:
    result = servectl("policy", "eval", SNAPSHOT, "--policy-file", "policies/latency-slo.yaml")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["reason"] != "POLICY_ERROR"


def _policy_with_trace(tmp_path: Path, cel: str, steps: str) -> Path:
    (tmp_path / "tests").mkdir()
    path = tmp_path / "strpol.yaml"
    path.write_text(policy_yaml(cel))
    (tmp_path / "tests" / "strpol.yaml").write_text(f"policy: strpol\nsteps:\n{steps}")
    return path


def test_policy_test_exits_1_when_the_policy_fails_at_run_time(tmp_path: Path) -> None:
    path = _policy_with_trace(
        tmp_path,
        'recommended > 3 ? "many" : recommended',
        "  - {name: few, recommended: 2, expect: {replicas: 2}}\n"
        "  - {name: many, recommended: 5, expect: {replicas: 5}}\n",
    )
    result = servectl("policy", "test", path)
    no_traceback(result)
    assert result.exit_code == 1
    out = flat(result.stdout)
    assert f"FAIL {path} (2 steps: 1 passed, 1 failed)" in out
    assert "FAIL steps[1] many policy failed: policy returned a string 'many'" in out


def test_policy_test_refuses_a_policy_that_can_only_return_a_string(tmp_path: Path) -> None:
    # Its trace even expects the failure: it used to pass (exit 0).
    path = _policy_with_trace(
        tmp_path, '"hello"', "  - {recommended: 2, expect: {error: a string}}\n"
    )
    result = servectl("policy", "test", path)
    assert result.exit_code == 1
    assert "spec.cel: the expression can only return a string" in flat(result.stdout)


# ----------------------------------------------------------------------------- item 4


def _bad_snapshots(tmp_path: Path) -> dict[str, tuple[Path | str, str]]:
    """name -> (snapshot argument, what the message must say)."""

    def write(name: str, content: str | bytes) -> Path:
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        return path

    def doc(name: str, **changes: Any) -> Path:
        return write(name, json.dumps(snapshot_with(**changes)))

    (tmp_path / "a-directory").mkdir()
    return {
        "negative-rps": (doc("neg.json", signals__rps=-3), "signals.rps: must be >= 0, got -3"),
        "negative-latency": (
            doc("neglat.json", signals__latency_ms={"p99": -1}),
            "signals.latency_ms.p99: must be >= 0",
        ),
        "error-rate-percent": (
            doc("err.json", signals__error_rate=5),
            "signals.error_rate: must be at most 1",
        ),
        "current-a-string": (
            doc("type.json", replicas__current="three"),
            "replicas.current: expected an integer, got 'three'",
        ),
        "max-huge": (doc("huge.json", replicas__max=10**30), "replicas.max: must be at most"),
        "max-1e308": (doc("float.json", replicas__max=1e308), "replicas.max: expected an integer"),
        "min-over-max": (
            doc("minmax.json", replicas__min=60),
            "replicas.min (60) > replicas.max (50)",
        ),
        "time-inf": (doc("tinf.json", time=math.inf), "time: must be a finite number"),
        "time-nan": (doc("tnan.json", time=math.nan), "time: must be a finite number"),
        "pods-not-a-list": (doc("pods.json", pods={"a": 1}), "pods: expected a list"),
        "duplicate-pods": (
            doc("dup.json", pods=[{"name": "a"}, {"name": "a"}]),
            "pods[1].name: 'a' is also the name of pods[0]",
        ),
        "not-json": (write("bad.json", '{"time": 1, oops'), "bad.json: not JSON"),
        "not-json-lines": (write("bad.jsonl", '{"time": 1}\n{oops\n'), "bad.jsonl:2: not JSON"),
        "empty-file": (write("empty.json", ""), "empty.json: empty"),
        "a-number": (write("number.json", "3"), "snapshot: expected a JSON object, got 3"),
        "int-of-5000-digits": (
            write("digits.json", '{"time": ' + "9" * 5000 + "}"),
            "digits.json: not JSON (Exceeds the limit",
        ),
        "nested-too-deeply": (
            write("deep.json", "[" * 100_000 + "]" * 100_000),
            "deep.json: not JSON (nested too deeply)",
        ),
        "not-utf8": (write("latin1.json", b'{"time": "\xe9"}'), "latin1.json: not UTF-8"),
        "a-directory": (tmp_path / "a-directory", "a-directory: cannot read it"),
        "missing": (tmp_path / "missing.json", "missing.json: cannot read it"),
    }


BAD_SNAPSHOTS = [
    "negative-rps", "negative-latency", "error-rate-percent", "current-a-string", "max-huge",
    "max-1e308", "min-over-max", "time-inf", "time-nan", "pods-not-a-list", "duplicate-pods",
    "not-json", "not-json-lines", "empty-file", "a-number", "int-of-5000-digits",
    "nested-too-deeply", "not-utf8", "a-directory", "missing",
]  # fmt: skip


@pytest.mark.parametrize("case", BAD_SNAPSHOTS)
def test_policy_eval_on_a_bad_snapshot_names_the_problem(tmp_path: Path, case: str) -> None:
    argument, says = _bad_snapshots(tmp_path)[case]
    result = servectl("policy", "eval", argument)
    no_traceback(result)
    assert result.exit_code == 2
    assert says in flat(result.stderr)


def _bad_policies(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    def write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    (tmp_path / "a-directory.yaml").mkdir()
    return {
        "broken-cel": (
            write("broken.yaml", policy_yaml("recommended +")),
            "spec.cel: CEL does not compile at 1:14: syntax error",
        ),
        "string-cel": (
            write("string.yaml", policy_yaml('"hello"')),
            "spec.cel: the expression can only return a string",
        ),
        "unknown-variable": (
            write("unknown.yaml", policy_yaml("signal.rps")),
            "spec.cel: CEL does not compile at 1:1: unknown variable 'signal'",
        ),
        "deeply-nested-cel": (
            write("deep.yaml", policy_yaml("(" * 4000 + "recommended" + ")" * 4000)),
            "spec.cel: CEL does not compile at 1:97: the expression nests too deeply",
        ),
        "not-yaml": (write("notyaml.yaml", "a: [1, 2\n"), "notyaml.yaml:2:1: invalid YAML"),
        "empty": (write("empty.yaml", ""), "empty.yaml: no resources: the file is empty"),
        "a-directory": (tmp_path / "a-directory.yaml", "a-directory.yaml: cannot read"),
        "missing": (tmp_path / "missing.yaml", "missing.yaml: cannot read"),
    }


BAD_POLICIES = [
    "broken-cel", "string-cel", "unknown-variable", "deeply-nested-cel", "not-yaml", "empty",
    "a-directory", "missing",
]  # fmt: skip


@pytest.mark.parametrize("case", BAD_POLICIES)
def test_policy_eval_with_a_bad_policy_file_names_the_problem(tmp_path: Path, case: str) -> None:
    path, says = _bad_policies(tmp_path)[case]
    result = servectl("policy", "eval", SNAPSHOT, "--policy-file", path)
    no_traceback(result)
    assert result.exit_code == 2
    assert says in flat(result.stderr)


def test_policy_eval_with_a_state_it_never_returned_names_the_state(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    state.write_text('{"rates": "x"}')
    result = servectl("policy", "eval", SNAPSHOT, "--state", state)
    no_traceback(result)
    assert result.exit_code == 2
    assert f"--state {state}: not a state servectl returned" in flat(result.stderr)


def test_policy_test_with_an_empty_policy_file_names_it(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "tests" / "empty.yaml").write_text("")
    result = servectl("policy", "test", tmp_path / "empty.yaml")
    no_traceback(result)
    assert result.exit_code == 2
    assert "empty.yaml: no document in it" in flat(result.stderr)


def test_the_real_command_prints_no_traceback(tmp_path: Path) -> None:
    """Out of process, as a user runs it: stderr has the message and no traceback."""
    snapshots = _bad_snapshots(tmp_path)
    policies = _bad_policies(tmp_path)
    cases = [
        [str(snapshots["int-of-5000-digits"][0])],
        [str(snapshots["time-nan"][0])],
        [str(SNAPSHOT), "--policy-file", str(policies["string-cel"][0])],
    ]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    for args in cases:
        done = subprocess.run(
            [sys.executable, "-m", "servectl", "policy", "eval", *args],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=env,
            timeout=120,
            check=False,
        )
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        assert done.stderr.startswith("error:"), done.stderr
