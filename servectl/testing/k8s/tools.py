"""The Go-built tools of the real-node tests, each made once by a script into the k8s
cache directory (``SERVECTL_K8S_CACHE``, else ``$XDG_CACHE_HOME/servectl/k8s``, else
``~/.cache/servectl/k8s``) as ``<name>-<version>/<name>``: Traefik (``scripts/traefik-build``),
Prometheus and kube-state-metrics (``scripts/metrics-build``)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def cache_root() -> Path:
    cache = os.environ.get("SERVECTL_K8S_CACHE")
    if cache:
        return Path(cache)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "servectl" / "k8s"


@dataclass(frozen=True)
class Tool:
    """One binary: where its script puts it, and the variable that names another one."""

    name: str
    version: str
    script: tuple[str, ...]
    """``scripts/<script[0]>`` and its arguments."""
    env: str
    """An environment variable naming a binary to use instead (tests of other builds)."""

    @property
    def hint(self) -> str:
        return f"build it with: bash scripts/{' '.join(self.script)} (needs Go)"

    def binary(self, *, build: bool = False) -> Path | None:
        """The binary (``env`` names another one); with ``build``, run the script when it
        is missing. None when there is none."""
        named = os.environ.get(self.env)
        if named:
            return Path(named) if os.access(named, os.X_OK) else None
        path = cache_root() / f"{self.name}-{self.version}" / self.name
        if os.access(path, os.X_OK):
            return path
        if not build:
            return None
        script, *args = self.script
        subprocess.run(
            ["bash", str(REPO / "scripts" / script), *args], check=True, stdout=subprocess.DEVNULL
        )
        return path if os.access(path, os.X_OK) else None


TRAEFIK = Tool("traefik", "v3.6.25", ("traefik-build",), "SERVECTL_TRAEFIK")
PROMETHEUS = Tool("prometheus", "v0.316.0", ("metrics-build", "prometheus"), "SERVECTL_PROMETHEUS3")
KUBE_STATE_METRICS = Tool(
    "kube-state-metrics", "v2.18.0", ("metrics-build", "kube-state-metrics"), "SERVECTL_KSM"
)

TOOLS = {tool.name: tool for tool in (TRAEFIK, PROMETHEUS, KUBE_STATE_METRICS)}

if __name__ == "__main__":  # python -m servectl.testing.k8s.tools NAME: its path, if built
    import sys

    found = TOOLS[sys.argv[1]].binary() if sys.argv[1:] and sys.argv[1] in TOOLS else None
    print(found or "")
    sys.exit(0 if found else 1)
