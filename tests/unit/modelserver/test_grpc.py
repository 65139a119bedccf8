"""The gRPC API through tensorflow-serving-api's own client stubs, over loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
grpc = pytest.importorskip("grpc")

from google.protobuf import text_format  # noqa: E402
from tensorflow_serving.apis import (  # noqa: E402
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)
from tensorflow_serving.config import model_server_config_pb2  # noqa: E402

from servectl.modelserver.grpc_api import GrpcServer, serve_grpc  # noqa: E402
from servectl.modelserver.models import ModelManager, parse_model_config_text  # noqa: E402

from .conftest import MODEL, config_text, end_model_server, free_port, start_model_server  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
AVAILABLE = get_model_status_pb2.ModelVersionStatus.AVAILABLE
END = get_model_status_pb2.ModelVersionStatus.END


class Client:
    def __init__(self, channel: Any) -> None:
        self.predictions = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        self.models = model_service_pb2_grpc.ModelServiceStub(channel)


@pytest.fixture(scope="module")
def server(model_base: Path) -> Iterator[GrpcServer]:
    # Its own manager: the reload tests change what it serves.
    manager = ModelManager()
    manager.load(parse_model_config_text(config_text(model_base)))
    srv = serve_grpc(manager, "127.0.0.1", 0, max_workers=4)
    try:
        yield srv
    finally:
        srv.stop(None).wait()


@pytest.fixture(scope="module")
def client(server: GrpcServer) -> Iterator[Client]:
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        yield Client(channel)


def _predict_request(
    values: Any = (1.0, 2.0, 5.0),
    *,
    name: str = MODEL,
    version: int | None = None,
    label: str | None = None,
    signature: str = "",
    dtype: Any = None,
) -> Any:
    req = predict_pb2.PredictRequest()
    req.model_spec.name = name
    if version is not None:
        req.model_spec.version.value = version
    if label is not None:
        req.model_spec.version_label = label
    req.model_spec.signature_name = signature
    req.inputs["x"].CopyFrom(tf.make_tensor_proto(list(values), dtype=dtype or tf.float32))
    return req


def _y(response: Any) -> list[float]:
    return [float(v) for v in tf.make_ndarray(response.outputs["y"])]


def _examples_input(target: Any, xs: list[float]) -> None:
    for x in xs:
        ex = target.example_list.examples.add()
        ex.features.feature["x"].float_list.value.append(x)


def _assert_still_serving(client: Client) -> None:
    assert _y(client.predictions.Predict(_predict_request(), timeout=30)) == [2.5, 3.0, 4.5]


def _code_of(call: Any) -> tuple[Any, str]:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value.code(), info.value.details()


# --------------------------------------------------------------------------- Predict


def test_predict_half_plus_two(client: Client) -> None:
    response = client.predictions.Predict(_predict_request(), timeout=30)
    assert _y(response) == [2.5, 3.0, 4.5]
    assert response.model_spec.name == MODEL
    assert response.model_spec.version.value == 2
    assert response.model_spec.signature_name == "serving_default"
    assert tf.make_ndarray(response.outputs["y"]).dtype == np.float32


def test_predict_version_and_label_routing(client: Client) -> None:
    v1 = client.predictions.Predict(_predict_request(version=1), timeout=30)
    assert _y(v1) == [1.5, 2.0, 3.5]
    assert v1.model_spec.version.value == 1
    stable = client.predictions.Predict(_predict_request(label="stable"), timeout=30)
    assert _y(stable) == [1.5, 2.0, 3.5]
    assert stable.model_spec.version.value == 1
    canary = client.predictions.Predict(_predict_request(label="canary"), timeout=30)
    assert _y(canary) == [2.5, 3.0, 4.5]


def test_predict_multi_output_and_output_filter(client: Client) -> None:
    req = predict_pb2.PredictRequest()
    req.model_spec.name = MODEL
    req.model_spec.signature_name = "add"
    req.inputs["a"].CopyFrom(tf.make_tensor_proto([3.0, 4.0], dtype=tf.float32))
    req.inputs["b"].CopyFrom(tf.make_tensor_proto([1.0, 1.0], dtype=tf.float32))
    both = client.predictions.Predict(req, timeout=30)
    assert set(both.outputs) == {"sum", "diff"}
    assert list(tf.make_ndarray(both.outputs["sum"])) == [4.0, 5.0]
    assert both.model_spec.signature_name == "add"
    req.output_filter.append("diff")
    only = client.predictions.Predict(req, timeout=30)
    assert set(only.outputs) == {"diff"}
    assert list(tf.make_ndarray(only.outputs["diff"])) == [2.0, 3.0]
    req.output_filter.append("nope")
    code, details = _code_of(lambda: client.predictions.Predict(req, timeout=30))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "output tensor alias not found in signature: nope" in details


def test_predict_strings(client: Client) -> None:
    req = predict_pb2.PredictRequest()
    req.model_spec.name = MODEL
    req.model_spec.signature_name = "echo"
    req.inputs["s"].CopyFrom(tf.make_tensor_proto([b"ab", b"\xff\x00"], dtype=tf.string))
    response = client.predictions.Predict(req, timeout=30)
    assert list(tf.make_ndarray(response.outputs["s_bytes"])) == [b"ab", b"\xff\x00"]
    assert list(tf.make_ndarray(response.outputs["length"])) == [2, 2]


@pytest.mark.parametrize(
    ("request_kwargs", "code", "message"),
    [
        (
            {"name": "nope"},
            "NOT_FOUND",
            "Servable not found for request: Latest(nope)",
        ),
        (
            {"version": 9},
            "NOT_FOUND",
            f"Servable not found for request: Specific({MODEL}, 9)",
        ),
        (
            {"label": "nope"},
            "INVALID_ARGUMENT",
            "Unrecognized servable version label: nope",
        ),
        (
            {"values": ["a", "b"], "dtype": tf.string},
            "INVALID_ARGUMENT",
            "Expects arg[0] to be float but string is provided",
        ),
        (
            {"values": [1.0], "dtype": tf.float64},
            "INVALID_ARGUMENT",
            "Expects arg[0] to be float but double is provided",
        ),
        (
            {"signature": "nope"},
            "INVALID_ARGUMENT",
            'Serving signature name: "nope" not found in signature def',
        ),
    ],
)
def test_predict_errors_and_keeps_serving(
    client: Client, request_kwargs: dict[str, Any], code: str, message: str
) -> None:
    req = _predict_request(**request_kwargs)
    got_code, details = _code_of(lambda: client.predictions.Predict(req, timeout=30))
    assert got_code == getattr(grpc.StatusCode, code)
    assert details == message
    _assert_still_serving(client)


def test_predict_wrong_input_name_and_shape(client: Client) -> None:
    req = _predict_request()
    req.inputs["z"].CopyFrom(req.inputs.pop("x"))
    code, details = _code_of(lambda: client.predictions.Predict(req, timeout=30))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "Missing: ['x']" in details
    req = _predict_request()
    req.inputs["x"].CopyFrom(tf.make_tensor_proto([[1.0]], dtype=tf.float32))
    code, details = _code_of(lambda: client.predictions.Predict(req, timeout=30))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "shape [1, 1] is not compatible" in details
    _assert_still_serving(client)


# --------------------------------------------------------------------------- metadata, status


def test_get_model_metadata(client: Client) -> None:
    req = get_model_metadata_pb2.GetModelMetadataRequest()
    req.model_spec.name = MODEL
    req.metadata_field.append("signature_def")
    response = client.predictions.GetModelMetadata(req, timeout=30)
    assert response.model_spec.name == MODEL
    assert response.model_spec.version.value == 2
    sig_map = get_model_metadata_pb2.SignatureDefMap()
    assert response.metadata["signature_def"].Unpack(sig_map)
    assert "serving_default" in sig_map.signature_def
    serving = sig_map.signature_def["serving_default"]
    assert serving.method_name == "tensorflow/serving/predict"
    assert serving.inputs["x"].dtype == tf.float32.as_datatype_enum
    classify = sig_map.signature_def["classify_x_to_y"]
    assert classify.method_name == "tensorflow/serving/classify"

    req.ClearField("metadata_field")
    code, details = _code_of(lambda: client.predictions.GetModelMetadata(req, timeout=30))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "at least one metadata_field" in details
    req.metadata_field.append("signature_def")
    req.model_spec.name = "nope"
    code, _ = _code_of(lambda: client.predictions.GetModelMetadata(req, timeout=30))
    assert code == grpc.StatusCode.NOT_FOUND
    _assert_still_serving(client)


def _status(client: Client, name: str = MODEL, **spec: Any) -> list[tuple[int, int, int]]:
    req = get_model_status_pb2.GetModelStatusRequest()
    req.model_spec.name = name
    if "version" in spec:
        req.model_spec.version.value = spec["version"]
    if "label" in spec:
        req.model_spec.version_label = spec["label"]
    response = client.models.GetModelStatus(req, timeout=30)
    return [(s.version, s.state, s.status.error_code) for s in response.model_version_status]


def test_get_model_status(client: Client) -> None:
    assert _status(client) == [(2, AVAILABLE, 0), (1, AVAILABLE, 0)]
    assert _status(client, version=1) == [(1, AVAILABLE, 0)]
    assert _status(client, label="canary") == [(2, AVAILABLE, 0)]
    assert _status(client, "latest_only") == [(2, AVAILABLE, 0)]
    code, details = _code_of(lambda: _status(client, "nope"))
    assert (code, details) == (
        grpc.StatusCode.NOT_FOUND,
        "Could not find any versions of model nope",
    )
    code, details = _code_of(lambda: _status(client, version=9))
    assert (code, details) == (
        grpc.StatusCode.NOT_FOUND,
        f"Could not find version 9 of model {MODEL}",
    )
    code, _ = _code_of(lambda: _status(client, ""))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    _assert_still_serving(client)


# --------------------------------------------------------------------------- classify, regress


def test_classify(client: Client) -> None:
    req = classification_pb2.ClassificationRequest()
    req.model_spec.name = MODEL
    req.model_spec.signature_name = "classify_x_to_y"
    _examples_input(req.input, [1.0, 2.0])
    response = client.predictions.Classify(req, timeout=30)
    scores = [[c.score for c in row.classes] for row in response.result.classifications]
    assert scores == [[2.5], [3.0]]
    assert response.model_spec.version.value == 2
    assert response.model_spec.signature_name == "classify_x_to_y"

    req.model_spec.signature_name = "serving_default"
    code, details = _code_of(lambda: client.predictions.Classify(req, timeout=30))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "Expected classification signature method_name" in details
    _assert_still_serving(client)


def test_regress_with_context_and_label(client: Client) -> None:
    req = regression_pb2.RegressionRequest()
    req.model_spec.name = MODEL
    req.model_spec.version_label = "stable"
    req.model_spec.signature_name = "regress_x_to_y"
    with_context = req.input.example_list_with_context
    with_context.context.features.feature["x"].float_list.value.append(7.0)
    ex = with_context.examples.add()
    ex.features.feature["x"].float_list.value.append(4.0)
    with_context.examples.add()  # takes x from the context
    response = client.predictions.Regress(req, timeout=30)
    assert [r.value for r in response.result.regressions] == [3.0, 4.5]
    assert response.model_spec.version.value == 1

    empty = regression_pb2.RegressionRequest()
    empty.model_spec.name = MODEL
    empty.model_spec.signature_name = "regress_x_to_y"
    code, details = _code_of(lambda: client.predictions.Regress(empty, timeout=30))
    assert (code, details) == (grpc.StatusCode.INVALID_ARGUMENT, "Input is empty.")
    _assert_still_serving(client)


# --------------------------------------------------------------------------- reload


def _reload(client: Client, text: str) -> Any:
    req = model_management_pb2.ReloadConfigRequest()
    text_format.Parse(text, req.config)
    return client.models.HandleReloadConfigRequest(req, timeout=60)


def test_reload_config_moves_label_and_policy(client: Client, model_base: Path) -> None:
    original = config_text(model_base)
    try:
        moved = original.replace('key: "stable" value: 1', 'key: "stable" value: 2')
        assert _reload(client, moved).status.error_code == 0
        assert _status(client, label="stable") == [(2, AVAILABLE, 0)]
        stable = client.predictions.Predict(_predict_request(label="stable"), timeout=30)
        assert stable.model_spec.version.value == 2

        only_one = f"""
        model_config_list {{
          config {{
            name: "{MODEL}"
            base_path: "{model_base}"
            model_version_policy {{ specific {{ versions: 1 }} }}
          }}
        }}
        """
        assert _reload(client, only_one).status.error_code == 0
        # Version 2 was unloaded: TF Serving keeps reporting it, as END.
        assert _status(client) == [(2, END, 0), (1, AVAILABLE, 0)]
        code, _ = _code_of(lambda: _status(client, "latest_only"))
        assert code == grpc.StatusCode.NOT_FOUND

        # A label on a version the policy does not load is refused; nothing changes.
        bad = only_one.replace(
            "model_version_policy", 'version_labels { key: "x" value: 2 } model_version_policy'
        )
        code, details = _code_of(lambda: _reload(client, bad))
        assert code == grpc.StatusCode.FAILED_PRECONDITION
        assert "Request to assign label to version 2" in details
        assert _status(client) == [(2, END, 0), (1, AVAILABLE, 0)]

        req = model_management_pb2.ReloadConfigRequest()
        req.config.CopyFrom(model_server_config_pb2.ModelServerConfig())
        code, _ = _code_of(lambda: client.models.HandleReloadConfigRequest(req, timeout=30))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        _reload(client, original)
    assert _status(client) == [(2, AVAILABLE, 0), (1, AVAILABLE, 0)]
    _assert_still_serving(client)


# --------------------------------------------------------------------------- the binary


def test_model_server_serves_grpc_and_stops_on_sigterm(model_base: Path) -> None:
    port = free_port()
    proc, lines = start_model_server(
        [f"--port={port}", f"--model_name={MODEL}", f"--model_base_path={model_base}"],
        "Running gRPC ModelServer at",
    )
    try:
        assert any(f"Running gRPC ModelServer at 0.0.0.0:{port} ..." in ln for ln in lines), (
            "".join(lines)
        )
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            assert _y(stub.Predict(_predict_request(), timeout=30)) == [2.5, 3.0, 4.5]
        proc.terminate()  # SIGTERM
        assert proc.wait(timeout=30) == 0
    finally:
        end_model_server(proc)


def test_grpc_requests_are_counted_in_the_monitoring_metrics(model_base: Path) -> None:
    from servectl.modelserver.monitoring import ServingMetrics

    manager = ModelManager()
    manager.load(parse_model_config_text(config_text(model_base)))
    metrics = ServingMetrics()
    srv = serve_grpc(manager, "127.0.0.1", 0, max_workers=2, metrics=metrics)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{srv.port}") as channel:
            stub = Client(channel)
            stub.predictions.Predict(_predict_request(), timeout=30)
            with pytest.raises(grpc.RpcError):
                stub.predictions.Predict(_predict_request(name="nope"), timeout=30)
    finally:
        srv.stop(None).wait()
    text = metrics.exposition()
    assert f':tensorflow:serving:request_count{{model_name="{MODEL}",status="OK"}} 1' in text
    assert ':tensorflow:serving:request_count{model_name="nope",status="NOT_FOUND"} 1' in text
    assert (
        f':tensorflow:serving:request_latency_count{{model_name="{MODEL}",API="predict",'
        'entrypoint="GRPC"} 1'
    ) in text
