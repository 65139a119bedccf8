"""TF Serving's REST JSON formats as arrays and back: the predict API's row (``instances``)
and columnar (``inputs``) formats, the classify and regress APIs' ``examples``, the answers,
and the request body itself (every way it can be wrong is a 400, as TF Serving says it).

The transport (:mod:`~servectl.modelserver.rest`) and the routing
(:mod:`~servectl.modelserver.rest_api`) see JSON values; the manager sees numpy arrays.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from servectl.modelserver.errors import ServingError, invalid_argument
from servectl.modelserver.servables import TensorSpecInfo

# Deepest nesting of arrays and objects a request body may have (400 beyond). A rank-R
# tensor in row format with named inputs and b64 strings is R + 3 levels deep.
MAX_JSON_DEPTH = 100

INT64_MAX = 2**63 - 1
_FLOAT32_MAX = float(np.finfo(np.float32).max)

# TensorFlow's DataTypeString names, which TF Serving uses in messages.
_TF_TYPE_NAMES = {"float32": "float", "float64": "double", "bfloat16": "bfloat16"}


def _type_name(spec: TensorSpecInfo) -> str:
    return _TF_TYPE_NAMES.get(spec.dtype_name, spec.dtype_name)


# --------------------------------------------------------------------------- JSON -> arrays


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    if value is None:
        return "Null"
    if isinstance(value, str):
        return "String"
    if isinstance(value, (int, float)):
        return "Number"
    if isinstance(value, list):
        return "Array"
    return "Object"


def _type_error(value: Any, spec: TensorSpecInfo) -> ServingError:
    shown = json.dumps(value)
    return invalid_argument(
        f"JSON Value: {shown} Type: {_json_kind(value)} is not of expected type: {_type_name(spec)}"
    )


def _decode_b64(value: Mapping[str, Any]) -> bytes:
    data = value.get("b64")
    if len(value) != 1 or not isinstance(data, str):
        raise invalid_argument(
            f'JSON Value: {json.dumps(value)} Type: Object is not of expected form: {{"b64": ...}}'
        )
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise invalid_argument(f"Unable to base64 decode: {data[:64]!r}") from exc


def _leaf(value: Any, spec: TensorSpecInfo) -> Any:
    kind = spec.dtype_name
    if kind == "string":
        if isinstance(value, str):
            return value.encode("utf-8")
        if isinstance(value, dict):
            return _decode_b64(value)
        raise _type_error(value, spec)
    if isinstance(value, dict) and kind == "bool":
        raise _type_error(value, spec)
    if kind == "bool":
        if isinstance(value, bool):
            return value
        raise _type_error(value, spec)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _type_error(value, spec)
    if kind.startswith(("int", "uint")) and isinstance(value, float):
        if not value.is_integer():
            raise _type_error(value, spec)
        return int(value)
    return value


def _shape_and_leaves(value: Any, spec: TensorSpecInfo, out: list[Any]) -> tuple[int, ...]:
    if not isinstance(value, list):
        out.append(_leaf(value, spec))
        return ()
    if not value:
        return (0,)
    shapes = {_shape_and_leaves(item, spec, out) for item in value}
    if len(shapes) != 1:
        raise invalid_argument(
            f"Expected all elements of a list to have the same shape (input {spec.key!r} is ragged)"
        )
    return (len(value), *shapes.pop())


def json_to_array(value: Any, spec: TensorSpecInfo) -> np.ndarray[Any, Any]:
    """A (nested) JSON value as an array of the signature input's dtype."""
    leaves: list[Any] = []
    shape = _shape_and_leaves(value, spec, leaves)
    if spec.dtype_name == "string":
        arr = np.empty(len(leaves), dtype=object)
        arr[:] = leaves
        return arr.reshape(shape)
    try:
        with np.errstate(over="raise"):
            return np.array(leaves, dtype=spec.dtype.as_numpy_dtype).reshape(shape)
    except FloatingPointError as exc:  # a finite number beyond the dtype's range
        raise invalid_argument(
            f"Input {spec.key}: cannot convert a JSON value to {_type_name(spec)} "
            "without loss of precision (out of range)"
        ) from exc
    except (OverflowError, ValueError) as exc:
        raise invalid_argument(f"Input {spec.key}: {exc}") from exc


def instances_to_arrays(
    instances: Any, inputs: Mapping[str, TensorSpecInfo]
) -> dict[str, np.ndarray[Any, Any]]:
    """The row format's ``instances`` as one array per signature input."""
    if not isinstance(instances, list):
        raise invalid_argument("Expected 'instances' key to be an array")
    if not instances:
        raise invalid_argument("Expected 'instances' array to have at least one element")
    names = list(inputs)
    named = all(isinstance(i, dict) and "b64" not in i for i in instances)
    if len(names) == 1 and not named:
        return {names[0]: json_to_array(instances, inputs[names[0]])}
    if not named:
        raise invalid_argument(
            "Expected every element of 'instances' to be a JSON object naming the "
            f"signature's inputs {sorted(names)}"
        )
    columns: dict[str, list[Any]] = {n: [] for n in names}
    for idx, inst in enumerate(instances):
        if set(inst) != set(names):
            raise invalid_argument(
                f"Failed to process element: {idx} of 'instances' list. JSON object "
                f"keys {sorted(inst)} do not match the signature's inputs {sorted(names)}"
            )
        for n in names:
            columns[n].append(inst[n])
    return {n: json_to_array(columns[n], inputs[n]) for n in names}


def inputs_to_arrays(
    value: Any, inputs: Mapping[str, TensorSpecInfo]
) -> dict[str, np.ndarray[Any, Any]]:
    """The columnar format's ``inputs`` as one array per signature input."""
    names = list(inputs)
    if isinstance(value, dict) and "b64" not in value:
        unknown = sorted(set(value) - set(inputs))
        if unknown:
            raise invalid_argument(
                f"Input {unknown[0]!r} is not an input of the signature; "
                f"its inputs are {sorted(names)}"
            )
        return {k: json_to_array(v, inputs[k]) for k, v in value.items()}
    if len(names) != 1:
        raise invalid_argument(
            f"Expected 'inputs' to be a JSON object naming the signature's inputs {sorted(names)}"
        )
    return {names[0]: json_to_array(value, inputs[names[0]])}


# --------------------------------------------------------------------------- arrays -> JSON


def scalar_to_json(value: Any, key: str) -> Any:
    """One element as TF Serving writes it (bytes as UTF-8 text, or ``{"b64": ...}`` for an
    undecodable value or a ``*_bytes`` output)."""
    if isinstance(value, bytes):
        if not key.endswith("_bytes"):
            try:
                return value.decode("utf-8")
            except UnicodeDecodeError:
                pass
        return {"b64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, np.floating):
        f = float(value)
        if math.isfinite(f) and value.dtype != np.float64:
            return float(str(value))  # shortest repr of the float32 value, as TF Serving prints
        return f
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


def array_to_json(arr: Any, key: str) -> Any:
    """An output array as nested JSON lists (:func:`scalar_to_json` at the leaves)."""
    if not isinstance(arr, np.ndarray):  # an element of an object (string) array
        return scalar_to_json(arr, key)
    if arr.ndim == 0:
        return scalar_to_json(arr[()], key)
    return [array_to_json(arr[i], key) for i in range(arr.shape[0])]


def rows_to_json(outputs: Mapping[str, np.ndarray[Any, Any]]) -> list[Any]:
    """The outputs in row format (``predictions``): one entry per batch element."""
    if len(outputs) == 1:
        ((key, arr),) = outputs.items()
        if arr.ndim == 0:
            raise invalid_argument(f"Output {key} is a scalar; row format needs a batch dimension")
        return [array_to_json(arr[i], key) for i in range(arr.shape[0])]
    sizes = {k: (a.shape[0] if a.ndim else None) for k, a in outputs.items()}
    if len(set(sizes.values())) != 1 or None in sizes.values():
        raise invalid_argument(
            f"Tensors in 'outputs' do not share a batch size {sizes}; "
            "use the columnar 'inputs' format"
        )
    n = next(iter(sizes.values()))
    assert n is not None
    return [{k: array_to_json(a[i], k) for k, a in outputs.items()} for i in range(n)]


# --------------------------------------------------------------------------- tf.Example


def _feature(value: Any, key: str) -> Any:
    import tensorflow as tf

    items = value if isinstance(value, list) else [value]
    if not items:
        return tf.train.Feature(float_list=tf.train.FloatList(value=[]))
    if all(isinstance(v, (str, dict)) for v in items):
        raw = [v.encode("utf-8") if isinstance(v, str) else _decode_b64(v) for v in items]
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=raw))
    if all(isinstance(v, int) and not isinstance(v, bool) for v in items):
        if any(not -(2**63) <= v <= INT64_MAX for v in items):
            raise invalid_argument(
                f"Feature: {key} has an integer element outside int64. Only int64 is supported."
            )
        return tf.train.Feature(int64_list=tf.train.Int64List(value=items))
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
        floats = []
        for v in items:
            # TF Serving refuses what float32 cannot hold (NaN and Infinity pass).
            if (isinstance(v, int) or math.isfinite(v)) and abs(v) > _FLOAT32_MAX:
                raise invalid_argument(
                    f"Cannot convert JSON value: {v} to float without loss of precision."
                )
            floats.append(float(v))
        return tf.train.Feature(float_list=tf.train.FloatList(value=floats))
    raise invalid_argument(
        f"Feature {key!r}: expected a number, string, {{'b64': ...}} or a list of one kind"
    )


def serialized_examples(body: Mapping[str, Any]) -> list[bytes]:
    """The ``examples`` of a classify or regress body (each merged with ``context``) as
    serialized ``tf.Example`` protos."""
    import tensorflow as tf

    examples = body.get("examples")
    if not isinstance(examples, list):
        raise invalid_argument("Expected 'examples' key to be an array")
    context = body.get("context", {})
    if not isinstance(context, dict):
        raise invalid_argument("Expected 'context' key to be a JSON object")
    serialized = []
    for idx, ex in enumerate(examples):
        if not isinstance(ex, dict):
            raise invalid_argument(f"Expected element {idx} of 'examples' to be a JSON object")
        clash = sorted(set(ex) & set(context))
        if clash:
            raise invalid_argument(f"Feature {clash[0]!r} appears in both 'context' and 'examples'")
        features = {k: _feature(v, k) for k, v in {**context, **ex}.items()}
        example = tf.train.Example(features=tf.train.Features(feature=features))
        serialized.append(example.SerializeToString())
    return serialized


# --------------------------------------------------------------------------- request bodies


def signature_name(body: Mapping[str, Any]) -> str:
    """The body's ``signature_name`` (empty: the default signature)."""
    name = body.get("signature_name", "")
    if not isinstance(name, str):
        raise invalid_argument("'signature_name' key must be a string value.")
    return name


_TOO_DEEP = (
    f"JSON Parse error: The document nests arrays and objects more than {MAX_JSON_DEPTH} "
    "levels deep"
)


def _json_depth_exceeds(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists and dicts more than ``limit`` levels (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        for child in node.values() if isinstance(node, dict) else node:
            if isinstance(child, (list, dict)):
                stack.append((child, depth + 1))
    return False


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _has_lone_surrogate(value: Any) -> bool:
    """Whether a string (or key) in ``value`` is not valid Unicode (no recursion)."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                return True
    return False


def parse_body(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object; every way it can be wrong is a 400.

    Like TF Serving (rapidjson with ``kParseNanAndInfFlag``), ``NaN``, ``Infinity`` and
    ``-Infinity`` are accepted as numbers. Nesting deeper than ``MAX_JSON_DEPTH`` is
    refused here, so nothing downstream (conversion, error messages) recurses deeply.
    """
    if not raw.strip():
        raise invalid_argument("JSON Parse error: The document is empty")
    try:
        body = json.loads(raw)
    except UnicodeDecodeError as exc:
        raise invalid_argument(f"JSON Parse error: Invalid encoding in string. {exc}") from exc
    except json.JSONDecodeError as exc:
        raise invalid_argument(f"JSON Parse error: {exc.msg} at offset: {exc.pos}") from exc
    except RecursionError as exc:  # far deeper than MAX_JSON_DEPTH
        raise invalid_argument(_TOO_DEEP) from exc
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise invalid_argument(f"JSON Parse error: {exc}") from exc
    if not isinstance(body, dict):
        raise invalid_argument("JSON Value: the request body is not a JSON object")
    # A lone surrogate can only come from a \uD800-\uDFFF escape; rapidjson refuses it.
    if _SURROGATE_ESCAPE.search(raw) and _has_lone_surrogate(body):
        raise invalid_argument("JSON Parse error: The surrogate pair in string is invalid.")
    # Only a body with that many brackets can be that deep: most skip the walk.
    if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH and _json_depth_exceeds(
        body, MAX_JSON_DEPTH
    ):
        raise invalid_argument(_TOO_DEEP)
    return body
