"""Shared helpers for the resource-model tests: the example documents, and edits of them."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "deploy" / "examples"
CRDS = REPO / "deploy" / "crds"
DELETE = object()  # edit value: remove the key

Edit = Callable[..., dict[str, Any]]


def example(name: str) -> dict[str, Any]:
    """The first document of deploy/examples/<name>."""
    with open(EXAMPLES / name, encoding="utf-8") as handle:
        first: dict[str, Any] = next(doc for doc in yaml.safe_load_all(handle) if doc)
    return first


def edited(doc: dict[str, Any], changes: dict[str, object]) -> dict[str, Any]:
    """A deep copy of ``doc`` with each "a.b[1].c" path set to a value (or DELETE)."""
    out = copy.deepcopy(doc)
    for path, value in changes.items():
        parts: list[str | int] = [
            int(index) if index else name
            for name, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", path)
        ]
        parent: Any = out
        for part in parts[:-1]:
            parent = parent[part]
        if value is DELETE:
            del parent[parts[-1]]
        else:
            parent[parts[-1]] = value
    return out
