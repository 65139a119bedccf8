"""What the tests against a real Prometheus need besides ``servectl.testing``: the binaries
(skipped when missing, or failing in CI) and this repository's deploy/prometheus.

The fake exporters, the exposition builders and `Scenario` are product now:
``servectl.testing.exporters`` and ``servectl.testing.exposition``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from servectl.metrics.server import INSTALL_HINT

# --- binaries -----------------------------------------------------------------------------

REQUIRE_ENV = "SERVECTL_REQUIRE_PROMETHEUS"


def require_binary(name: str) -> str:
    """The path of ``prometheus``/``promtool``; skip the test when missing, or fail when
    ``SERVECTL_REQUIRE_PROMETHEUS=1`` (CI), with the install hint."""
    path = shutil.which(name)
    if path is not None:
        return path
    message = f"{name} not found on PATH; {INSTALL_HINT}"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message} ({REQUIRE_ENV}=1)")
    pytest.skip(message)


DEPLOY_PROMETHEUS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"


def without_kubernetes_sd(jobs: list[dict[str, Any]], sd_file: Path) -> list[dict[str, Any]]:
    """Scrape jobs with ``kubernetes_sd_configs`` swapped for a file_sd reading ``sd_file``.

    Debian's Prometheus is built without Kubernetes discovery (its config parser rejects
    ``kubernetes_sd_configs``). Everything else, the relabelling included, stays as is,
    and ``sd_file`` can hand it the ``__meta_kubernetes_*`` labels the pod role would.
    """
    swapped = []
    for job in jobs:
        job = dict(job)
        if job.pop("kubernetes_sd_configs", None) is not None:
            job["file_sd_configs"] = [{"files": [str(sd_file)], "refresh_interval": "1s"}]
        swapped.append(job)
    return swapped
