"""Fixtures: a tiny half_plus_two SavedModel (versions 1 and 2) built with tf.Module.

Version 2 computes ``x / 2 + 2`` (TF Serving's documented example); version 1
computes ``x / 2 + 1``, so routing to a version or label shows in the numbers.
Besides ``serving_default`` each version has:

- ``add``: two inputs ``a``, ``b`` -> ``sum``, ``diff`` (multi-input / multi-output);
- ``echo``: a string ``s`` -> ``s_bytes`` (same bytes) and ``length`` (int32);
- ``classify_x_to_y`` / ``regress_x_to_y``: serialized tf.Example in ``inputs``,
  with the classify / regress method names TF Serving requires.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

tf = pytest.importorskip("tensorflow")

from servectl import processes  # noqa: E402
from servectl.modelserver.models import ModelManager, parse_model_config_text  # noqa: E402
from servectl.modelserver.rest import RestServer  # noqa: E402

MODEL = "half_plus_two"


def _export(path: Path, offset: float) -> None:
    from tensorflow.core.protobuf import saved_model_pb2

    class HalfPlus(tf.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.a = tf.Variable(0.5)
            self.b = tf.Variable(offset)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def serve(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"y": self.a * x + self.b}

        @tf.function(
            input_signature=[
                tf.TensorSpec([None], tf.float32, name="a"),
                tf.TensorSpec([None], tf.float32, name="b"),
            ]
        )
        def add(self, a: tf.Tensor, b: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"sum": a + b, "diff": a - b}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="s")])
        def echo(self, s: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"s_bytes": s, "length": tf.strings.length(s)}

        def _parse(self, inputs: tf.Tensor) -> tf.Tensor:
            feats = tf.io.parse_example(inputs, {"x": tf.io.FixedLenFeature([1], tf.float32)})
            return self.a * feats["x"] + self.b

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
        def classify(self, inputs: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"scores": self._parse(inputs)}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
        def regress(self, inputs: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"outputs": tf.reshape(self._parse(inputs), [-1])}

    module = HalfPlus()
    tf.saved_model.save(
        module,
        str(path),
        signatures={
            "serving_default": module.serve,
            "add": module.add,
            "echo": module.echo,
            "classify_x_to_y": module.classify,
            "regress_x_to_y": module.regress,
        },
    )
    # tf.saved_model.save writes every signature as "predict"; set the method names
    # TF Serving's Classify and Regress check for.
    pb = path / "saved_model.pb"
    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString(pb.read_bytes())
    for mg in saved.meta_graphs:
        mg.signature_def["classify_x_to_y"].method_name = "tensorflow/serving/classify"
        mg.signature_def["regress_x_to_y"].method_name = "tensorflow/serving/regress"
    pb.write_bytes(saved.SerializeToString())


@pytest.fixture(scope="session")
def model_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``<tmp>/half_plus_two/{1,2}``: two exported versions."""
    base = tmp_path_factory.mktemp("models") / MODEL
    _export(base / "1", offset=1.0)
    _export(base / "2", offset=2.0)
    return base


def config_text(base: Path) -> str:
    """Two models over the same versions: one with policy specific [1,2] and labels."""
    return textwrap.dedent(
        f"""
        model_config_list {{
          config {{
            name: "{MODEL}"
            base_path: "{base}"
            model_platform: "tensorflow"
            model_version_policy {{ specific {{ versions: 1 versions: 2 }} }}
            version_labels {{ key: "stable" value: 1 }}
            version_labels {{ key: "canary" value: 2 }}
          }}
          config {{
            name: "latest_only"
            base_path: "{base}"
          }}
        }}
        """
    )


@pytest.fixture(scope="session")
def config_file(model_base: Path) -> Path:
    path = model_base.parent / "models.config"
    path.write_text(config_text(model_base))
    return path


@pytest.fixture(scope="session")
def manager(model_base: Path) -> ModelManager:
    mgr = ModelManager()
    mgr.load(parse_model_config_text(config_text(model_base)))
    return mgr


@pytest.fixture(scope="module")
def rest_server(manager: ModelManager) -> Iterator[str]:
    """A REST server on a free loopback port; yields its base URL."""
    server = RestServer(manager, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()


def free_port() -> int:
    return processes.free_port()


def start_model_server(flags: list[str], ready: str) -> tuple[subprocess.Popen[str], list[str]]:
    """``python -m servectl.modelserver.server FLAGS`` until a stderr line contains ``ready``.

    Returns the process and the lines read; the caller asserts on them and stops it.
    """
    repo = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": str(repo), "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "servectl.modelserver.server", *flags],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=repo,
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    lines: list[str] = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        lines.append(line)
        if ready in line or not line:
            break
    return proc, lines


def end_model_server(proc: subprocess.Popen[str]) -> None:
    """Kill a server still running (a test that failed midway) and close its stderr."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    if proc.stderr is not None:
        proc.stderr.close()
