"""What became of each rollout command, recorded where the CLI reads it (issue 25, item
3): the store's outcome per command (schema 3), the local backend settling the commands
its cycle took (refused: the CommandRefused event that names it; else done, with where
the rollout stands), a failed cycle settling them as failed; and the loop's side: each
command's result in the outcome, each refusal event naming its command."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servectl.api import models
from servectl.backends.local import store as store_mod
from servectl.backends.local.backend import LocalBackend, TickView
from servectl.backends.local.fleet import LocalFleet
from servectl.backends.local.store import Store
from servectl.backends.sim.bench import FixedReplicas as FixedPolicy
from servectl.controller.backend import Event, EventReason, EventType
from servectl.controller.decide import Command, LoopState, ServectlDecider
from servectl.controller.driver import Listed
from servectl.controller.reconcile import reconcile_once
from servectl.controller.spec import ServiceSpec
from servectl.planning.planner import PlannerState
from servectl.rollout.machine import Op, Phase, RolloutState
from tests.unit.controller.fakes import FakeBackend

NS, NAME = "default", "cost"
NOW = 1_800_000_000.0
DOC: dict[str, Any] = {
    "apiVersion": "servectl.io/v1alpha1",
    "kind": "ModelService",
    "metadata": {"name": NAME, "namespace": NS},
    "spec": {"model": {"name": "cost_model", "basePath": "/models/cost", "version": 1}},
}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "state.db") as opened:
        opened.put_spec(NS, NAME, DOC, now=NOW)
        yield opened


def backend_of(store: Store) -> LocalBackend:
    return LocalBackend(
        store=store,
        service=models.ModelService.model_validate(DOC),
        record=None,
        view=TickView(replicas=(), routes={}),
        supervisor=None,  # type: ignore[arg-type]  # commands and emit start nothing
        wall_clock=lambda: NOW,
    )


def test_the_store_keeps_each_commands_outcome(store: Store) -> None:
    assert store.schema_version == 3
    first = store.enqueue_command(NS, NAME, "promote")
    second = store.enqueue_command(NS, NAME, "start", 2)
    assert [c.id for c in store.pending_commands(NS, NAME)] == [first, second]
    assert [c.id for c in store.pending_commands(NS, NAME)] == [first, second]  # reads only
    queued = store.command(NS, NAME, first)
    assert queued is not None and queued.taken is None and queued.outcome is None
    store.settle_commands(NS, NAME, {first: ("done", "")})  # not taken yet: left alone
    assert store.command(NS, NAME, first).outcome is None  # type: ignore[union-attr]
    store.take_commands(NS, NAME, now=NOW)
    assert store.pending_commands(NS, NAME) == []
    store.settle_commands(NS, NAME, {first: ("refused", "promote: no"), second: ("done", "ok")})
    refused, done = store.command(NS, NAME, first), store.command(NS, NAME, second)
    assert refused is not None and (refused.outcome, refused.message) == ("refused", "promote: no")
    assert done is not None and (done.outcome, done.version, done.taken) == ("done", 2, NOW)
    assert store.command(NS, NAME, 999) is None
    store.delete_service(NS, NAME)
    assert store.command(NS, NAME, first) is None
    store.settle_commands(NS, NAME, {first: ("done", "")})  # a deleted service: no error


def test_a_schema_2_store_gets_the_outcome_columns_keeping_its_commands(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with Store.open(db, migrations=store_mod.MIGRATIONS[:2]) as old:
        old.put_spec(NS, NAME, DOC)
        ident = old.enqueue_command(NS, NAME, "abort")
    with Store.open(db) as upgraded:
        assert upgraded.schema_version == 3
        kept = upgraded.command(NS, NAME, ident)
        assert kept is not None and kept.op == "abort" and kept.outcome is None


def test_the_backend_settles_what_its_cycle_took(store: Store) -> None:
    promote = store.enqueue_command(NS, NAME, "promote")
    unknown = store.enqueue_command(NS, NAME, "dance")
    pause = store.enqueue_command(NS, NAME, "pause")
    backend = backend_of(store)
    taken = backend.commands(NOW)
    assert taken == [
        Command(Op.PROMOTE, None, id=str(promote)),
        Command(Op.PAUSE, None, id=str(pause)),
    ]
    rollout = RolloutState(stable=1, phase=Phase.PAUSED, canary=2, step=1, message="paused")
    backend.save_state(LoopState(rollout, PlannerState(), {}, 2))
    refusal = Event(
        NOW, EventType.WARNING, EventReason.COMMAND_REFUSED, "promote: no", str(promote)
    )
    backend.emit([refusal])
    outcomes = {i: store.command(NS, NAME, i) for i in (promote, unknown, pause)}
    assert {i: (c.outcome, c.message) for i, c in outcomes.items() if c is not None} == {
        promote: ("refused", "promote: no"),
        unknown: ("refused", "unknown command 'dance'"),
        pause: ("done", "Paused step 1: paused"),
    }
    assert [e.reason for e in store.events(NS, NAME)] == ["CommandRefused"]
    backend.emit([])  # a second emit has nothing left to settle
    assert store.command(NS, NAME, pause).message == "Paused step 1: paused"  # type: ignore[union-attr]


def test_a_cycle_that_fails_after_taking_commands_settles_them_as_failed(store: Store) -> None:
    ident = store.enqueue_command(NS, NAME, "abort")
    fleet = LocalFleet(store, None, wall_clock=lambda: NOW, allocate_ports=lambda taken: (1, 2))  # type: ignore[arg-type]
    fleet.begin(TickView(replicas=(), routes={}), {})
    listed = Listed(NS, NAME, 1, models.ModelService.model_validate(DOC))
    fleet.open(listed).commands(NOW)
    fleet.refuse(listed, EventReason.RECONCILE_FAILED, "RuntimeError: boom", NOW)
    failed = store.command(NS, NAME, ident)
    assert failed is not None and failed.outcome == "failed"
    assert failed.message == "the controller's cycle failed: RuntimeError: boom"


def test_each_refusal_event_names_its_command_and_the_outcome_lists_every_result() -> None:
    backend = FakeBackend({"m-v1": (1, 3, 100)})
    backend.pending += [Command(Op.PROMOTE, id="7"), Command(Op.START, 2, id="8")]
    decider = ServectlDecider(
        ServiceSpec(name="m", min_replicas=1, max_replicas=10), FixedPolicy(3)
    )
    cycle = reconcile_once(backend, decider, 0.0)
    results = [(r.command.id, r.error is None) for r in cycle.outcome.commands]
    assert results == [("7", False), ("8", True)]
    refused = [e for e in backend.events if e.reason is EventReason.COMMAND_REFUSED]
    assert [(e.command, e.message.split(":")[0]) for e in refused] == [("7", "promote")]
    assert cycle.outcome.errors == (refused[0].message,)
