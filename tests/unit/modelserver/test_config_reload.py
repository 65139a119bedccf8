"""Config changes while serving: label moves, policy changes, new and removed models.

Through :meth:`ModelManager.reconfigure` (what ``HandleReloadConfigRequest`` and
``--model_config_file_poll_wait_seconds`` call), the config file watcher, and the real
server process polling its config file.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from servectl.modelserver.errors import ServingError
from servectl.modelserver.models import ModelManager, ModelSpec, parse_model_config_text
from servectl.modelserver.poller import ConfigFileWatcher, start_config_poller
from tests.unit.modelserver.conftest import MODEL, config_text, free_port, start_model_server


def _answer(mgr: ModelManager, **spec: object) -> tuple[int, float]:
    servable, out = mgr.predict(ModelSpec(MODEL, **spec), {"x": np.array([1.0], np.float32)})  # type: ignore[arg-type]
    return servable.version, float(out["y"][0])


def _moved(text: str, stable: int, canary: int) -> str:
    return text.replace('key: "stable" value: 1', f'key: "stable" value: {stable}').replace(
        'key: "canary" value: 2', f'key: "canary" value: {canary}'
    )


@pytest.fixture
def mgr(model_base: Path) -> ModelManager:
    m = ModelManager()
    m.load(parse_model_config_text(config_text(model_base)))
    return m


def test_label_move_reuses_loaded_versions(mgr: ModelManager, model_base: Path) -> None:
    before = {v: mgr.resolve(ModelSpec(MODEL, version=v)) for v in (1, 2)}
    assert _answer(mgr, label="stable") == (1, 1.5)
    mgr.reconfigure(parse_model_config_text(_moved(config_text(model_base), 2, 1)))
    assert _answer(mgr, label="stable") == (2, 2.5)
    assert _answer(mgr, label="canary") == (1, 1.5)
    # Nothing was reloaded: the same servable objects answer.
    assert {v: mgr.resolve(ModelSpec(MODEL, version=v)) for v in (1, 2)} == before


def test_refused_config_changes_nothing(mgr: ModelManager, model_base: Path) -> None:
    one = config_text(model_base).replace("versions: 1 versions: 2", "versions: 1")
    with pytest.raises(ServingError) as info:
        mgr.reconfigure(parse_model_config_text(one))  # canary still names version 2
    assert info.value.code == "FAILED_PRECONDITION"
    assert "version 2 of model half_plus_two" in info.value.message
    assert _answer(mgr, label="canary") == (2, 2.5)

    missing = config_text(model_base).replace(
        "model_config_list {",
        'model_config_list { config { name: "ghost" base_path: "/nonexistent/ghost" }',
    )
    with pytest.raises(ServingError) as info:
        mgr.reconfigure(parse_model_config_text(missing))
    # TF Serving's FileSystemStoragePathSource: INVALID_ARGUMENT "Could not find base path".
    assert info.value.code == "INVALID_ARGUMENT"
    assert "Could not find base path /nonexistent/ghost for servable ghost" in info.value.message
    assert mgr.model_names() == [MODEL, "latest_only"]


def test_models_added_and_removed(mgr: ModelManager, model_base: Path) -> None:
    text = config_text(model_base).replace('name: "latest_only"', 'name: "renamed"')
    mgr.reconfigure(parse_model_config_text(text))
    assert mgr.model_names() == [MODEL, "renamed"]
    with pytest.raises(ServingError) as info:
        mgr.resolve(ModelSpec("latest_only"))
    assert info.value.code == "NOT_FOUND"
    assert mgr.resolve(ModelSpec("renamed")).version == 2


def test_label_move_under_traffic_fails_no_request(mgr: ModelManager, model_base: Path) -> None:
    errors: list[BaseException] = []
    seen: set[int] = set()
    stop = threading.Event()

    def stream() -> None:
        while not stop.is_set():
            try:
                seen.add(_answer(mgr, label="stable")[0])
            except BaseException as exc:  # any failure fails the test
                errors.append(exc)

    threads = [threading.Thread(target=stream) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for stable, canary in ((2, 1), (1, 2), (2, 1)):
            mgr.reconfigure(
                parse_model_config_text(_moved(config_text(model_base), stable, canary))
            )
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert errors == []
    assert _answer(mgr, label="stable") == (2, 2.5)


def test_watcher_applies_changes_once_and_survives_bad_files(
    mgr: ModelManager, model_base: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "models.config"
    original = config_text(model_base)
    path.write_text(original)
    watcher = ConfigFileWatcher(mgr, str(path), original)
    assert watcher.check() is False  # unchanged

    path.write_text(_moved(original, 2, 1))
    assert watcher.check() is True
    assert _answer(mgr, label="stable") == (2, 2.5)

    caplog.set_level(logging.ERROR)
    path.write_text("model_config_list { config { name: ")
    assert watcher.check() is False
    assert "not applied" in caplog.text and "last good config" in caplog.text
    assert _answer(mgr, label="stable") == (2, 2.5)
    caplog.clear()
    assert watcher.check() is False  # the same bad text is not retried or logged again
    assert caplog.text == ""

    path.unlink()
    assert watcher.check() is False
    assert "Cannot read model config file" in caplog.text
    assert _answer(mgr, label="stable") == (2, 2.5)

    path.write_text(original)
    assert watcher.check() is True
    assert _answer(mgr, label="stable") == (1, 1.5)


def test_config_poller_off_without_wait_or_file(mgr: ModelManager) -> None:
    assert start_config_poller(mgr, "models.config", "", 0) is None
    assert start_config_poller(mgr, "", "", 1) is None


def _rest(port: int, path: str, body: object | None = None) -> tuple[int, dict[str, object]]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_server_polls_its_config_file_for_label_moves(model_base: Path, tmp_path: Path) -> None:
    path = tmp_path / "models.config"
    original = config_text(model_base)
    path.write_text(original)
    rest = free_port()
    proc, lines = start_model_server(
        [
            "--port=0",
            f"--rest_api_port={rest}",
            "--rest_api_bind_address=127.0.0.1",
            f"--model_config_file={path}",
            "--model_config_file_poll_wait_seconds=1",
            "--file_system_poll_wait_seconds=0",
        ],
        "Exporting HTTP/REST API",
    )
    try:
        assert "Exporting HTTP/REST API" in lines[-1], "".join(lines)
        url = f"/v1/models/{MODEL}/labels/stable:predict"
        assert _rest(rest, url, {"instances": [1.0]}) == (200, {"predictions": [1.5]})
        path.write_text(_moved(original, 2, 1))
        deadline = threading.Event()
        for _ in range(150):
            if _rest(rest, url, {"instances": [1.0]}) == (200, {"predictions": [2.5]}):
                break
            deadline.wait(0.1)
        assert _rest(rest, url, {"instances": [1.0]}) == (200, {"predictions": [2.5]})
        status = _rest(rest, f"/v1/models/{MODEL}/labels/canary")
        assert status[0] == 200
        assert status[1]["model_version_status"][0]["version"] == "1"  # type: ignore[index]
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    assert proc.returncode == 0
