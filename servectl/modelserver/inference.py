"""TF Serving's inference API on protobuf messages, apart from any transport.

What TF Serving calls the prediction service implementation: request protos of
``tensorflow-serving-api`` in, response protos out, and a
:class:`~servectl.modelserver.errors.ServingError` (TF Serving's code and message) for a
request that cannot be served. Two APIs, as TF Serving's two gRPC services:

- :class:`PredictionApi` (``tensorflow.serving.PredictionService``): ``predict``,
  ``classify``, ``regress``, ``get_model_metadata`` (``metadata_field: "signature_def"``);
- :class:`ModelApi` (``tensorflow.serving.ModelService``): ``get_model_status``,
  ``reload_config`` (``HandleReloadConfigRequest``).

``TensorProto`` <-> numpy conversion lives here (``tf.make_ndarray`` /
``tf.make_tensor_proto``), and ``tf.Example`` inputs become serialized strings; the
servables see arrays. No gRPC here: ``grpc_api.py`` adapts these APIs to servicers,
status codes and a server, and warmup (``warmup.py``) replays recorded requests through
:class:`PredictionApi`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from servectl.modelserver.config import ModelConfig, parse_model_config_text
from servectl.modelserver.errors import code_number, invalid_argument
from servectl.modelserver.servables import (
    DEFAULT_SIGNATURE,
    ModelSpec,
    Servable,
    Servables,
    VersionStatus,
    classification_2d,
)

log = logging.getLogger(__name__)


class ManagedModels(Protocol):
    """What :class:`ModelApi` needs of a model manager: statuses and a reconfigure."""

    def status(self, spec: ModelSpec) -> list[VersionStatus]: ...

    def reconfigure(self, configs: Sequence[ModelConfig]) -> None: ...


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


# --------------------------------------------------------------------------- services


class PredictionApi:
    """TF Serving's ``PredictionService``: request proto in, response proto out.

    ``Predict``, ``Classify``, ``Regress`` and ``GetModelMetadata`` over ``servables``:
    the server's :class:`~servectl.modelserver.models.ModelManager`, or for warmup a
    :class:`~servectl.modelserver.servables.SingleServable`.
    """

    def __init__(self, servables: Servables) -> None:
        self.servables = servables

    def predict(self, request: Any) -> Any:
        import tensorflow as tf
        from tensorflow_serving.apis import predict_pb2

        spec = spec_from_proto(request.model_spec)
        servable = self.servables.resolve(spec)
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
        _, outputs = self.servables.predict(_pinned(spec, servable), arrays)
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
        servable = self.servables.resolve(spec)
        _, classes, scores = self.servables.classify(_pinned(spec, servable), examples)
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
        servable = self.servables.resolve(spec)
        _, values = self.servables.regress(_pinned(spec, servable), examples)
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
        servable = self.servables.resolve(spec)
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        _fill_model_spec(response.model_spec, servable, None)
        response.metadata["signature_def"].Pack(servable.signature_def_map)
        return response


class ModelApi:
    """TF Serving's ``ModelService``: model status and config reload, protos in and out."""

    def __init__(self, manager: ManagedModels) -> None:
        self.manager = manager

    def get_model_status(self, request: Any) -> Any:
        from tensorflow_serving.apis import get_model_status_pb2

        spec = spec_from_proto(request.model_spec)
        response = get_model_status_pb2.GetModelStatusResponse()
        for status in self.manager.status(spec):
            out = response.model_version_status.add()
            out.version = status.version
            out.state = get_model_status_pb2.ModelVersionStatus.State.Value(status.state)
            out.status.error_code = code_number(status.error_code)
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


__all__: Sequence[str] = [
    "ManagedModels",
    "ModelApi",
    "PredictionApi",
    "spec_from_proto",
]
