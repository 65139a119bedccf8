"""Rollout commands answer (issue 25, item 3), on the local runtime over a real store:

- what the rollout's current state already refuses is refused at once, in one line, exit
  2, writing nothing (the rollout machine itself is asked, on the state the controller
  last wrote, with the commands queued ahead applied first);
- anything else waits until the controller has carried it out (exit 0) or refused it
  (exit 2, its reason); the controller down, the wait timed out or a controller that
  died mid-cycle exit 1 saying the command stays queued (or is lost).

The controller here is a thread that plays its part over the store: it takes the
commands and settles them as the local backend does (tests/unit/backends/local/
test_command_outcomes.py checks the backend's side)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from servectl.backends.local.client import LocalClient
from servectl.backends.local.store import CommandOutcome, QueuedCommand, Store
from servectl.rollout import machine
from servectl.rollout.machine import Phase, RolloutState
from tests.unit.cli.helpers import servectl

IDLE = RolloutState(stable=1)
RUNNING = RolloutState(stable=1, phase=Phase.PROGRESSING, canary=2, step=1, message="analysing")


def _write_state(state_dir: Path, rollout: RolloutState) -> None:
    client = LocalClient(state_dir)
    try:
        client.store.put_status(
            "default",
            "cost",
            {
                "rollout": {
                    "phase": str(rollout.phase),
                    "step": rollout.step,
                    "stableVersion": rollout.stable,
                    "state": machine.to_dict(rollout),
                }
            },
        )
    finally:
        client.close()


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """cost deployed (versions 1 and 2 on disk), its controller last wrote ``IDLE``; no
    controller runs (the pid file names a process that has exited)."""
    models = tmp_path / "models" / "cost_model"
    for version in (1, 2):
        (models / str(version)).mkdir(parents=True)
        (models / str(version) / "saved_model.pb").write_bytes(b"")
    state_dir = tmp_path / "state"
    result = servectl("deploy", "cost", "--model-path", models, "--state-dir", state_dir)
    assert result.exit_code == 0, result.output
    _write_state(state_dir, IDLE)
    dead = subprocess.Popen(["true"])
    dead.wait()
    (state_dir / "controller.pid").write_text(f"{dead.pid}\n")
    return state_dir


def _commands(state_dir: Path) -> list[int]:
    with Store.open(state_dir / "state.db") as store:
        return [c.id for c in store.pending_commands("default", "cost")]


def _spec(state_dir: Path) -> object:
    with Store.open(state_dir / "state.db") as store:
        row = store.get_spec("default", "cost")
        assert row is not None
        return row.spec


# --------------------------------------------------------------------------- at once

AT_ONCE: list[tuple[list[str], str]] = [
    (["promote"], "promote refused: no rollout is running (phase Idle); nothing to promote"),
    (["promote", "--full"], "promote-full refused: no rollout is running (phase Idle)"),
    (["abort"], "abort refused: no rollout is running (phase Idle); nothing to abort"),
    (["pause"], "pause refused: only a progressing rollout can be paused (phase Idle)"),
    (["resume"], "resume refused: the rollout is not paused (phase Idle)"),
    (["retry"], "retry refused: only an aborted rollout can be retried (phase Idle)"),
    (["undo"], "undo refused: there is no previous version to go back to (serving v1)"),
    (["start", "--version", "1"], "start refused: v1 is already the stable version"),
]


@pytest.mark.parametrize(("verb", "says"), AT_ONCE, ids=[" ".join(v) for v, _ in AT_ONCE])
def test_what_the_state_refuses_is_refused_at_once_in_one_line(
    state: Path, verb: list[str], says: str
) -> None:
    spec = _spec(state)
    began = time.monotonic()
    result = servectl("rollout", verb[0], "cost", *verb[1:], "--state-dir", state)
    assert time.monotonic() - began < 5, "refused at once, not after a wait"
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {says}"), result.stderr
    assert _commands(state) == [] and _spec(state) == spec  # nothing written


def test_commands_queued_ahead_count(state: Path) -> None:
    started = servectl(
        "rollout", "start", "cost", "--version", "2", "--no-wait", "--state-dir", state
    )
    assert started.exit_code == 0, started.output
    # Idle in status, but the queued start comes first: the promote is judged after it.
    promoted = servectl("rollout", "promote", "cost", "--no-wait", "--state-dir", state)
    assert promoted.exit_code == 0, promoted.output
    assert promoted.stdout.strip() == "modelservice/cost: promote queued"
    again = servectl("rollout", "start", "cost", "--version", "2", "--state-dir", state)
    assert again.exit_code == 2
    assert "start refused: v2 is already rolling out (phase Progressing" in again.stderr
    assert len(_commands(state)) == 2


def test_no_state_yet_leaves_the_judgement_to_the_controller(state: Path) -> None:
    client = LocalClient(state)
    try:
        client.store.put_status("default", "cost", {})  # no cycle has written a state yet
    finally:
        client.close()
    result = servectl("rollout", "promote", "cost", "--no-wait", "--state-dir", state)
    assert result.exit_code == 0, result.output


# --------------------------------------------------------------------------- the wait


class Controller:
    """Plays the controller over the store: alive (this process's pid in the pid file),
    takes each command and answers with ``answer(command)``; ``None`` leaves it taken
    and unanswered."""

    def __init__(
        self, state_dir: Path, answer: Callable[[QueuedCommand], tuple[CommandOutcome, str] | None]
    ) -> None:
        self.state_dir = state_dir
        self.answer = answer
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        (state_dir / "controller.pid").write_text(f"{os.getpid()}\n")

    def _run(self) -> None:
        with Store.open(self.state_dir / "state.db") as store:
            while not self.stop.wait(0.05):
                taken = store.take_commands("default", "cost")
                outcomes = {c.id: a for c in taken if (a := self.answer(c)) is not None}
                store.settle_commands("default", "cost", outcomes)

    def __enter__(self) -> Controller:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


@pytest.fixture
def running(state: Path) -> Iterator[Path]:
    _write_state(state, RUNNING)
    yield state


def test_a_command_carried_out_exits_0_saying_where_the_rollout_is(running: Path) -> None:
    with Controller(running, lambda c: ("done", "Paused step 1: paused by the user")):
        result = servectl("rollout", "pause", "cost", "--state-dir", running)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "modelservice/cost: pause queued",
        "modelservice/cost: pause carried out: Paused step 1: paused by the user",
    ]
    assert result.stderr == ""


def test_a_command_the_controller_refuses_exits_2_with_its_reason(running: Path) -> None:
    why = "pause: only a progressing rollout can be paused (phase Completed) (check ...)"
    with Controller(running, lambda c: ("refused", why)):
        result = servectl("rollout", "pause", "cost", "--state-dir", running)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        "error: pause refused by the controller: only a progressing rollout can be paused "
        "(phase Completed) (check ...)"
    )


def test_a_failed_cycle_is_a_refusal_with_the_failure(running: Path) -> None:
    with Controller(running, lambda c: ("failed", "the controller's cycle failed: boom")):
        result = servectl("rollout", "abort", "cost", "--state-dir", running)
    assert result.exit_code == 2
    assert "abort refused by the controller: the controller's cycle failed: boom" in result.stderr


def test_with_the_controller_down_it_says_the_command_stays_queued(running: Path) -> None:
    began = time.monotonic()
    result = servectl("rollout", "abort", "cost", "--state-dir", running)
    assert time.monotonic() - began < 5, "no wait for a controller that is not running"
    assert result.exit_code == 1
    ident = _commands(running)[-1]
    assert result.stderr.strip() == (
        f"error: the controller is not running: abort (command {ident}) stays queued and is "
        "carried out when it starts (`servectl up`)"
    )


def test_a_wait_that_times_out_says_the_command_stays_queued(running: Path) -> None:
    with Controller(running, lambda c: ("done", "")) as controller:
        controller.stop.set()  # alive, but it never takes the command
        controller.thread.join()
        began = time.monotonic()
        result = servectl("rollout", "abort", "cost", "--timeout", "0.6", "--state-dir", running)
        waited = time.monotonic() - began
    assert result.exit_code == 1
    assert 0.5 < waited < 5
    assert "error: the controller has not decided on abort (command" in result.stderr
    assert "within 0.6 s: it stays queued" in result.stderr
    assert len(_commands(running)) == 1


def test_a_controller_that_dies_after_taking_it_has_lost_it(running: Path) -> None:
    def die(command: QueuedCommand) -> None:
        (running / "controller.pid").unlink()  # gone mid-cycle: taken, never answered

    with Controller(running, die):
        result = servectl("rollout", "abort", "cost", "--state-dir", running)
    assert result.exit_code == 1
    assert "the controller stopped after taking abort (command" in result.stderr


def test_no_wait_only_queues(running: Path) -> None:
    result = servectl("rollout", "abort", "cost", "--no-wait", "--state-dir", running)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "modelservice/cost: abort queued"
    assert "the controller is not running" in result.stderr  # the note, as before
