"""docs/resource-model.md stays true: its tables and error messages come from the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from servectl import specfile
from servectl.api import crd, models, validation
from tests.unit.api.helpers import REPO

DOC = (REPO / "docs" / "resource-model.md").read_text(encoding="utf-8")
REFRESH = "regenerate the table with the command in docs/resource-model.md"


@pytest.mark.parametrize(
    ("model", "root"),
    [
        (models.ModelService, "spec"),
        (models.ModelService, "status"),
        (models.ScalingPolicy, "spec"),
    ],
)
def test_field_reference_is_current(model: type[models.SpecModel], root: str) -> None:
    assert crd.reference_markdown(crd.field_reference(model, root)) in DOC, REFRESH


# A ```yaml block whose first line names the file, then the ``` block with its errors.
EXAMPLE = re.compile(r"```yaml\n# (?P<name>\S+)\n(?P<body>.*?)```\n\n```\n(?P<errors>.*?)```", re.S)


def test_error_examples_are_what_the_code_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    examples = list(EXAMPLE.finditer(DOC))
    assert len(examples) == 4
    monkeypatch.chdir(tmp_path)
    for found in examples:
        Path(found["name"]).write_text(found["body"], encoding="utf-8")
        with pytest.raises(validation.SpecError) as caught:
            specfile.load_file(found["name"])
        assert str(caught.value) + "\n" == found["errors"]


def test_builtin_metrics_table_is_current() -> None:
    for name, meaning in models.BUILTIN_ANALYSIS_METRICS.items():
        assert f"| `{name}` | {meaning} |" in DOC, f"docs/resource-model.md: add {name}"


def test_every_rollout_phase_is_documented() -> None:
    for phase in models.RolloutPhase:
        assert f"| `{phase.value}` | " in DOC, f"docs/resource-model.md: describe {phase.value}"


def test_example_snippets_are_the_example_files() -> None:
    # The rollout snippets quote deploy/examples: each quoted line is in the file.
    for found in re.finditer(r"```yaml\n# deploy/examples/(\S+), \S+\n(.*?)```", DOC, re.S):
        source = (REPO / "deploy" / "examples" / found[1]).read_text(encoding="utf-8")
        for line in found[2].splitlines():
            code = line.split(" # ")[0].strip()  # comments may differ
            assert code in source, f"{found[1]}: {code!r} not in the file"
