"""TensorFlow's start-up noise held back (issue 25, item 10): the CLI's stderr
(``servectl model export-demo``) and a model server's log carry none of oneDNN's notice,
the missing CUDA driver or the cuInit error unless ``--verbose`` / ``SERVECTL_VERBOSE=1``;
any other line still shows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from servectl.modelserver import tf_startup

from .conftest import MODEL, end_model_server, free_port, start_model_server

REPO = Path(__file__).resolve().parents[3]

# What TensorFlow 2.21 printed on this project's machines (one of each kind).
CAPTURED = """\
WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
I0000 00:00:1795818683.278046   20304 port.cc:153] oneDNN custom operations are on. You may see slightly different numerical results due to floating-point round-off errors from different computation orders. To turn them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.
I0000 00:00:1795818683.278410   20304 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.
I0000 00:00:1795818683.390968   20304 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use available CPU instructions in performance-critical operations.
To enable the following instructions: AVX2 AVX512F AVX512_VNNI AVX512_BF16 AVX_VNNI FMA, in other operations, rebuild TensorFlow with the appropriate compiler flags.
E0000 00:00:1795818685.662356   20304 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)
E0000 00:00:1795818685.662400   20304 loader.cc:12] Could not load the SavedModel: bad magic
2026-11-27 22:42:46.732: I servectl.modelserver.models] Loading servable: {name: m version: 4}
"""  # noqa: E501


def test_only_the_start_up_lines_are_dropped() -> None:
    kept = tf_startup.without_noise(CAPTURED).splitlines()
    assert kept == [
        "E0000 00:00:1795818685.662400   20304 loader.cc:12] Could not load the SavedModel: "
        "bad magic",
        "2026-11-27 22:42:46.732: I servectl.modelserver.models] Loading servable: "
        "{name: m version: 4}",
    ]


def _noise(text: str) -> list[str]:
    return [line for line in text.splitlines() if tf_startup.is_noise(line)]


def _export_demo(out: Path, *flags: str, verbose: bool = False) -> str:
    env = {
        k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "SERVECTL_VERBOSE")
    }
    if verbose:
        env["SERVECTL_VERBOSE"] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "servectl", *flags, "model", "export-demo", str(out)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**env, "PYTHONPATH": str(REPO)},
        cwd=REPO,
        check=True,
    )
    return done.stderr


def test_export_demo_prints_no_tensorflow_noise_unless_verbose(tmp_path: Path) -> None:
    quiet = _export_demo(tmp_path / "quiet")
    assert "writing cost_model v1" in quiet
    assert _noise(quiet) == [], quiet
    loud = _export_demo(tmp_path / "loud", "--verbose")
    if not _noise(loud):
        pytest.skip("this TensorFlow prints no start-up noise to hold back")
    assert _noise(loud)[0]  # --verbose shows them (SERVECTL_VERBOSE=1 for what it starts)


def test_a_model_servers_log_starts_without_tensorflow_noise(model_base: Path) -> None:
    proc, lines = start_model_server(
        [
            "--port=0",
            f"--rest_api_port={free_port()}",
            "--rest_api_bind_address=127.0.0.1",
            f"--model_name={MODEL}",
            f"--model_base_path={model_base}",
        ],
        "Exporting HTTP/REST API",
    )
    try:
        assert any("Exporting HTTP/REST API" in line for line in lines), lines
        assert _noise("".join(lines)) == [], lines
        assert any("Successfully loaded servable" in line for line in lines), lines
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        end_model_server(proc)
