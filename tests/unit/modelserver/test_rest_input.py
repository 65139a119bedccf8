"""Hostile or odd request bodies: deep nesting, NaN and Infinity, numbers no dtype holds,
invalid Unicode, absurd versions. Each is the client's error (400) or TF Serving's answer,
never a 500."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

pytest.importorskip("tensorflow")

from servectl.modelserver.models import ModelManager
from servectl.modelserver.rest_api import RestApi
from servectl.modelserver.rest_codec import MAX_JSON_DEPTH

from .conftest import MODEL

PREDICT = f"/v1/models/{MODEL}:predict"
TOO_DEEP = (
    f"JSON Parse error: The document nests arrays and objects more than {MAX_JSON_DEPTH} "
    "levels deep"
)


@pytest.fixture(scope="module")
def api(manager: ModelManager) -> RestApi:
    return RestApi(manager)


def post(api: RestApi, body: bytes | Any, path: str = PREDICT) -> tuple[int, Any]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, payload = api.handle("POST", path, raw)
    json.dumps(payload)  # always serialisable
    return status, payload


def nested(depth: int, leaf: str = "1.0") -> bytes:
    return b"[" * depth + leaf.encode() + b"]" * depth


@pytest.mark.parametrize("depth", [100_000, 5_000])
def test_json_nested_far_too_deep_is_a_parse_error(api: RestApi, depth: int) -> None:
    # 100,000 levels overflow Python's parser (it raised RecursionError: a 500 before).
    assert post(api, b'{"instances": ' + nested(depth) + b"}") == (400, {"error": TOO_DEEP})


def test_deep_instances_that_parse_are_refused_before_conversion(api: RestApi) -> None:
    # 900 levels parse, then converting them to an array recursed past the limit (500).
    assert post(api, b'{"instances": ' + nested(900) + b"}") == (400, {"error": TOO_DEEP})
    body = {"instances": [{"b64": "AA=="}]}
    for _ in range(MAX_JSON_DEPTH):
        body = {"instances": [body]}
    assert post(api, body) == (400, {"error": TOO_DEEP})


def test_nesting_up_to_the_limit_is_converted(api: RestApi) -> None:
    # {"instances": [...]} is 2 levels; a rank-(MAX_JSON_DEPTH - 1) tensor fits exactly.
    status, payload = post(api, b'{"instances": ' + nested(MAX_JSON_DEPTH - 1) + b"}")
    assert status == 400  # numpy's 64 dimensions, not the depth limit
    assert payload["error"].startswith("Input x: maximum supported dimension")
    status, payload = post(api, b'{"instances": ' + nested(20) + b"}")
    assert status == 400  # the model takes rank 1: a shape error
    assert "not compatible" in payload["error"]


def test_nan_and_infinity_in_and_out_as_tf_serving(rest_server: str) -> None:
    """TF Serving reads NaN/Infinity (rapidjson kParseNanAndInfFlag) and writes them as
    the literals NaN, Infinity, -Infinity (json_tensor.cc WriteDecimal)."""
    req = urllib.request.Request(
        f"{rest_server}{PREDICT}",
        data=b'{"instances": [NaN, Infinity, -Infinity, 1.0]}',
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200
        raw = resp.read()
    assert raw == b'{"predictions":[NaN,Infinity,-Infinity,2.5]}'


def test_non_finite_numbers_in_errors_stay_strict_json(api: RestApi) -> None:
    status, payload = post(api, b'{"signature_name": "echo", "instances": [NaN]}')
    assert status == 400
    assert payload == {"error": "JSON Value: NaN Type: Number is not of expected type: string"}
    json.dumps(payload, allow_nan=False)
    # rapidjson also reads Inf and -NaN; Python's parser does not (a documented difference).
    assert post(api, b'{"instances": [Inf]}')[0] == 400


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b'{"instances": [1' + b"0" * 5000 + b"]}", "JSON Parse error: Exceeds the limit"),
        (b'{"instances": [1e39]}', "cannot convert a JSON value to float without loss"),
        (b'{"signature_name": "echo", "instances": ["\\ud800"]}', "surrogate pair"),
        (b'{"instances": [1.0], "x": "\\udfff\\ud800"}', "surrogate pair"),
    ],
)
def test_values_no_tensor_can_hold_are_400(api: RestApi, body: bytes, fragment: str) -> None:
    status, payload = post(api, body)
    assert status == 400, payload
    assert fragment in payload["error"]


def test_valid_surrogate_pairs_still_work(api: RestApi) -> None:
    body = b'{"signature_name": "echo", "instances": ["\\ud83d\\ude00"]}'
    assert post(api, body) == (
        200,
        {"predictions": [{"s_bytes": {"b64": "8J+YgA=="}, "length": 4}]},
    )


@pytest.mark.parametrize(
    ("features", "fragment"),
    [
        ({"x": 2**64}, "Feature: x has an integer element outside int64"),
        ({"x": [1, -(2**63) - 1]}, "Feature: x has an integer element outside int64"),
        ({"x": 1e300}, "Cannot convert JSON value: 1e+300 to float without loss of precision."),
        ({"x": [1.0, 10**400]}, "to float without loss of precision."),
    ],
)
def test_example_features_out_of_range_are_400(
    api: RestApi, features: dict[str, Any], fragment: str
) -> None:
    body = {"signature_name": "regress_x_to_y", "examples": [features]}
    status, payload = post(api, body, f"/v1/models/{MODEL}:regress")
    assert status == 400, payload
    assert fragment in payload["error"]


def test_absurd_versions_are_400(api: RestApi) -> None:
    for version in ("9" * 5000, "9" * 20):
        status, payload = api.handle(
            "POST", f"/v1/models/{MODEL}/versions/{version}:predict", b"{}"
        )
        assert status == 400
        assert payload["error"].startswith("Failed to convert version: 999")
    status, _ = api.handle("GET", f"/v1/models/{MODEL}/versions/{'0' * 30}2", b"")
    assert status == 200  # leading zeros are still the number
