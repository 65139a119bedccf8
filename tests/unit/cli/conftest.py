"""The CLI tests run ``servectl`` in-process from the repo root, as a user in a checkout.

No console width is set: CliRunner's stdout is not a terminal, so rows and messages are
printed whole, exactly as in ``servectl ... | cat``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    # Commands read ./policies, as they do for a user in a checkout.
    monkeypatch.chdir(REPO)
