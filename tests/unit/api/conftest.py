"""Fixtures for the resource-model tests (helpers live in helpers.py, importable)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.api.helpers import Edit, edited, example


@pytest.fixture
def resnet() -> dict[str, Any]:
    """The full example: every signal, behavior, canary rollout with analysis."""
    return example("resnet-canary.yaml")


@pytest.fixture
def edit(resnet: dict[str, Any]) -> Edit:
    """edit({"spec.autoscaling.minReplicas": 5}) -> the resnet example, changed."""
    return lambda changes: edited(resnet, changes)
