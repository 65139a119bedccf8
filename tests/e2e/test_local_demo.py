"""The README's main job, `servectl demo`, run as a user runs it: the whole story on the
local runtime (a step x5 and its scale-up, a good canary promoted, a failing one rolled
back, the scale-down), its summary table and its report.

About five minutes of real processes: the controller, model servers, HAProxy, Prometheus
and Locust. The demo paces its load to the machine (servectl.demo.story.Story.pace), so
the story is the same on a slower machine.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.e2e.conftest import _require


def test_servectl_demo_tells_the_whole_story_and_writes_its_report(tmp_path: Path) -> None:
    _require(importlib.util.find_spec("tensorflow") is not None, "TensorFlow is not installed")
    for binary in ("haproxy", "prometheus"):
        _require(shutil.which(binary) is not None, f"{binary} not found: apt-get install {binary}")
    out = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, "-m", "servectl", "demo", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-4000:]
    outcomes = {
        "scale-up": "settled",
        "canary v2": "Completed",
        "failing v3": "Aborted",
        "scale-down": "scaled down",
    }
    table = done.stdout
    for phase, outcome in outcomes.items():
        assert any(phase in line and outcome in line for line in table.splitlines()), (
            phase,
            table,
        )
    # Every failed request was one the model failed itself (v3's injected failures).
    others = [int(n) for n in re.findall(r"by the model, (\d+) other\)", table)]
    assert others and sum(others) == 0, table
    assert "load step -> first scale-up decision" in table
    assert (out / "report.md").is_file() and (out / "timeline.png").is_file()
    samples = json.loads((out / "samples.json").read_text())
    assert samples, "the recorder kept no sample"
