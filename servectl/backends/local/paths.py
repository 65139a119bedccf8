"""Where the local runtime keeps everything: one state directory and the files in it
(docs/local-runtime.md lists them)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def default_state_dir() -> Path:
    """``$SERVECTL_STATE_DIR``, else ``~/.servectl``."""
    env = os.environ.get("SERVECTL_STATE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".servectl"


@dataclass(frozen=True)
class Paths:
    root: Path

    @property
    def store(self) -> Path:
        return self.root / "state.db"

    @property
    def replicas(self) -> Path:
        return self.root / "replicas"

    @property
    def haproxy(self) -> Path:
        return self.root / "haproxy"

    @property
    def prometheus(self) -> Path:
        return self.root / "prometheus"

    @property
    def pid(self) -> Path:
        return self.root / "controller.pid"

    @property
    def log(self) -> Path:
        return self.root / "controller.log"

    @property
    def registry(self) -> Path:
        return self.root / "replicas.json"

    @property
    def logs(self) -> Path:
        return self.root / "logs"
