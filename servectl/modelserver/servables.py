"""One loaded SavedModel version, what a request names, and how a signature runs.

The bottom of the model server: a :class:`Servable` (one version and its signatures),
a :class:`ModelSpec` (the model, version or label, and signature a request names) and
:class:`Servables`, which runs ``predict`` / ``classify`` / ``regress`` on numpy arrays
against the servable a spec resolves to. The model manager
(:class:`~servectl.modelserver.models.ModelManager`) resolves among every loaded model;
:class:`SingleServable` serves one version alone (what warmup runs against). Numpy
arrays in and out: no JSON, no protos, no transport.

Errors are :class:`~servectl.modelserver.errors.ServingError` with TF Serving's codes
and messages.
"""

from __future__ import annotations

import abc
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from servectl.modelserver.errors import ServingError, invalid_argument, not_found

if TYPE_CHECKING:
    from servectl.modelserver.batching import Batcher

DEFAULT_SIGNATURE = "serving_default"
PREDICT_METHOD = "tensorflow/serving/predict"
CLASSIFY_METHOD = "tensorflow/serving/classify"
REGRESS_METHOD = "tensorflow/serving/regress"


# --------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class ModelSpec:
    """What a request names: a model, optionally a version or a label, and a signature."""

    name: str
    version: int | None = None
    label: str | None = None
    signature_name: str = ""

    def describe(self) -> str:
        if self.version is not None:
            return f"Specific({self.name}, {self.version})"
        return f"Latest({self.name})"


@dataclass(frozen=True)
class VersionStatus:
    """One version's state as ``GetModelStatus`` reports it, with its load error if any."""

    version: int
    state: str  # TF Serving ModelVersionStatus.State name: AVAILABLE, LOADING, END, ...
    error_code: str = "OK"
    error_message: str = ""


# --------------------------------------------------------------------------- servables


@dataclass(frozen=True)
class TensorSpecInfo:
    """One signature input or output: its key, dtype and (partially known) shape."""

    key: str
    dtype: Any  # tf.DType
    shape: tuple[int | None, ...] | None  # None: unknown rank

    @property
    def dtype_name(self) -> str:
        return str(self.dtype.name)


@dataclass(frozen=True)
class Signature:
    name: str
    method_name: str
    inputs: Mapping[str, TensorSpecInfo]
    outputs: Mapping[str, TensorSpecInfo]
    function: Any  # a tf ConcreteFunction


@dataclass
class Servable:
    """One loaded version of one model."""

    name: str
    version: int
    path: str
    signatures: dict[str, Signature]
    signature_def_map: Any  # tensorflow_serving.apis.get_model_metadata_pb2.SignatureDefMap
    loaded: Any  # keeps the tf object (and its variables) alive

    def signature(self, name: str) -> Signature:
        key = name or DEFAULT_SIGNATURE
        sig = self.signatures.get(key)
        if sig is None:
            raise invalid_argument(f'Serving signature name: "{key}" not found in signature def')
        return sig


# --------------------------------------------------------------------------- calls


class Servables(abc.ABC):
    """Servables a request can name; each call runs on the one :meth:`resolve` picks.

    ``predict``, ``classify`` and ``regress`` make TF Serving's checks (signature method,
    inputs, outputs) and raise its errors. ``batcher`` (``--enable_batching``) merges
    concurrent calls of one signature.
    """

    batcher: Batcher | None = None

    @abc.abstractmethod
    def resolve(self, spec: ModelSpec) -> Servable:
        """The servable a request names, or TF Serving's NOT_FOUND / INVALID_ARGUMENT."""

    def _run(
        self, servable: Servable, sig: Signature, inputs: Mapping[str, np.ndarray[Any, Any]]
    ) -> dict[str, np.ndarray[Any, Any]]:
        # One batching queue per loaded servable and signature (id: a reload that loads
        # the same version number again gets a new queue).
        key = (servable.name, servable.version, sig.name, id(servable))
        return run_signature(sig, inputs, self.batcher, key)

    def predict(
        self, spec: ModelSpec, inputs: Mapping[str, np.ndarray[Any, Any]]
    ) -> tuple[Servable, dict[str, np.ndarray[Any, Any]]]:
        """Run a signature on named input arrays; returns the servable used and the outputs."""
        servable = self.resolve(spec)
        sig = servable.signature(spec.signature_name)
        return servable, self._run(servable, sig, inputs)

    def _example_signature(
        self, spec: ModelSpec, method: str, kind: str
    ) -> tuple[Servable, Signature]:
        """The servable and signature of a classify / regress request, of that method."""
        servable = self.resolve(spec)
        sig = servable.signature(spec.signature_name)
        if sig.method_name != method:
            raise invalid_argument(
                f"Expected {kind} signature method_name to be {method}. Was: {sig.method_name}"
            )
        return servable, sig

    def classify(
        self, spec: ModelSpec, examples: Sequence[bytes]
    ) -> tuple[Servable, np.ndarray[Any, Any] | None, np.ndarray[Any, Any] | None]:
        """Classify serialized tf.Examples: (servable, classes [N,K] or None, scores or None)."""
        servable, sig = self._example_signature(spec, CLASSIFY_METHOD, "classification")
        if "classes" not in sig.outputs and "scores" not in sig.outputs:
            raise invalid_argument(
                "Expected classification signature outputs to contain classes or scores."
            )
        out = self._run(servable, sig, {_single_input(sig): _examples_tensor(examples)})
        classes = out.get("classes")
        scores = out.get("scores")
        return servable, classes, scores

    def regress(
        self, spec: ModelSpec, examples: Sequence[bytes]
    ) -> tuple[Servable, np.ndarray[Any, Any]]:
        """Regress serialized tf.Examples: (servable, one value per example)."""
        servable, sig = self._example_signature(spec, REGRESS_METHOD, "regression")
        if "outputs" not in sig.outputs:
            raise invalid_argument("No output tensor named outputs in regression signature.")
        out = self._run(servable, sig, {_single_input(sig): _examples_tensor(examples)})
        values = np.asarray(out["outputs"])
        if values.ndim == 2 and values.shape[1] == 1:
            values = values.reshape(-1)
        if values.ndim != 1 or values.shape[0] != len(examples):
            raise invalid_argument(
                f"Expected output Tensor shape to be [{len(examples)}] or "
                f"[{len(examples)}, 1] but got {list(np.asarray(out['outputs']).shape)}"
            )
        return servable, values


class SingleServable(Servables):
    """One servable alone, as its model's only version, unbatched: what warmup runs against.

    It answers requests that name its model with no version, its version, or no label
    (labels are a manager's), with the errors a manager serving just it would give.
    """

    def __init__(self, servable: Servable) -> None:
        self.servable = servable

    def resolve(self, spec: ModelSpec) -> Servable:
        if spec.label is not None:
            raise invalid_argument(f"Unrecognized servable version label: {spec.label}")
        if spec.name != self.servable.name:
            raise not_found(f"Servable not found for request: {spec.describe()}")
        if spec.version is not None and spec.version != self.servable.version:
            shown = ModelSpec(spec.name, spec.version)
            raise not_found(f"Servable not found for request: {shown.describe()}")
        return self.servable


def _single_input(sig: Signature) -> str:
    if len(sig.inputs) != 1:
        raise invalid_argument("Expected one input Tensor.")
    (key,) = sig.inputs
    return key


def _examples_tensor(examples: Sequence[bytes]) -> np.ndarray[Any, Any]:
    if not examples:
        raise invalid_argument("Input is empty.")
    return np.array(list(examples), dtype=object)


def run_signature(
    sig: Signature,
    inputs: Mapping[str, np.ndarray[Any, Any]],
    batcher: Batcher | None = None,
    key: Hashable = None,
) -> dict[str, np.ndarray[Any, Any]]:
    """Check inputs against the signature, call it, and return outputs as numpy arrays.

    With a ``batcher`` (``--enable_batching``), the checked inputs join the queue named
    ``key`` and run merged with other requests' (docs/batching.md); each request is
    checked on its own first, so one bad request never fails its batch.
    """
    import tensorflow as tf

    tensors = _checked_tensors(sig, inputs)
    if batcher is None:
        return _call_signature(sig, tensors)
    arrays = {k: np.asarray(t.numpy()) for k, t in tensors.items()}

    def call(merged: Mapping[str, np.ndarray[Any, Any]]) -> dict[str, np.ndarray[Any, Any]]:
        return _call_signature(
            sig, {k: tf.convert_to_tensor(v, dtype=sig.inputs[k].dtype) for k, v in merged.items()}
        )

    return batcher.run(key, arrays, call)


def _checked_tensors(sig: Signature, inputs: Mapping[str, np.ndarray[Any, Any]]) -> dict[str, Any]:
    """The request's inputs as tensors of the signature's dtypes, or INVALID_ARGUMENT."""
    import tensorflow as tf

    missing = sorted(set(sig.inputs) - set(inputs))
    if missing:
        raise invalid_argument(
            f"Request inputs do not match required inputs for signature: {sig.name}. "
            f"Missing: {missing}"
        )
    extra = sorted(set(inputs) - set(sig.inputs))
    if extra:
        raise invalid_argument(
            f"Request inputs do not match required inputs for signature: {sig.name}. "
            f"Unexpected: {extra}"
        )
    tensors: dict[str, Any] = {}
    for key, spec in sig.inputs.items():
        arr = inputs[key]
        if spec.shape is not None:
            ok = len(spec.shape) == arr.ndim and all(
                d is None or d == n for d, n in zip(spec.shape, arr.shape, strict=True)
            )
            if not ok:
                want = [-1 if d is None else d for d in spec.shape]
                raise invalid_argument(
                    f"Input {key}: shape {list(arr.shape)} is not compatible with the "
                    f"signature's shape {want}"
                )
        try:
            tensors[key] = tf.convert_to_tensor(arr, dtype=spec.dtype)
        except (TypeError, ValueError) as exc:
            raise invalid_argument(f"Input {key}: {exc}") from exc
    return tensors


def _call_signature(sig: Signature, tensors: Mapping[str, Any]) -> dict[str, np.ndarray[Any, Any]]:
    import tensorflow as tf

    try:
        result = sig.function(**tensors)
    except tf.errors.InvalidArgumentError as exc:
        raise invalid_argument(exc.message) from exc
    except tf.errors.OpError as exc:
        raise ServingError("INTERNAL", exc.message) from exc
    return {k: np.asarray(v.numpy()) for k, v in result.items()}


def classification_2d(arr: np.ndarray[Any, Any], n: int) -> np.ndarray[Any, Any]:
    """A classify output as [n, num_classes] (a vector is one class per example)."""
    if arr.ndim == 1:
        arr = arr.reshape(-1, 1)
    if arr.ndim != 2 or arr.shape[0] != n:
        raise invalid_argument(
            f"Expected classification output shape [{n}, num_classes], got {list(arr.shape)}"
        )
    return arr
