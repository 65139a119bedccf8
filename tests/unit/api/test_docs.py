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
    assert len(examples) == 2
    monkeypatch.chdir(tmp_path)
    for found in examples:
        Path(found["name"]).write_text(found["body"], encoding="utf-8")
        with pytest.raises(validation.SpecError) as caught:
            specfile.load_file(found["name"])
        assert str(caught.value) + "\n" == found["errors"]
