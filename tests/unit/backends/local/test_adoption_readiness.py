"""A controller restart is not a replica restart: a new supervisor adopts a replica that was
READY as READY, also when the replica, busy at its CPU quota, answers its first status
check later than a starting replica's 0.2 s (issue 25, item 5). Against the fake model
server (real processes)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from servectl.backends.local.replica_state import Phase
from servectl.backends.local.supervisor import Supervisor
from tests.unit.backends.local.test_supervisor import (
    COMMAND,
    FakeClock,
    all_ready,
    model,
    spec,
    wait_for,
)


@pytest.fixture
def make() -> Iterator[Callable[..., Supervisor]]:
    made: list[Supervisor] = []

    def factory(directory: Path, **kw: Any) -> Supervisor:
        made.append(Supervisor(directory, command=COMMAND, **kw))
        return made[-1]

    yield factory
    for sup in made:
        if not sup._closed:
            sup.shutdown(grace_s=0.5)


def test_a_ready_replica_that_answers_slowly_is_adopted_ready_and_stays_so(
    tmp_path: Path, make: Callable[..., Supervisor]
) -> None:
    run_dir = tmp_path / "run"
    base = model(tmp_path)
    first = make(run_dir)
    first.start(spec(base))
    wait_for(first, all_ready(1))
    first.close()  # the controller is gone; its replica serves on
    # Busy at its quota: a status check takes 0.5 s (within a READY replica's 1 s).
    (base / "fake.json").write_text(json.dumps({"status_delay_s": 0.5}))
    clock = FakeClock()
    again = make(run_dir, clock=clock)
    (adopted,) = again.replicas()
    assert adopted.adopted and adopted.phase is Phase.READY, adopted.message
    # Its CPU counts from the adoption on: the exporter's rates start again with it.
    assert adopted.ready_at is not None and adopted.started_at is not None
    assert adopted.ready_at > adopted.started_at
    # Its slow checks keep it READY (a READY replica's timeout is 1 s).
    for _ in range(12):
        (seen,) = wait_for(again, lambda rs: True, clock=clock)
        assert seen.phase is Phase.READY, seen.message
        clock.advance(0.5)


def test_a_replica_still_loading_is_adopted_starting(
    tmp_path: Path, make: Callable[..., Supervisor]
) -> None:
    run_dir = tmp_path / "run"
    base = model(tmp_path, ready_after_s=30)
    first = make(run_dir)
    first.start(spec(base))
    first.poll()
    first.close()
    again = make(run_dir)
    (adopted,) = again.replicas()
    assert adopted.adopted and adopted.phase is Phase.STARTING, adopted.message
