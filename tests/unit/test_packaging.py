"""Every third-party module servectl and its tests import is declared in pyproject.toml.

A dependency that only arrives because another package happens to pull it in (or because
the machine's Python already has it) breaks a fresh ``pip install -e '.[dev]'``: this is
how ``cryptography`` went missing once. The code's imports may use the core dependencies
and any extra; the tests' imports the core dependencies and ``dev``.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIRST_PARTY = {"servectl", "tests", "loadtests"}


def _name(requirement: str) -> str:
    """The distribution's normalized name (PEP 503) from a requirement string."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match is not None, requirement
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def _declared() -> tuple[set[str], dict[str, set[str]]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {_name(r) for r in project["dependencies"]}
    extras = {k: {_name(r) for r in v} for k, v in project["optional-dependencies"].items()}
    return core, extras


def _imports(folder: str) -> dict[str, str]:
    """Top-level modules imported (absolute imports) under ``folder`` -> one file that does."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in FIRST_PARTY:
                    found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def _undeclared(folder: str, allowed: set[str]) -> list[str]:
    providers = importlib.metadata.packages_distributions()
    problems = []
    for module, where in sorted(_imports(folder).items()):
        dists = {_name(d) for d in providers.get(module, [])}
        if not dists:
            problems.append(f"{module} ({where}): not installed, so not declared either")
        elif not dists & allowed:
            problems.append(f"{module} ({where}): from {', '.join(sorted(dists))}, undeclared")
    return problems


def test_the_package_declares_what_it_imports() -> None:
    core, extras = _declared()
    allowed = core | set().union(*extras.values())
    assert _undeclared("servectl", allowed) == []


@pytest.mark.parametrize("folder", ["tests", "loadtests"])
def test_the_dev_extra_declares_what_the_tests_import(folder: str) -> None:
    core, extras = _declared()
    assert _undeclared(folder, core | extras["dev"]) == []


def test_the_check_sees_an_undeclared_import() -> None:
    # The check itself can fail: with no extras allowed, TensorFlow (serving/dev) is flagged.
    core, _extras = _declared()
    assert any(p.startswith("tensorflow ") for p in _undeclared("servectl", core))
