"""The README's local-runtime walkthrough, checked where it can be without a runtime: the
paths it exports to and deploys from agree, the version it deploys is one the rollout
it shows upgrades from, and its two set-up commands work on an externally managed Python
(PEP 668) by installing into a virtualenv."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from servectl.modelserver import demo

ROOT = Path(__file__).resolve().parents[2]


def _walkthrough() -> list[list[str]]:
    """The ``servectl`` command lines of the README's "The local runtime" block."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## The local runtime", 1)[1]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    lines = []
    for raw in block.splitlines():
        code = raw.split("  #", 1)[0].strip()
        for part in code.split(";"):
            words = shlex.split(part.strip())
            if words and words[0] == "servectl":
                lines.append(words[1:])
    return lines


def _option(words: list[str], name: str) -> str:
    return words[words.index(name) + 1]


def test_the_example_spec_finds_the_models_where_the_readme_exports_them() -> None:
    lines = _walkthrough()
    export = next(w for w in lines if w[:2] == ["model", "export-demo"])
    exported = Path(os.path.expanduser(export[2]))
    spec_file = next(w for w in lines if w[0] == "deploy" and "-f" in w)
    path = ROOT / _option(spec_file, "-f")
    doc = yaml.safe_load(path.read_text())
    base = Path(os.path.expanduser(doc["spec"]["model"]["basePath"]))
    if not base.is_absolute():  # deploy -f reads a relative path from the file's folder
        base = (path.parent / base).resolve()
    assert base == exported / doc["spec"]["model"]["name"]
    flag_deploy = next(w for w in lines if w[0] == "deploy" and "--model-path" in w)
    assert Path(os.path.expanduser(_option(flag_deploy, "--model-path"))) == base


def test_the_readme_rolls_out_an_upgrade_to_a_good_version() -> None:
    lines = _walkthrough()
    deploy = next(w for w in lines if w[0] == "deploy" and "--model-path" in w)
    rollout = next(w for w in lines if w[:2] == ["rollout", "start"])
    # Without --version, deploy serves the newest version on disk: the demo's slow v4.
    assert "--version" in deploy, "a plain deploy serves the deliberately slow newest version"
    deployed, target = int(_option(deploy, "--version")), int(_option(rollout, "--version"))
    plans = {p.version: p for p in demo.plan(["cost_model"])}
    assert deployed < target
    assert plans[target].fail_share == 0.0 and plans[target].work == plans[deployed].work
    # The full spec applied after that rollout keeps the version it promoted (else the
    # README's next line would queue a rollback).
    spec_file = next(w for w in lines if w[0] == "deploy" and "-f" in w)
    assert lines.index(spec_file) > lines.index(rollout)
    doc = yaml.safe_load((ROOT / _option(spec_file, "-f")).read_text())
    assert doc["spec"]["model"]["version"] == target


DEBIAN_PYTHON = Path("/usr/bin/python3")


def _pip_refuses(python: Path) -> bool:
    """Whether pip refuses to install into ``python``'s environment (PEP 668)."""
    tried = subprocess.run(
        [str(python), "-m", "pip", "install", "--dry-run", "--no-index", "servectl"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    return "externally-managed-environment" in tried.stderr


@pytest.mark.skipif(
    not (DEBIAN_PYTHON.exists() and _pip_refuses(DEBIAN_PYTHON)),
    reason="no externally managed (PEP 668) system Python here",
)
def test_the_scripts_install_into_a_virtualenv_on_an_externally_managed_python(
    tmp_path: Path,
) -> None:
    # What the README's commands did before: pip into the system Python, refused
    # (the skip condition: this Python refuses).
    # What they do now: scripts/python-env makes ./.venv and points PYTHON at it.
    shutil.copytree(ROOT / "scripts", tmp_path / "scripts")
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHON", "VIRTUAL_ENV", "SERVECTL_VENV")
    }
    env["SERVECTL_BASE_PYTHON"] = str(DEBIAN_PYTHON)
    shown = subprocess.run(
        ["bash", "-c", 'set -euo pipefail; . scripts/python-env; echo "$PYTHON"'],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    python = Path(shown.stdout.strip().splitlines()[-1])
    assert python == tmp_path / ".venv" / "bin" / "python"
    assert not _pip_refuses(python)
    # A second run reuses it, quietly; PYTHON given wins over it.
    again = subprocess.run(
        ["bash", "-c", '. scripts/python-env; echo "$PYTHON"'],
        cwd=tmp_path,
        env={**env, "PYTHON": "/some/python"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert again.stdout.strip() == "/some/python"
    assert re.search(r"creating the virtualenv", shown.stderr)
