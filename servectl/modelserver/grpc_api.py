"""TF Serving's gRPC API over a :class:`~servectl.modelserver.models.ModelManager`.

Two services, with the messages and stubs of ``tensorflow-serving-api``:

- ``tensorflow.serving.PredictionService``: ``Predict``, ``Classify``, ``Regress``,
  ``GetModelMetadata`` (``metadata_field: "signature_def"``);
- ``tensorflow.serving.ModelService``: ``GetModelStatus``, ``HandleReloadConfigRequest``.

``TensorProto`` <-> numpy conversion lives here (``tf.make_ndarray`` /
``tf.make_tensor_proto``); the manager sees arrays. A
:class:`~servectl.modelserver.errors.ServingError` aborts the RPC with the gRPC status
code of the same name and TF Serving's message.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from typing import Any, TypeVar

import numpy as np

from servectl.modelserver.errors import ServingError, invalid_argument
from servectl.modelserver.models import (
    DEFAULT_SIGNATURE,
    ModelManager,
    ModelSpec,
    Servable,
    classification_2d,
    parse_model_config_text,
)
from servectl.modelserver.monitoring import (
    API_CLASSIFY,
    API_GET_MODEL_METADATA,
    API_PREDICT,
    API_REGRESS,
    ENTRYPOINT_GRPC,
    ServingMetrics,
)

log = logging.getLogger(__name__)

# TF Serving sets its gRPC message size limits to INT_MAX.
MAX_MESSAGE_BYTES = 2**31 - 1

_T = TypeVar("_T")


# --------------------------------------------------------------------------- protos <-> specs


def spec_from_proto(proto: Any) -> ModelSpec:
    """A request's ``tensorflow.serving.ModelSpec`` as a :class:`ModelSpec`."""
    which = proto.WhichOneof("version_choice")
    version = int(proto.version.value) if which == "version" else None
    label = str(proto.version_label) if which == "version_label" else None
    return ModelSpec(str(proto.name), version, label, str(proto.signature_name))


def _fill_model_spec(out: Any, servable: Servable, signature_name: str | None) -> None:
    """The response ``model_spec``: name, the version that answered, and the signature."""
    out.name = servable.name
    out.version.value = servable.version
    if signature_name is not None:
        out.signature_name = signature_name or DEFAULT_SIGNATURE


def _pinned(spec: ModelSpec, servable: Servable) -> ModelSpec:
    """The same request pinned to the version resolved first (a reload may swap versions)."""
    return ModelSpec(spec.name, servable.version, None, spec.signature_name)


def _input_arrays(servable: Servable, spec: ModelSpec, inputs: Any) -> dict[str, Any]:
    """``Predict`` inputs as arrays, with the dtype check TF Serving's session makes."""
    import tensorflow as tf

    sig = servable.signature(spec.signature_name)
    order = sorted(sig.inputs)
    arrays: dict[str, Any] = {}
    for key, proto in inputs.items():
        want = sig.inputs.get(key)
        if want is not None and proto.dtype != want.dtype.as_datatype_enum:
            got = tf.dtypes.as_dtype(proto.dtype) if proto.dtype else None
            raise invalid_argument(
                f"Expects arg[{order.index(key)}] to be {_tf_name(want.dtype)} but "
                f"{_tf_name(got) if got is not None else 'invalid'} is provided"
            )
        try:
            arrays[key] = tf.make_ndarray(proto)
        except (TypeError, ValueError) as exc:
            raise invalid_argument(f"Input {key}: {exc}") from exc
    return arrays


def _tf_name(dtype: Any) -> str:
    """TensorFlow's DataTypeString name (``float``, ``double``, ``string``, ``int32``)."""
    names = {"float32": "float", "float64": "double"}
    name = str(dtype.name)
    return names.get(name, name)


def _serialized_examples(input_proto: Any) -> list[bytes]:
    """``tensorflow.serving.Input`` as serialized ``tf.Example`` strings.

    With ``example_list_with_context`` the context's bytes come first, so protobuf's
    merge puts the context's features into every example (the example wins a clash), as
    TF Serving does.
    """
    kind = input_proto.WhichOneof("kind")
    if kind == "example_list":
        return [ex.SerializeToString() for ex in input_proto.example_list.examples]
    if kind == "example_list_with_context":
        lst = input_proto.example_list_with_context
        context = lst.context.SerializeToString()
        return [context + ex.SerializeToString() for ex in lst.examples]
    raise invalid_argument("Input is empty.")


# --------------------------------------------------------------------------- errors


def _call(
    context: Any,
    name: str,
    fn: Callable[[], _T],
    *,
    metrics: ServingMetrics | None = None,
    model_name: str = "",
    api: str = "",
    served: Callable[[str], bool] = lambda name: True,
) -> _T:
    """Run one RPC body; a ServingError aborts with its code, anything else with INTERNAL.

    With ``metrics``, the call is recorded like a REST one (entrypoint ``GRPC``), so
    ``:tensorflow:serving:request_count`` and ``request_latency`` cover both front ends.
    """
    import grpc

    start = time.perf_counter_ns()
    code = "OK"
    try:
        return fn()
    except ServingError as exc:
        code = exc.code
        context.abort(getattr(grpc.StatusCode, exc.code), exc.message)
    except Exception as exc:  # a bug or a TF failure: report it, keep serving
        code = "INTERNAL"
        log.exception("Internal error in %s", name)
        context.abort(grpc.StatusCode.INTERNAL, f"Internal: {exc}")
    finally:
        if metrics is not None and model_name:
            latency_us = (time.perf_counter_ns() - start) / 1000
            metrics.record(
                model_name, api, ENTRYPOINT_GRPC, code, latency_us, served=served(model_name)
            )
    raise AssertionError("unreachable: context.abort raises")  # pragma: no cover


# --------------------------------------------------------------------------- services


class PredictionApi:
    """``PredictionService`` handlers: request proto in, response proto out, no gRPC."""

    def __init__(self, manager: ModelManager) -> None:
        self.manager = manager

    def predict(self, request: Any) -> Any:
        import tensorflow as tf
        from tensorflow_serving.apis import predict_pb2

        spec = spec_from_proto(request.model_spec)
        servable = self.manager.resolve(spec)
        sig = servable.signature(spec.signature_name)
        wanted = list(request.output_filter)
        for alias in wanted:
            if alias not in sig.outputs:
                known = ",".join(sorted(sig.outputs))
                raise invalid_argument(
                    f"output tensor alias not found in signature: {alias} "
                    f"Outputs expected to be in the set {{{known}}}."
                )
        if len(set(wanted)) != len(wanted):
            raise invalid_argument("duplicate output tensor alias in output_filter")
        arrays = _input_arrays(servable, spec, request.inputs)
        _, outputs = self.manager.predict(_pinned(spec, servable), arrays)
        response = predict_pb2.PredictResponse()
        _fill_model_spec(response.model_spec, servable, spec.signature_name)
        for key, arr in outputs.items():
            if wanted and key not in wanted:
                continue
            response.outputs[key].CopyFrom(tf.make_tensor_proto(np.asarray(arr)))
        return response

    def classify(self, request: Any) -> Any:
        from tensorflow_serving.apis import classification_pb2

        spec = spec_from_proto(request.model_spec)
        examples = _serialized_examples(request.input)
        servable = self.manager.resolve(spec)
        _, classes, scores = self.manager.classify(_pinned(spec, servable), examples)
        n = len(examples)
        labels = classification_2d(classes, n) if classes is not None else None
        values = classification_2d(scores, n) if scores is not None else None
        k = (labels if labels is not None else values).shape[1]  # type: ignore[union-attr]
        response = classification_pb2.ClassificationResponse()
        _fill_model_spec(response.model_spec, servable, spec.signature_name)
        for i in range(n):
            row = response.result.classifications.add()
            for j in range(k):
                cls = row.classes.add()
                if labels is not None:
                    label = labels[i, j]
                    cls.label = (
                        label.decode("utf-8", "replace") if isinstance(label, bytes) else str(label)
                    )
                if values is not None:
                    cls.score = float(values[i, j])
        return response

    def regress(self, request: Any) -> Any:
        from tensorflow_serving.apis import regression_pb2

        spec = spec_from_proto(request.model_spec)
        examples = _serialized_examples(request.input)
        servable = self.manager.resolve(spec)
        _, values = self.manager.regress(_pinned(spec, servable), examples)
        response = regression_pb2.RegressionResponse()
        _fill_model_spec(response.model_spec, servable, spec.signature_name)
        for value in values:
            response.result.regressions.add().value = float(value)
        return response

    def get_model_metadata(self, request: Any) -> Any:
        from tensorflow_serving.apis import get_model_metadata_pb2

        spec = spec_from_proto(request.model_spec)
        if not spec.name:
            raise invalid_argument("Missing model name in request.")
        fields = list(request.metadata_field)
        if not fields:
            raise invalid_argument(
                "GetModelMetadataRequest must specify at least one metadata_field"
            )
        for field in fields:
            if field != "signature_def":
                raise invalid_argument(f"Metadata field {field} is not supported")
        servable = self.manager.resolve(spec)
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        _fill_model_spec(response.model_spec, servable, None)
        response.metadata["signature_def"].Pack(servable.signature_def_map)
        return response


class ModelApi:
    """``ModelService`` handlers: model status and config reload."""

    def __init__(self, manager: ModelManager) -> None:
        self.manager = manager

    def get_model_status(self, request: Any) -> Any:
        from tensorflow_serving.apis import get_model_status_pb2

        spec = spec_from_proto(request.model_spec)
        response = get_model_status_pb2.GetModelStatusResponse()
        for status in self.manager.status(spec):
            out = response.model_version_status.add()
            out.version = status.version
            out.state = get_model_status_pb2.ModelVersionStatus.State.Value(status.state)
            out.status.error_code = _error_code(status.error_code)
            out.status.error_message = status.error_message
        return response

    def reload_config(self, request: Any) -> Any:
        from google.protobuf import text_format
        from tensorflow_serving.apis import model_management_pb2

        config = request.config
        if config.WhichOneof("config") != "model_config_list":
            raise invalid_argument(
                "ServerModelConfig type not supported by HandleReloadConfigRequest. "
                "Only ModelConfigList is currently supported"
            )
        configs = parse_model_config_text(
            text_format.MessageToString(config), origin="base_path in HandleReloadConfigRequest"
        )
        for cfg in configs:
            log.info("Config entry: name %s base_path %s", cfg.name, cfg.base_path)
        self.manager.reconfigure(configs)
        response = model_management_pb2.ReloadConfigResponse()
        response.status.error_code = 0
        return response


def _error_code(name: str) -> int:
    import grpc

    return int(getattr(grpc.StatusCode, name).value[0])


# --------------------------------------------------------------------------- gRPC glue


def _servicers(manager: ModelManager, metrics: ServingMetrics | None = None) -> tuple[Any, Any]:
    from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

    predictions = PredictionApi(manager)
    models = ModelApi(manager)

    def unary(name: str, handler: Callable[[Any], Any], api: str) -> Callable[..., Any]:
        """An RPC method: run ``handler`` on the request, recorded under ``api``."""

        def method(_self: Any, request: Any, context: Any) -> Any:
            return _call(
                context,
                name,
                lambda: handler(request),
                metrics=metrics,
                model_name=request.model_spec.name,
                api=api,
                served=lambda name: name in manager.model_names(),
            )

        return method

    class PredictionServicer(prediction_service_pb2_grpc.PredictionServiceServicer):  # type: ignore[misc]
        Predict = unary("Predict", predictions.predict, API_PREDICT)
        Classify = unary("Classify", predictions.classify, API_CLASSIFY)
        Regress = unary("Regress", predictions.regress, API_REGRESS)
        GetModelMetadata = unary(
            "GetModelMetadata", predictions.get_model_metadata, API_GET_MODEL_METADATA
        )

    class ModelServicer(model_service_pb2_grpc.ModelServiceServicer):  # type: ignore[misc]
        def GetModelStatus(self, request: Any, context: Any) -> Any:
            return _call(context, "GetModelStatus", lambda: models.get_model_status(request))

        def HandleReloadConfigRequest(self, request: Any, context: Any) -> Any:
            def reload() -> Any:
                try:
                    return models.reload_config(request)
                except ServingError as exc:
                    log.error("ReloadConfig failed: %s", exc.message)
                    raise

            return _call(context, "HandleReloadConfigRequest", reload)

    return PredictionServicer(), ModelServicer()


class GrpcServer:
    """Both services on one ``grpc.server``; :meth:`stop` lets RPCs in flight finish."""

    def __init__(
        self,
        manager: ModelManager,
        host: str,
        port: int,
        max_workers: int = 16,
        metrics: ServingMetrics | None = None,
    ) -> None:
        import grpc
        from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="grpc"),
            options=[
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                # gRPC's default SO_REUSEPORT lets a second server bind a port that one
                # already serves, and clients then reach either at random: refuse instead.
                ("grpc.so_reuseport", 0),
            ],
        )
        prediction, model = _servicers(manager, metrics)
        prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
            prediction, self._server
        )
        model_service_pb2_grpc.add_ModelServiceServicer_to_server(model, self._server)
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"  # IPv6 in brackets
        try:
            bound = self._server.add_insecure_port(address)
        except RuntimeError as exc:  # grpcio raises when it cannot bind
            raise OSError(f"Failed to bind gRPC server to {address}: {exc}") from exc
        if bound == 0:
            raise OSError(f"Failed to bind gRPC server to {address}")
        self.host = host
        self.port = int(bound)

    def start(self) -> None:
        self._server.start()

    def stop(self, grace: float | None = 30.0) -> Any:
        """Refuse new RPCs, let those in flight finish for up to ``grace`` s; returns an Event."""
        return self._server.stop(grace)


def serve_grpc(manager: ModelManager, host: str, port: int, **kwargs: Any) -> GrpcServer:
    """Start a :class:`GrpcServer` (its own threads) and return it."""
    server = GrpcServer(manager, host, port, **kwargs)
    server.start()
    return server


__all__: Sequence[str] = [
    "GrpcServer",
    "ModelApi",
    "PredictionApi",
    "serve_grpc",
    "spec_from_proto",
]
