"""What the CLI does to the local runtime's store (no controller, no processes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from servectl.api import validation
from servectl.backends.local.client import ClientError, LocalClient
from servectl.rollout.machine import Op


def _model(tmp_path: Path, *versions: int) -> Path:
    base = tmp_path / "models" / "cost_model"
    for v in versions:
        (base / str(v)).mkdir(parents=True)
        (base / str(v) / "saved_model.pb").write_bytes(b"")
    return base


def _doc(base: Path, **spec: Any) -> dict[str, Any]:
    model: dict[str, Any] = {"name": "cost_model", "basePath": str(base)}
    model.update(spec.pop("model", {}))
    return {
        "apiVersion": "servectl.io/v1alpha1",
        "kind": "ModelService",
        "metadata": {"name": "cost"},
        "spec": {"model": model, **spec},
    }


@pytest.fixture
def client(tmp_path: Path) -> LocalClient:
    return LocalClient(tmp_path / "state")


def test_deploy_pins_the_latest_version_and_a_new_version_queues_a_rollout(
    client: LocalClient, tmp_path: Path
) -> None:
    base = _model(tmp_path, 1, 2)
    done = client.deploy(validation.load_model_service(_doc(base)))
    assert done.created and done.rollout_to is None
    assert client.get("default", "cost").spec.model.version == 2
    # The same version again: configured, nothing queued.
    again = client.deploy(validation.load_model_service(_doc(base, model={"version": 2})))
    assert not again.created and again.rollout_to is None
    assert client.store.take_commands("default", "cost") == []
    # Another version: a rollout to it.
    moved = client.deploy(validation.load_model_service(_doc(base, model={"version": 1})))
    assert moved.rollout_to == 1
    taken = client.store.take_commands("default", "cost")
    assert [(c.op, c.version) for c in taken] == [("start", 1)]


def test_bad_input_is_refused_before_anything_is_written(
    client: LocalClient, tmp_path: Path
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ClientError, match=r"spec.model.basePath: no version under"):
        client.deploy(validation.load_model_service(_doc(empty)))
    base = _model(tmp_path, 1)
    with pytest.raises(ClientError, match=r"spec.model.version: version 3 is not under"):
        client.deploy(validation.load_model_service(_doc(base, model={"version": 3})))
    broken = _doc(base, autoscaling={"policy": {"ref": "nope"}})
    with pytest.raises(ClientError, match=r"spec.autoscaling.policy.ref"):
        client.deploy(validation.load_model_service(broken))
    assert client.services() == []


def test_rollout_commands_check_the_version_and_scale_keeps_the_bounds_valid(
    client: LocalClient, tmp_path: Path
) -> None:
    base = _model(tmp_path, 1, 2)
    client.deploy(validation.load_model_service(_doc(base, model={"version": 1})))
    with pytest.raises(ClientError, match=r"--version: version 7 is not under"):
        client.rollout("default", "cost", Op.START, 7)
    with pytest.raises(ClientError, match="needs --version"):
        client.rollout("default", "cost", Op.START)
    client.rollout("default", "cost", Op.START, 2)
    client.rollout("default", "cost", Op.PAUSE)
    assert client.get("default", "cost").spec.model.version == 2
    taken = client.store.take_commands("default", "cost")
    assert [(c.op, c.version) for c in taken] == [("start", 2), ("pause", None)]
    updated = client.scale("default", "cost", min_replicas=2, max_replicas=5)
    assert (updated.spec.autoscaling.min_replicas, updated.spec.autoscaling.max_replicas) == (2, 5)
    with pytest.raises(ClientError, match=r"spec\.autoscaling"):
        client.scale("default", "cost", min_replicas=9)
    assert client.get("default", "cost").spec.autoscaling.min_replicas == 2
    with pytest.raises(ClientError, match=r"no ModelService 'other'.*services in default: cost"):
        client.get("default", "other")
    client.delete("default", "cost")
    with pytest.raises(ClientError, match="no ModelService 'cost'"):
        client.delete("default", "cost")


def test_no_controller_is_reported_as_not_running(client: LocalClient) -> None:
    info = client.controller()
    assert not info.alive and info.pid is None
    assert client.stop_controller() is False
