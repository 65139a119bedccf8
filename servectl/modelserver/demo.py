"""Demo SavedModels in TF Serving's layout: ``DIR/<model>/<version>/saved_model.pb``.

Two models, written with ``tf.Module`` + ``tf.function`` and ``tf.saved_model.save``:

``half_plus_two``
    TF Serving's own test model, rebuilt in TF2: ``y = 0.5 * x + 2`` (version 1) and
    ``y = 0.5 * x + 3`` (version 2). Signatures ``serving_default`` (predict, ``x`` ->
    ``y``), ``classify_x_to_y`` (classify, serialized ``tf.Example`` ``inputs`` ->
    ``scores``) and ``regress_x_to_y`` (regress, ``inputs`` -> ``outputs``).

``cost_model``
    A model whose CPU cost per request is a parameter (``work`` = chained 64x64 matmuls
    per request): version 1 stable, 2 a good new version (other weights, same cost), 3 a
    bad one that fails a share of requests with InvalidArgument, 4 a slow one (cost x a
    factor). Signature ``serving_default``: ``x`` float32 [None, 8] -> ``y`` [None, 1].

Every version carries ``assets.extra/tf_serving_warmup_requests`` (TFRecord of
``PredictionLog``), which TF Serving replays at load time. TensorFlow is imported inside
the functions, so importing this module stays cheap. See docs/models.md.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HALF_PLUS_TWO = "half_plus_two"
COST_MODEL = "cost_model"
MODELS = (HALF_PLUS_TWO, COST_MODEL)

DEFAULT_COST = 50
"""Chained 64x64 matmuls per request for cost_model versions 1-3 (see docs/models.md)."""
DEFAULT_FAIL_SHARE = 0.1
DEFAULT_SLOW_FACTOR = 2.0
MATRIX_SIZE = 128
COST_FEATURES = 8

PREDICT_METHOD = "tensorflow/serving/predict"
CLASSIFY_METHOD = "tensorflow/serving/classify"
REGRESS_METHOD = "tensorflow/serving/regress"
DEFAULT_SIGNATURE = "serving_default"
CLASSIFY_SIGNATURE = "classify_x_to_y"
REGRESS_SIGNATURE = "regress_x_to_y"
WARMUP_FILE = Path("assets.extra") / "tf_serving_warmup_requests"
WARMUP_RECORDS = 3
"""Warmup records per cost_model version; version 3 never fails its first this-many calls."""


class DemoExportError(ValueError):
    """Bad options, or a version directory already there (pass ``force=True``)."""


class VersionExistsError(DemoExportError):
    """Version directories that are already there; nothing was written."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self.paths = list(paths)
        listed = ", ".join(str(path) for path in self.paths)
        super().__init__(f"{listed} already exist; pass force=True to replace them")


@dataclasses.dataclass(frozen=True)
class ExportedVersion:
    """One version written: where, and what it is."""

    model: str
    version: int
    path: Path
    description: str


@dataclasses.dataclass(frozen=True)
class VersionPlan:
    model: str
    version: int
    description: str
    bias: float = 2.0  # half_plus_two: y = 0.5 x + bias
    work: int = 0  # cost_model: matmuls per request
    weight_scale: float = 1.0
    fail_share: float = 0.0


def plan(
    models: Sequence[str] = MODELS,
    *,
    cost: int = DEFAULT_COST,
    fail_share: float = DEFAULT_FAIL_SHARE,
    slow_factor: float = DEFAULT_SLOW_FACTOR,
) -> list[VersionPlan]:
    """The versions ``export_demo`` writes, in order; raises DemoExportError on bad options."""
    unknown = [m for m in models if m not in MODELS]
    if unknown or not models:
        raise DemoExportError(
            f"unknown model(s) {', '.join(unknown) or '(none given)'}; choose from "
            f"{', '.join(MODELS)}"
        )
    if cost < 1:
        raise DemoExportError(f"cost {cost}: give at least 1 matmul per request")
    if not 0.0 <= fail_share < 1.0:
        raise DemoExportError(f"fail share {fail_share:g}: give a share in [0, 1), e.g. 0.1")
    if slow_factor < 1.0:
        raise DemoExportError(f"slow factor {slow_factor:g}: give a factor >= 1, e.g. 2")
    slow_work = max(cost + 1, round(cost * slow_factor))
    plans: list[VersionPlan] = []
    if HALF_PLUS_TWO in models:
        plans += [
            VersionPlan(HALF_PLUS_TWO, 1, "y = 0.5x + 2 (TF Serving's test model)", bias=2.0),
            VersionPlan(HALF_PLUS_TWO, 2, "y = 0.5x + 3 (a new version, other output)", bias=3.0),
        ]
    if COST_MODEL in models:
        plans += [
            VersionPlan(COST_MODEL, 1, f"stable: cost {cost}", work=cost),
            VersionPlan(
                COST_MODEL, 2, f"good: cost {cost}, weights x1.1", work=cost, weight_scale=1.1
            ),
            VersionPlan(
                COST_MODEL,
                3,
                f"failing: cost {cost}, fails {fail_share:.0%} of requests",
                work=cost,
                fail_share=fail_share,
            ),
            VersionPlan(
                COST_MODEL, 4, f"slow: cost {slow_work} ({slow_factor:g}x)", work=slow_work
            ),
        ]
    return plans


def export_demo(
    directory: Path,
    models: Sequence[str] = MODELS,
    *,
    cost: int = DEFAULT_COST,
    fail_share: float = DEFAULT_FAIL_SHARE,
    slow_factor: float = DEFAULT_SLOW_FACTOR,
    force: bool = False,
    progress: Callable[[str], None] | None = None,
) -> list[ExportedVersion]:
    """Write the demo models into ``directory/<model>/<version>/`` and return what was written.

    Refuses (VersionExistsError, nothing written) if any version directory exists, unless
    ``force``. Each version is saved into a hidden sibling directory and renamed into place,
    so a model server polling ``directory/<model>`` never sees half a version.
    """
    plans = plan(models, cost=cost, fail_share=fail_share, slow_factor=slow_factor)
    existing = [
        directory / p.model / str(p.version)
        for p in plans
        if (directory / p.model / str(p.version)).exists()
    ]
    if existing and not force:
        raise VersionExistsError(existing)
    written = []
    for p in plans:
        target = directory / p.model / str(p.version)
        if progress is not None:
            progress(f"{p.model} v{p.version}: {p.description} -> {target}")
        staging = directory / p.model / f".{p.version}.partial"
        if staging.exists():
            shutil.rmtree(staging)
        staging.parent.mkdir(parents=True, exist_ok=True)
        _save(p, staging)
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
        written.append(ExportedVersion(p.model, p.version, target, p.description))
    return written


CONFIG_FILE = "models.config"
SERVED_NAMES = {
    HALF_PLUS_TWO: (HALF_PLUS_TWO,),
    COST_MODEL: (COST_MODEL, f"{COST_MODEL}_failing", f"{COST_MODEL}_slow"),
}
"""The model names ``models.config`` serves, per demo model."""


def model_config_text(directory: Path, models: Sequence[str] = MODELS) -> str:
    """A ``--model_config_file`` serving the demo versions under sensible names.

    ``half_plus_two`` serves versions 1 and 2 (labels ``stable`` = 1, ``canary`` = 2).
    ``cost_model`` serves the stable and good versions 1 and 2 (same labels), and the bad
    versions get their own names over the same base path, so an unversioned request never
    lands on them by accident: ``cost_model_failing`` (version 3) and ``cost_model_slow``
    (version 4).
    """
    base = directory.resolve()

    def entry(name: str, model: str, versions: Sequence[int], labels: Sequence[str]) -> str:
        listed = " ".join(f"versions: {v}" for v in versions)
        lines = [
            "  config {",
            f'    name: "{name}"',
            f'    base_path: "{base / model}"',
            '    model_platform: "tensorflow"',
            f"    model_version_policy {{ specific {{ {listed} }} }}",
            *(
                f'    version_labels {{ key: "{label}" value: {v} }}'
                for label, v in zip(labels, versions, strict=False)
            ),
            "  }",
        ]
        return "\n".join(lines)

    entries = []
    if HALF_PLUS_TWO in models:
        entries.append(entry(HALF_PLUS_TWO, HALF_PLUS_TWO, [1, 2], ["stable", "canary"]))
    if COST_MODEL in models:
        entries += [
            entry(COST_MODEL, COST_MODEL, [1, 2], ["stable", "canary"]),
            entry(SERVED_NAMES[COST_MODEL][1], COST_MODEL, [3], []),
            entry(SERVED_NAMES[COST_MODEL][2], COST_MODEL, [4], []),
        ]
    header = (
        "# Written by `servectl model export-demo`. Serve it with\n"
        f"#   servectl model-server --model_config_file={base / CONFIG_FILE} "
        "--rest_api_port=8501 --port=8500\n"
    )
    return header + "model_config_list {\n" + "\n".join(entries) + "\n}\n"


def write_model_config(
    directory: Path, models: Sequence[str], *, force: bool = False
) -> Path | None:
    """Write ``directory/models.config`` unless one is there (kept: it may be edited)."""
    path = directory / CONFIG_FILE
    if path.exists() and not force:
        return None
    path.write_text(model_config_text(directory, models))
    return path


# --------------------------------------------------------------------------- building


def _save(p: VersionPlan, export_dir: Path) -> None:
    from servectl.modelserver import tf_startup

    tf = tf_startup.import_tensorflow()  # the CLI's stderr without TensorFlow's start-up noise

    if p.model == HALF_PLUS_TWO:
        module, signatures = _half_plus_two(tf, p.bias)
    else:
        module, signatures = _cost_model(tf, p)
    tf.saved_model.save(module, str(export_dir), signatures=signatures)
    if p.model == HALF_PLUS_TWO:
        _set_method_names(
            export_dir, {CLASSIFY_SIGNATURE: CLASSIFY_METHOD, REGRESS_SIGNATURE: REGRESS_METHOD}
        )
    _write_warmup(tf, p, export_dir)


def _half_plus_two(tf: Any, bias: float) -> tuple[Any, dict[str, Any]]:
    """y = a*x + b with a, b variables (as in TF Serving's test model), three signatures."""
    module = tf.Module()
    module.a = tf.Variable(0.5, name="a")
    module.b = tf.Variable(bias, name="b")

    def from_examples(serialized: Any) -> Any:
        # Each tf.Example carries one float feature "x"; gives x as [batch, 1].
        features = {"x": tf.io.FixedLenFeature([1], tf.float32)}
        return tf.io.parse_example(serialized, features)["x"]

    def predict(x: Any) -> dict[str, Any]:
        return {"y": module.a * x + module.b}

    def classify(inputs: Any) -> dict[str, Any]:
        return {"scores": predict(from_examples(inputs))["y"]}

    def regress(inputs: Any) -> dict[str, Any]:
        return {"outputs": predict(from_examples(inputs))["y"]}

    examples = tf.TensorSpec([None], tf.string, name="inputs")
    # Any shape: TF Serving's half_plus_two declares x as [-1, 1], yet its documented
    # example feeds [1.0, 2.0, 5.0] (shape [3]) and gets [2.5, 3.0, 4.5], because a TF1
    # session accepts any shape for a fed tensor. A tf.function checks its signature, so
    # the rebuilt model leaves the shape open to answer both [3] and [3, 1] the same way.
    module.predict = tf.function(
        predict, input_signature=[tf.TensorSpec(None, tf.float32, name="x")]
    )
    module.classify = tf.function(classify, input_signature=[examples])
    module.regress = tf.function(regress, input_signature=[examples])
    return module, {
        DEFAULT_SIGNATURE: module.predict,
        CLASSIFY_SIGNATURE: module.classify,
        REGRESS_SIGNATURE: module.regress,
    }


def _cost_model(tf: Any, p: VersionPlan) -> tuple[Any, dict[str, Any]]:
    """y = x . w + 1, after ``work`` chained matmuls on a fixed 64x64 matrix (the cost).

    The matmul chain starts from the input, so no optimizer can fold it away, and the
    output waits on it through a control dependency, so its value does not change ``y``.
    Version 3 draws a uniform number per request and asserts it is below ``1 - share``.
    """
    module = tf.Module()
    n = MATRIX_SIZE
    # An orthogonal-ish fixed matrix keeps the chained products bounded.
    rotation = tf.linalg.qr(tf.reshape(tf.sin(tf.range(n * n, dtype=tf.float32)), [n, n]))[0]
    module.matrix = tf.Variable(rotation, trainable=False, name="matrix")
    weights = p.weight_scale * tf.linspace(0.1, 0.8, COST_FEATURES)
    module.w = tf.Variable(tf.reshape(weights, [COST_FEATURES, 1]), name="w")
    module.work = tf.Variable(p.work, dtype=tf.int64, trainable=False, name="work")
    module.fail_share = tf.Variable(p.fail_share, trainable=False, name="fail_share")
    module.calls = tf.Variable(0, dtype=tf.int64, trainable=False, name="calls")
    fail_share = p.fail_share

    def predict(x: Any) -> dict[str, Any]:
        state = tf.fill([n, n], tf.reduce_mean(x)) + module.matrix
        for _ in tf.range(module.work):
            state = tf.tanh(tf.matmul(state, module.matrix))
        guards = [tf.reduce_sum(state)]
        if fail_share > 0:
            calls = module.calls.assign_add(1)
            draw = tf.random.uniform([])
            # The first WARMUP_RECORDS calls (TF Serving's warmup) always succeed.
            draw = tf.where(calls <= WARMUP_RECORDS, tf.constant(0.0), draw)
            guards.append(
                tf.debugging.assert_less(
                    draw,
                    tf.constant(1.0 - fail_share),
                    message=f"cost_model: injected failure ({fail_share:.0%} of requests)",
                )
            )
        with tf.control_dependencies(guards):
            return {"y": tf.matmul(x, module.w) + 1.0}

    module.predict = tf.function(
        predict,
        input_signature=[tf.TensorSpec([None, COST_FEATURES], tf.float32, name="x")],
    )
    return module, {DEFAULT_SIGNATURE: module.predict}


def _set_method_names(export_dir: Path, methods: dict[str, str]) -> None:
    """Set SignatureDef.method_name in saved_model.pb (TF2's save always writes predict).

    TF Serving's Classify and Regress APIs only accept signatures whose method_name says
    so. The fingerprint (a checksum of saved_model.pb) is rewritten to match.
    """
    from tensorflow.core.protobuf import saved_model_pb2

    path = export_dir / "saved_model.pb"
    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString(path.read_bytes())
    for meta_graph in saved.meta_graphs:
        for key, method in methods.items():
            meta_graph.signature_def[key].method_name = method
    path.write_bytes(saved.SerializeToString())
    try:
        from tensorflow.python.saved_model import fingerprinting_utils

        fingerprinting_utils.write_fingerprint(str(export_dir))
    except Exception:  # private API: without it, drop the stale fingerprint (optional file)
        (export_dir / "fingerprint.pb").unlink(missing_ok=True)


def warmup_requests(p: VersionPlan) -> list[Any]:
    """PredictionLog records TF Serving replays when it loads this version."""
    import tensorflow as tf
    from tensorflow_serving.apis import (
        classification_pb2,
        predict_pb2,
        prediction_log_pb2,
        regression_pb2,
    )

    logs = []
    if p.model == HALF_PLUS_TWO:
        request = predict_pb2.PredictRequest()
        request.model_spec.name = p.model
        request.model_spec.signature_name = DEFAULT_SIGNATURE
        request.inputs["x"].CopyFrom(tf.make_tensor_proto([[1.0], [2.0], [5.0]], tf.float32))
        logs.append(
            prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request)
            )
        )
        classify = classification_pb2.ClassificationRequest()
        classify.model_spec.name = p.model
        classify.model_spec.signature_name = CLASSIFY_SIGNATURE
        regress = regression_pb2.RegressionRequest()
        regress.model_spec.name = p.model
        regress.model_spec.signature_name = REGRESS_SIGNATURE
        for value in (1.0, 2.0):
            for target in (classify, regress):
                example = target.input.example_list.examples.add()
                example.features.feature["x"].float_list.value.append(value)
        logs.append(
            prediction_log_pb2.PredictionLog(
                classify_log=prediction_log_pb2.ClassifyLog(request=classify)
            )
        )
        logs.append(
            prediction_log_pb2.PredictionLog(
                regress_log=prediction_log_pb2.RegressLog(request=regress)
            )
        )
        return logs
    for batch in range(1, WARMUP_RECORDS + 1):
        request = predict_pb2.PredictRequest()
        request.model_spec.name = p.model
        request.model_spec.signature_name = DEFAULT_SIGNATURE
        values = [[0.1 * (i + j) for j in range(COST_FEATURES)] for i in range(batch)]
        request.inputs["x"].CopyFrom(tf.make_tensor_proto(values, tf.float32))
        logs.append(
            prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request)
            )
        )
    return logs


def _write_warmup(tf: Any, p: VersionPlan, export_dir: Path) -> None:
    path = export_dir / WARMUP_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for log in warmup_requests(p):
            writer.write(log.SerializeToString())
