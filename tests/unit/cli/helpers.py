"""Helpers of the CLI tests: run ``servectl`` in-process (conftest.py sets the cwd)."""

from __future__ import annotations

from pathlib import Path

from click.testing import Result
from typer.testing import CliRunner

from servectl.cli import main as cli_main

runner = CliRunner()


def servectl(*args: str | Path) -> Result:
    return runner.invoke(cli_main.app, [str(arg) for arg in args])


def flat(text: str) -> str:
    """``text`` on one line: help text wraps at the terminal width."""
    return " ".join(text.split())
