"""Rollout commands on a cluster answer too (issue 25, item 3), over the fake ``Kube`` of
test_client.py: what the rollout's state in status refuses is refused at once (exit 2,
nothing written), a new ``spec.model.version`` counting as the start ahead of it; the
wait reads ``status.loop`` (the command's id, or the version a new spec started) and a
CommandRefused Event posted after the command was written."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from servectl.backends.client import ClientError
from servectl.backends.kubernetes import client as kc
from servectl.rollout import machine
from servectl.rollout.machine import Op, Phase, RolloutState
from tests.unit.backends.kubernetes.test_client import NS, FakeKube, ms_doc, run
from tests.unit.backends.kubernetes.test_client import cli as cli  # the fixture

IDLE = RolloutState(stable=1)
RUNNING = RolloutState(stable=1, phase=Phase.PROGRESSING, canary=2, step=1, message="analysing")


def status_of(rollout: RolloutState, **loop: Any) -> dict[str, Any]:
    return {
        "rollout": {
            "phase": str(rollout.phase),
            "step": rollout.step,
            "stableVersion": rollout.stable,
            "canaryVersion": rollout.canary,
            "message": rollout.message,
            "state": machine.to_dict(rollout),
        },
        "loop": dict(loop),
    }


def refusal_event(name: str, message: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": NS},
        "type": "Warning",
        "reason": "CommandRefused",
        "message": message,
        "lastTimestamp": "2025-01-31T10:00:00Z",
    }


@pytest.fixture
def kube() -> FakeKube:
    return FakeKube()


@pytest.fixture
def client(kube: FakeKube) -> kc.KubeClient:
    return kc.KubeClient(kube, context="prod", namespace=NS)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("op", "version", "says"),
    [
        (Op.PROMOTE, None, "promote refused: no rollout is running (phase Idle)"),
        (Op.ABORT, None, "abort refused: no rollout is running (phase Idle)"),
        (Op.PAUSE, None, "pause refused: only a progressing rollout can be paused"),
        (Op.START, 1, "start refused: v1 is already the stable version"),
    ],
)
def test_what_the_state_refuses_is_refused_at_once_writing_nothing(
    kube: FakeKube, client: kc.KubeClient, op: Op, version: int | None, says: str
) -> None:
    kube.put(ms_doc(), status_of(IDLE))
    with pytest.raises(ClientError) as refused:
        client.rollout(NS, "cost", op, version)
    assert str(refused.value).startswith(says) and refused.value.exit_code == 2
    assert kube.writes == []


def test_a_new_spec_version_is_the_start_ahead_of_a_command(
    kube: FakeKube, client: kc.KubeClient
) -> None:
    kube.put(ms_doc(version=2), status_of(IDLE))  # deployed v2, not started yet
    assert client.rollout(NS, "cost", Op.PROMOTE).id is not None  # after the start: fine
    with pytest.raises(ClientError, match="v2 is already rolling out"):
        client.rollout(NS, "cost", Op.START, 2)


def test_the_wait_reads_the_command_id_in_status_then_the_events(
    kube: FakeKube, client: kc.KubeClient
) -> None:
    kube.put(ms_doc(), status_of(RUNNING))
    kube.events.append(refusal_event("cost.old", "pause: refused long ago"))
    request = client.rollout(NS, "cost", Op.PAUSE)
    assert client.command_outcome(NS, "cost", request).state == "waiting"
    paused = RolloutState(
        stable=1, phase=Phase.PAUSED, canary=2, step=1, message="paused by the user"
    )
    kube.ms("cost")["status"] = status_of(paused, command=request.id)
    # Status comes before the Event: one more look before it is called done.
    assert client.command_outcome(NS, "cost", request).state == "waiting"
    done = client.command_outcome(NS, "cost", request)
    assert (done.state, done.message) == ("done", "Paused step 1: paused by the user")

    request = client.rollout(NS, "cost", Op.RESUME)
    kube.ms("cost")["status"]["loop"]["command"] = request.id
    kube.events.append(refusal_event("cost.new", "resume: the rollout is not paused (phase X)"))
    refused = client.command_outcome(NS, "cost", request)
    assert (refused.state, refused.message) == (
        "refused",
        "resume: the rollout is not paused (phase X)",
    )


def test_a_start_through_the_spec_is_taken_when_status_names_its_version(
    kube: FakeKube, client: kc.KubeClient
) -> None:
    kube.put(ms_doc(), status_of(IDLE))
    request = client.rollout(NS, "cost", Op.START, 2)
    assert request.id is None and kube.ms("cost")["spec"]["model"]["version"] == 2
    assert client.command_outcome(NS, "cost", request).state == "waiting"
    started = RolloutState(
        stable=1, phase=Phase.PROGRESSING, canary=2, step=0, message="step 0: moving"
    )
    kube.ms("cost")["status"] = status_of(started, startVersion=2)
    client.command_outcome(NS, "cost", request)
    done = client.command_outcome(NS, "cost", request)
    assert (done.state, done.message) == ("done", "Progressing step 0: moving")


def test_the_cli_waits_on_a_cluster_and_exits_with_the_outcome(
    cli: Path, kube: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube.put(ms_doc(), status_of(RUNNING))
    refused_at_once = run(cli, "rollout", "retry", "cost")
    assert refused_at_once.exit_code == 2
    assert refused_at_once.output.strip().startswith(
        "error: retry refused: only an aborted rollout can be retried (phase Progressing)"
    )
    # A controller that carries the pause out as soon as the annotation is written.
    patch = kube.merge_patch

    def and_carry_out(*args: Any, **kwargs: Any) -> Any:
        written = patch(*args, **kwargs)
        annotation = (written["metadata"].get("annotations") or {}).get(
            "servectl.io/rollout-command"
        )
        if annotation:
            paused = RolloutState(stable=1, phase=Phase.PAUSED, canary=2, step=1, message="paused")
            live = kube.ms("cost")
            live["status"] = status_of(paused, command=json.loads(annotation)["id"])
        return copy.deepcopy(written)

    monkeypatch.setattr(kube, "merge_patch", and_carry_out)
    paused = run(cli, "rollout", "pause", "cost")
    assert paused.exit_code == 0, paused.output
    assert "modelservice/cost: pause carried out: Paused step 1: paused" in paused.output
    monkeypatch.setattr(kube, "merge_patch", patch)  # now nobody carries anything out
    timed_out = run(cli, "rollout", "resume", "cost", "--timeout", "0.3")
    assert timed_out.exit_code == 1
    assert "has not decided on resume (command" in timed_out.output
    assert "it stays queued" in timed_out.output
