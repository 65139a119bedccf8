"""``servectl model export-demo``: real SavedModels, loaded back and called with TensorFlow."""

from __future__ import annotations

import inspect
import logging
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

tf = pytest.importorskip("tensorflow")
prediction_log_pb2 = pytest.importorskip("tensorflow_serving.apis.prediction_log_pb2")

from tensorflow.core.protobuf import saved_model_pb2  # noqa: E402

from servectl.cli import main as cli_main  # noqa: E402
from servectl.cli.model_cmd import export_demo_cmd  # noqa: E402
from servectl.modelserver import demo  # noqa: E402
from servectl.modelserver.models import ModelSpec  # noqa: E402

FAIL_SHARE = 0.1


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[demo.ExportedVersion]]:
    base = tmp_path_factory.mktemp("models")
    lines: list[str] = []
    written = demo.export_demo(base, fail_share=FAIL_SHARE, progress=lines.append)
    assert len(lines) == len(written) == 6
    return base, written


def load(base: Path, model: str, version: int) -> Any:
    return tf.saved_model.load(str(base / model / str(version)))


def examples(*values: float) -> Any:
    return tf.constant(
        [
            tf.train.Example(
                features=tf.train.Features(
                    feature={"x": tf.train.Feature(float_list=tf.train.FloatList(value=[v]))}
                )
            ).SerializeToString()
            for v in values
        ]
    )


def test_layout_is_tf_serving_base_path_with_integer_versions(exported: Any) -> None:
    base, written = exported
    assert [(w.model, w.version) for w in written] == [
        ("half_plus_two", 1), ("half_plus_two", 2),
        ("cost_model", 1), ("cost_model", 2), ("cost_model", 3), ("cost_model", 4),
    ]  # fmt: skip
    for w in written:
        assert w.path == base / w.model / str(w.version)
        assert (w.path / "saved_model.pb").is_file()
        assert (w.path / "variables" / "variables.index").is_file()
        assert (w.path / demo.WARMUP_FILE).is_file()
    assert sorted(p.name for p in (base / "cost_model").iterdir()) == ["1", "2", "3", "4"]


def test_half_plus_two_predict_classify_regress(exported: Any) -> None:
    base, _ = exported
    model = load(base, "half_plus_two", 1)
    predict = model.signatures["serving_default"]
    y = predict(x=tf.constant([[1.0], [2.0], [5.0]]))["y"]
    assert y.numpy().ravel().tolist() == [2.5, 3.0, 4.5]
    scores = model.signatures["classify_x_to_y"](inputs=examples(1.0, 2.0, 5.0))["scores"]
    assert scores.numpy().ravel().tolist() == [2.5, 3.0, 4.5]
    outputs = model.signatures["regress_x_to_y"](inputs=examples(1.0, 2.0, 5.0))["outputs"]
    assert outputs.numpy().ravel().tolist() == [2.5, 3.0, 4.5]
    v2 = load(base, "half_plus_two", 2).signatures["serving_default"]
    assert v2(x=tf.constant([[1.0]]))["y"].numpy().ravel().tolist() == [3.5]


def test_signature_defs_carry_tf_serving_method_names(exported: Any) -> None:
    base, _ = exported
    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((base / "half_plus_two" / "1" / "saved_model.pb").read_bytes())
    (meta_graph,) = saved.meta_graphs
    sigs = meta_graph.signature_def
    assert sigs["serving_default"].method_name == "tensorflow/serving/predict"
    assert sigs["classify_x_to_y"].method_name == "tensorflow/serving/classify"
    assert sigs["regress_x_to_y"].method_name == "tensorflow/serving/regress"
    assert set(sigs["serving_default"].inputs) == {"x"}
    assert set(sigs["serving_default"].outputs) == {"y"}
    assert set(sigs["classify_x_to_y"].inputs) == {"inputs"}
    assert set(sigs["classify_x_to_y"].outputs) == {"scores"}
    assert set(sigs["regress_x_to_y"].inputs) == {"inputs"}
    assert set(sigs["regress_x_to_y"].outputs) == {"outputs"}
    # The rewritten saved_model.pb still matches its fingerprint's checksum.
    from tensorflow.core.protobuf import fingerprint_pb2
    from tensorflow.python.saved_model.pywrap_saved_model import fingerprinting

    path = str(base / "half_plus_two" / "1")
    fresh = fingerprint_pb2.FingerprintDef.FromString(fingerprinting.CreateFingerprintDef(path))
    stored = tf.saved_model.experimental.read_fingerprint(path)
    assert stored.saved_model_checksum == fresh.saved_model_checksum


def test_cost_model_versions_one_two_four_answer_and_differ(exported: Any) -> None:
    base, _ = exported
    x = tf.constant([[1.0] * 8, [0.5] * 8])
    ys = {v: load(base, "cost_model", v).signatures["serving_default"](x=x)["y"] for v in (1, 2, 4)}
    assert ys[1].shape == (2, 1)
    assert ys[4].numpy().tolist() == ys[1].numpy().tolist()
    assert (abs(ys[2].numpy() - ys[1].numpy()) > 0.1).all()
    assert int(load(base, "cost_model", 1).work.numpy()) == demo.DEFAULT_COST
    assert int(load(base, "cost_model", 4).work.numpy()) == 2 * demo.DEFAULT_COST


def test_cost_model_v3_fails_about_the_configured_share(exported: Any) -> None:
    base, _ = exported
    predict = load(base, "cost_model", 3).signatures["serving_default"]
    x = tf.ones([1, 8])
    failures = 0
    for _ in range(300):
        try:
            predict(x=x)
        except tf.errors.InvalidArgumentError as exc:
            assert "injected failure" in exc.message
            failures += 1
    assert 0.03 * 300 <= failures <= 0.20 * 300


def test_cost_model_v4_is_slower_than_v1(exported: Any) -> None:
    base, _ = exported
    x = tf.ones([1, 8])
    fast = load(base, "cost_model", 1).signatures["serving_default"]
    slow = load(base, "cost_model", 4).signatures["serving_default"]
    fast(x=x), slow(x=x)  # trace and warm both
    times: dict[str, list[float]] = {"fast": [], "slow": []}
    for _ in range(20):  # interleaved, so load on the machine hits both alike
        for name, fn in (("fast", fast), ("slow", slow)):
            started = time.perf_counter()
            fn(x=x)
            times[name].append(time.perf_counter() - started)
    assert statistics.median(times["slow"]) > 1.3 * statistics.median(times["fast"])


def test_warmup_files_are_prediction_logs_for_the_model(exported: Any) -> None:
    _, written = exported
    for w in written:
        records = list(tf.data.TFRecordDataset(str(w.path / demo.WARMUP_FILE)).as_numpy_iterator())
        assert 1 <= len(records) <= 1000
        kinds = []
        for raw in records:
            log = prediction_log_pb2.PredictionLog.FromString(raw)
            kind = log.WhichOneof("log_type")
            kinds.append(kind)
            request = getattr(log, kind).request
            assert request.model_spec.name == w.model
        assert "predict_log" in kinds
        if w.model == "half_plus_two":
            assert set(kinds) == {"predict_log", "classify_log", "regress_log"}


def test_warmup_requests_run_against_the_model_without_failing(exported: Any) -> None:
    """Replay the warmup (as TF Serving does at load); version 3 must not fail it."""
    base, _ = exported
    for version in (1, 3):
        path = base / "cost_model" / str(version)
        predict = load(base, "cost_model", version).signatures["serving_default"]
        for raw in tf.data.TFRecordDataset(str(path / demo.WARMUP_FILE)).as_numpy_iterator():
            request = prediction_log_pb2.PredictionLog.FromString(raw).predict_log.request
            x = tf.make_ndarray(request.inputs["x"])
            assert predict(x=tf.constant(x))["y"].shape == (x.shape[0], 1)


def test_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    (tmp_path / "half_plus_two" / "2").mkdir(parents=True)
    with pytest.raises(demo.VersionExistsError, match=r"half_plus_two/2 already exist") as info:
        demo.export_demo(tmp_path, ["half_plus_two"])
    assert info.value.paths == [tmp_path / "half_plus_two" / "2"]
    assert not (tmp_path / "half_plus_two" / "1").exists()  # nothing written
    written = demo.export_demo(tmp_path, ["half_plus_two"], force=True)
    assert [w.version for w in written] == [1, 2]
    assert (tmp_path / "half_plus_two" / "2" / "saved_model.pb").is_file()
    assert [p.name for p in (tmp_path / "half_plus_two").iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"models": ["resnet"]}, "unknown model"),
        ({"cost": 0}, "cost 0"),
        ({"fail_share": 1.0}, "fail share"),
        ({"slow_factor": 0.5}, "slow factor"),
    ],
)
def test_bad_options_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(demo.DemoExportError, match=message):
        demo.plan(**kwargs)


def test_plan_options_shape_versions() -> None:
    plans = demo.plan(["cost_model"], cost=10, fail_share=0.25, slow_factor=3)
    assert [(p.version, p.work, p.fail_share) for p in plans] == [
        (1, 10, 0.0), (2, 10, 0.0), (3, 10, 0.25), (4, 30, 0.0),
    ]  # fmt: skip


def test_cli_defaults_match_the_library() -> None:
    params = inspect.signature(export_demo_cmd).parameters
    assert params["cost"].default == demo.DEFAULT_COST
    assert params["fail_share"].default == demo.DEFAULT_FAIL_SHARE
    assert params["slow_factor"].default == demo.DEFAULT_SLOW_FACTOR


def test_cli_export_demo_writes_table_and_refuses_second_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_main.out, "width", 10_000)
    monkeypatch.setattr(cli_main.err, "width", 10_000)
    runner = CliRunner()
    args = ["model", "export-demo", str(tmp_path), "--models", "cost_model", "--cost", "2"]
    result = runner.invoke(cli_main.app, args)
    assert result.exit_code == 0, result.output
    assert "writing cost_model v3: failing" in result.stderr
    assert "slow: cost 4 (2x)" in result.stdout
    config = tmp_path / "models.config"
    assert (
        "serve them (cost_model, cost_model_failing, cost_model_slow): servectl model-server "
        f"--model_config_file={config} --rest_api_port=8501 --port=8500"
    ) in result.stdout
    assert 'name: "cost_model_failing"' in config.read_text()
    assert "half_plus_two" not in config.read_text()
    config.write_text("# edited by hand\n" + config.read_text())
    again = runner.invoke(cli_main.app, args)
    assert again.exit_code == 2
    assert "already exist" in again.stderr and "--force" in again.stderr
    assert config.read_text().startswith("# edited by hand")  # a refused run writes nothing
    forced = runner.invoke(cli_main.app, [*args, "--force", "--slow-factor", "3"])
    assert forced.exit_code == 0, forced.output
    assert "slow: cost 6 (3x)" in forced.stdout
    assert config.read_text().startswith("# Written by")


def test_models_config_serves_each_demo_version_under_its_name(exported: Any) -> None:
    from servectl.modelserver.models import ModelManager, parse_model_config_text

    base, _ = exported
    manager = ModelManager(warmup=False)
    manager.load(parse_model_config_text(demo.model_config_text(base)))
    served = {
        name: manager.resolve(ModelSpec(name)).version
        for name in ("half_plus_two", "cost_model", "cost_model_failing", "cost_model_slow")
    }
    assert served == {
        "half_plus_two": 2,
        "cost_model": 2,
        "cost_model_failing": 3,
        "cost_model_slow": 4,
    }
    assert manager.resolve(ModelSpec("cost_model", label="stable")).version == 1


def test_cli_help_names_versions_and_options() -> None:
    result = CliRunner().invoke(cli_main.app, ["model", "export-demo", "--help"])
    assert result.exit_code == 0
    for text in ("--fail-share", "--slow-factor", "--force", "failing", "slow", "y = 0.5x + 2"):
        assert text in result.stdout


def test_cli_import_does_not_import_tensorflow() -> None:
    code = "import sys, servectl.cli.main; print('tensorflow' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_cli_rejects_unknown_model(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli_main.app, ["model", "export-demo", str(tmp_path), "--models", "resnet"]
    )
    assert result.exit_code == 2
    assert "unknown model" in result.stderr


def test_every_demo_version_loads_and_warms_up_in_the_server(
    exported: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The server replays each version's warmup file at load (predict, classify, regress)."""
    from servectl.modelserver.models import ModelConfig, ModelManager, VersionPolicy
    from servectl.modelserver.warmup import replay_warmup

    base, written = exported
    caplog.set_level(logging.INFO, logger="servectl.modelserver.warmup")
    manager = ModelManager()
    manager.load(
        [
            ModelConfig(m, str(base / m), VersionPolicy("all"))
            for m in ("half_plus_two", "cost_model")
        ]
    )
    finished = [
        r.getMessage() for r in caplog.records if "Finished reading warmup" in r.getMessage()
    ]
    assert len(finished) == len(written)
    # Each version warmed up once with all its records; a replay gives the same count.
    hpt = manager.resolve(ModelSpec("half_plus_two", version=1))
    records = list(tf.data.TFRecordDataset(str(Path(hpt.path) / demo.WARMUP_FILE)))
    assert replay_warmup(hpt) == len(records) >= 3


def test_demo_half_plus_two_answers_tf_servings_documented_rest_examples(exported: Any) -> None:
    """TF Serving's REST docs: instances [1.0, 2.0, 5.0] -> predictions [2.5, 3.0, 4.5]."""
    import json

    from servectl.modelserver.models import ModelConfig, ModelManager, VersionPolicy
    from servectl.modelserver.rest_api import RestApi

    base, _ = exported
    manager = ModelManager()
    manager.load([ModelConfig("half_plus_two", str(base / "half_plus_two"), VersionPolicy("all"))])
    api = RestApi(manager)

    def post(path: str, body: dict[str, Any]) -> tuple[int, Any]:
        return api.handle("POST", path, json.dumps(body).encode())

    v1 = "/v1/models/half_plus_two/versions/1"
    assert post(f"{v1}:predict", {"instances": [1.0, 2.0, 5.0]}) == (
        200,
        {"predictions": [2.5, 3.0, 4.5]},
    )
    assert post(f"{v1}:predict", {"instances": [[1.0], [2.0], [5.0]]}) == (
        200,
        {"predictions": [[2.5], [3.0], [4.5]]},
    )
    assert post("/v1/models/half_plus_two:predict", {"instances": [1.0]}) == (
        200,
        {"predictions": [3.5]},
    )
    regress = {"signature_name": "regress_x_to_y", "examples": [{"x": 1.0}, {"x": 5.0}]}
    status, got = post(f"{v1}:regress", regress)
    assert status == 200 and [round(v, 6) for v in got["results"]] == [2.5, 4.5]
    status, got = api.handle("GET", "/v1/models/half_plus_two", b"")
    assert status == 200 and got["model_version_status"][0]["state"] == "AVAILABLE"


def test_the_documented_curl_examples_answer_as_written(exported: Any) -> None:
    """docs/modelserver.md's "Running" block, replayed against export-demo's models.config:
    every ``curl -d BODY URL`` answers the ``# {...}`` line under it."""
    import json
    import re

    from servectl.modelserver.models import ModelManager, parse_model_config_text
    from servectl.modelserver.rest_api import RestApi

    base, _ = exported
    doc = (Path(__file__).resolve().parents[3] / "docs" / "modelserver.md").read_text()
    block = doc.split("## Running", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    assert "--model_config_file=models/models.config" in block
    calls = re.findall(
        r"curl -d '(?P<body>[^']*)' \\\n\s+localhost:8501(?P<path>\S+)\n# (?P<answer>\{.*\})",
        block,
    )
    assert len(calls) == 2
    manager = ModelManager()
    manager.load(parse_model_config_text(demo.model_config_text(base, ["half_plus_two"])))
    api = RestApi(manager)
    for body, path, answer in calls:
        assert api.handle("POST", path, body.encode()) == (200, json.loads(answer)), path
