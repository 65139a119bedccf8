"""Every service verb refuses bad values in one line that names the field and the fix
(issue 25, item 8): through ``servectl.api.validation``'s formatter and ``console.fail``,
never pydantic's multi-line dump, and a spec file named once (``bad.yaml:7: ...``, not
``bad.yaml: bad.yaml:7: ...``). Runs ``servectl`` in-process over a store the test fills
(no controller)."""

from __future__ import annotations

from pathlib import Path

import pytest

from servectl.backends.local.client import LocalClient
from tests.unit.cli.helpers import servectl

TYPO = """\
apiVersion: servectl.io/v1alpha1
kind: ModelService
metadata: {name: cost}
spec:
  model: {name: cost_model, basePath: MODELS}
  autoscaling:
    minReplica: 3
"""
MIN_OVER_MAX = """\
apiVersion: servectl.io/v1alpha1
kind: ModelService
metadata: {name: cost}
spec:
  model: {name: cost_model, basePath: MODELS}
  autoscaling: {minReplicas: 5, maxReplicas: 2}
"""


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """A store with ``cost`` deployed (versions 1 and 2 on disk), and the bad files."""
    models = tmp_path / "models" / "cost_model"
    for version in (1, 2):
        (models / str(version)).mkdir(parents=True)
        (models / str(version) / "saved_model.pb").write_bytes(b"")
    for name, text in (("typo.yaml", TYPO), ("minmax.yaml", MIN_OVER_MAX)):
        (tmp_path / name).write_text(text.replace("MODELS", str(models)))
    state_dir = tmp_path / "state"
    result = servectl("deploy", "cost", "--model-path", models, "--state-dir", state_dir)
    assert result.exit_code == 0, result.output
    return state_dir


# (arguments; {models} and {dir} filled in; what the one line must say)
CASES: list[tuple[str, str]] = [
    ("scale cost --min 5 --max 2", "spec.autoscaling.minReplicas: minReplicas (5) is greater"),
    ("scale cost --min 9", "spec.autoscaling.minReplicas: minReplicas (9) is greater"),
    ("scale nope --max 3", "no ModelService 'nope'"),
    (
        "deploy cost --model-path {models} --min 5 --max 2",
        "spec.autoscaling.minReplicas: minReplicas (5) is greater",
    ),
    ("deploy cost --model-path {models} --cpu abc", "spec.runtime.resources.cpu: not a"),
    ("deploy cost --model-path {models} --memory 12zz", "spec.runtime.resources.memory: not a"),
    ("deploy cost --model-path {models} --version 9", "spec.model.version: version 9 is not"),
    ("deploy cost --model-path {dir}/nowhere", "spec.model.basePath:"),
    ("deploy -f {dir}/typo.yaml", "{dir}/typo.yaml:7: spec.autoscaling.minReplica: unknown"),
    ("deploy -f {dir}/minmax.yaml", "{dir}/minmax.yaml:6: spec.autoscaling.minReplicas:"),
    ("deploy -f {dir}/missing.yaml", "{dir}/missing.yaml: cannot read"),
    ("rollout start cost --version 9", "--version: version 9 is not under"),
]


@pytest.mark.parametrize(("args", "expected"), CASES, ids=[c[0] for c in CASES])
def test_a_refused_value_is_one_line_naming_the_field(
    state: Path, args: str, expected: str
) -> None:
    where = state.parent
    filled = args.format(models=where / "models" / "cost_model", dir=where).split()
    before = LocalClient(state)
    try:
        spec = before.store.get_spec("default", "cost")
    finally:
        before.close()
    result = servectl(*filled, "--state-dir", state)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    (line,) = lines
    assert line.startswith("error: "), line
    assert expected.format(dir=where) in line, line
    for dump in ("validation error", "input_value", "Traceback", "[type="):
        assert dump not in result.output
    # A file is named once, with the line.
    assert line.count("typo.yaml") <= 1 and line.count("minmax.yaml") <= 1
    after = LocalClient(state)
    try:
        assert after.store.get_spec("default", "cost") == spec, "a refused change wrote"
    finally:
        after.close()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "--gateway: required with --traffic gateway"),
        (["--gateway", "infra/"], "--gateway 'infra/': give NAME or NAMESPACE/NAME"),
        (
            ["--gateway", "infra/public", "--hostnames", "{name}.{ns}.example.com"],
            "--hostnames '{name}.{ns}.example.com': use only {name} and {namespace}",
        ),
        (
            ["--gateway", "infra/public", "--grpc-hostnames", "{name}_g.example.com"],
            "not a hostname",
        ),
        (
            ["--gateway", "infra/public", "--rate-window", "30 s"],
            "--rate-window '30 s': '30 s' is not a PromQL duration",
        ),
        (["--gateway", "infra/public", "--rate-window", "0s"], "must be longer than 0"),
    ],
)
def test_the_kubernetes_controller_refuses_routes_that_attach_to_nothing_or_bad_hosts(
    tmp_path: Path, args: list[str], says: str
) -> None:
    """Routes with no parent Gateway attach to nothing (issue 27, item 1): the controller
    refuses to start, in one line, before it reads a kubeconfig."""
    missing = tmp_path / "none.kubeconfig"
    result = servectl("controller", "--kubernetes", "--kubeconfig", missing, *args)
    assert result.exit_code == 2, result.output
    assert says in result.output, result.output
    assert "Traceback" not in result.output
