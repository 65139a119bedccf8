"""ModelManager: version policies, labels, lookups and TF Serving's error codes."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from servectl.modelserver.errors import ServingError
from servectl.modelserver.models import (
    ModelConfig,
    ModelManager,
    ModelSpec,
    VersionPolicy,
    list_versions,
    parse_model_config_text,
)

from .conftest import MODEL, config_text


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (VersionPolicy(), [3]),
        (VersionPolicy("latest", num_versions=2), [2, 3]),
        (VersionPolicy("all"), [1, 2, 3]),
        (VersionPolicy("specific", versions=(1, 3, 9)), [1, 3]),
    ],
)
def test_version_policy_choose(policy: VersionPolicy, expected: list[int]) -> None:
    assert policy.choose([3, 1, 2]) == expected


def test_parse_config_policies_and_labels(model_base: Path) -> None:
    configs = parse_model_config_text(config_text(model_base))
    first, second = configs
    assert first.name == MODEL
    assert first.policy == VersionPolicy("specific", versions=(1, 2))
    assert dict(first.labels) == {"stable": 1, "canary": 2}
    assert second.policy == VersionPolicy()
    all_cfg = parse_model_config_text(
        'model_config_list { config { name: "m" base_path: "/x" model_version_policy { all {} } } }'
    )
    assert all_cfg[0].policy.kind == "all"
    latest = parse_model_config_text(
        'model_config_list { config { name: "m" base_path: "/x" '
        "model_version_policy { latest { num_versions: 2 } } } }"
    )
    assert latest[0].policy == VersionPolicy("latest", num_versions=2)


def test_parse_config_rejects_bad_text_and_duplicates() -> None:
    with pytest.raises(ServingError) as bad:
        parse_model_config_text("model_config_list { nope: 1 }")
    assert bad.value.code == "INVALID_ARGUMENT"
    with pytest.raises(ServingError, match="multiple times"):
        parse_model_config_text(
            'model_config_list { config { name: "m" base_path: "/a" } '
            'config { name: "m" base_path: "/b" } }'
        )


def test_list_versions_ignores_non_numeric(model_base: Path, tmp_path: Path) -> None:
    assert list_versions(model_base) == [1, 2]
    (tmp_path / "abc").mkdir()
    (tmp_path / "7").mkdir()  # no saved_model.pb
    assert list_versions(tmp_path) == []
    assert list_versions(tmp_path / "missing") == []


def test_label_to_unloaded_version_fails_load(model_base: Path) -> None:
    cfg = ModelConfig(MODEL, str(model_base), VersionPolicy(), {"stable": 1})
    with pytest.raises(ServingError) as exc:
        ModelManager().load([cfg])
    assert exc.value.code == "FAILED_PRECONDITION"
    assert "version 1 of model half_plus_two" in exc.value.message


def test_empty_base_path_fails_load(tmp_path: Path) -> None:
    with pytest.raises(ServingError) as exc:
        ModelManager().load([ModelConfig("m", str(tmp_path))])
    assert exc.value.code == "NOT_FOUND"
    assert exc.value.message == (
        f"No versions of servable m found under base path {tmp_path}. Did you forget to name "
        "your leaf directory as a number (eg. '/1/')?"
    )


def test_missing_base_path_says_so_and_names_its_origin(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir"
    cfg = ModelConfig("m", str(missing), origin="--model_base_path")
    with pytest.raises(ServingError) as exc:
        ModelManager().load([cfg])
    assert exc.value.code == "INVALID_ARGUMENT"  # as TF Serving's FileSystemStoragePathSource
    assert exc.value.message == (
        f"Could not find base path {missing} for servable m: no such directory "
        "(set by --model_base_path)"
    )
    (tmp_path / "a-file").write_text("")
    with pytest.raises(ServingError, match="is not a directory"):
        ModelManager().load([ModelConfig("m", str(tmp_path / "a-file"))])


def test_config_file_base_path_errors_name_the_file(tmp_path: Path) -> None:
    import threading

    from servectl.modelserver.server import parse_flags, run

    config = tmp_path / "models.config"
    config.write_text('model_config_list { config { name: "m" base_path: "/nonexistent/m" } }')
    flags = parse_flags([f"--model_config_file={config}", "--port=0"])
    with pytest.raises(ServingError) as exc:
        run(flags, threading.Event())
    assert exc.value.message == (
        "Could not find base path /nonexistent/m for servable m: no such directory "
        f"(set by base_path in --model_config_file={config})"
    )
    flags = parse_flags(["--model_base_path=/nonexistent/m", "--model_name=m", "--port=0"])
    with pytest.raises(ServingError, match=r"\(set by --model_base_path\)$"):
        run(flags, threading.Event())


def test_latest_policy_loads_only_newest(model_base: Path, tmp_path: Path) -> None:
    base = tmp_path / "m"
    shutil.copytree(model_base / "2", base / "2")
    mgr = ModelManager()
    mgr.load([ModelConfig("m", str(base))])
    assert [s.version for s in mgr.status(ModelSpec("m"))] == [2]


def test_resolve_and_status(manager: ModelManager) -> None:
    assert manager.resolve(ModelSpec(MODEL)).version == 2
    assert manager.resolve(ModelSpec(MODEL, version=1)).version == 1
    assert manager.resolve(ModelSpec(MODEL, label="stable")).version == 1
    assert manager.resolve(ModelSpec(MODEL, label="canary")).version == 2
    assert manager.resolve(ModelSpec("latest_only")).version == 2
    assert [s.version for s in manager.status(ModelSpec(MODEL))] == [2, 1]
    assert manager.model_names() == [MODEL, "latest_only"]


@pytest.mark.parametrize(
    ("spec", "code", "message"),
    [
        (ModelSpec("nope"), "NOT_FOUND", "Servable not found for request: Latest(nope)"),
        (
            ModelSpec(MODEL, version=7),
            "NOT_FOUND",
            "Servable not found for request: Specific(half_plus_two, 7)",
        ),
        (
            ModelSpec(MODEL, label="beta"),
            "INVALID_ARGUMENT",
            "Unrecognized servable version label: beta",
        ),
    ],
)
def test_resolve_errors(manager: ModelManager, spec: ModelSpec, code: str, message: str) -> None:
    with pytest.raises(ServingError) as exc:
        manager.resolve(spec)
    assert (exc.value.code, exc.value.message) == (code, message)


def test_status_errors(manager: ModelManager) -> None:
    with pytest.raises(ServingError, match="Could not find any versions of model nope"):
        manager.status(ModelSpec("nope"))
    with pytest.raises(ServingError, match="Could not find version 9 of model half_plus_two"):
        manager.status(ModelSpec(MODEL, version=9))


def test_predict_arrays(manager: ModelManager) -> None:
    servable, out = manager.predict(ModelSpec(MODEL), {"x": np.array([1.0, 2.0, 5.0])})
    assert servable.version == 2
    np.testing.assert_allclose(out["y"], [2.5, 3.0, 4.5])
    with pytest.raises(ServingError, match="Missing"):
        manager.predict(ModelSpec(MODEL), {})
    with pytest.raises(ServingError, match="not compatible"):
        manager.predict(ModelSpec(MODEL), {"x": np.ones((2, 2))})


def test_classify_rejects_predict_signature(manager: ModelManager) -> None:
    with pytest.raises(ServingError) as exc:
        manager.classify(ModelSpec(MODEL), [b""])
    assert exc.value.code == "INVALID_ARGUMENT"
    assert "tensorflow/serving/classify" in exc.value.message
