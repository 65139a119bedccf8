"""Each runtime's replica groups in its own scope (issue 25, item 7): two supervisors on two
state directories never share a group, whatever their replicas are called, and a
supervisor's shutdown (``servectl down``) leaves no group of its scope behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from servectl.backends.local import cgroups
from servectl.backends.local.supervisor import Supervisor
from servectl.metrics.exporters.cgroup import CgroupMount
from tests.unit.backends.local.test_supervisor import COMMAND, all_ready, model, spec, wait_for


def _fake_v1(root: Path) -> cgroups.Setup:
    mounts = []
    for controller in ("cpu", "memory"):
        (root / controller).mkdir(parents=True)
        mounts.append(CgroupMount(str(root / controller), "/", 1, frozenset({controller})))
    return cgroups.detect(mounts)


def test_the_scope_is_a_hash_of_the_state_directory(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert cgroups.scope_for(a) == cgroups.scope_for(tmp_path / "x" / ".." / "a")
    assert cgroups.scope_for(a) != cgroups.scope_for(b)
    assert cgroups.scope_for(a).startswith("rt-") and "/" not in cgroups.scope_for(a)
    setup = _fake_v1(tmp_path / "cg")
    scoped = setup.within("rt-1")
    assert scoped.cpu == tmp_path / "cg" / "cpu" / "servectl" / "rt-1"
    assert scoped.within("rt-1") is scoped
    with pytest.raises(ValueError, match="one path segment"):
        setup.within("a/b")


def test_two_supervisors_with_the_same_pod_name_get_different_groups(tmp_path: Path) -> None:
    setup = _fake_v1(tmp_path / "cg")
    base = model(tmp_path)
    made: list[Supervisor] = []
    try:
        replicas: list[Any] = []
        for name in ("one", "two"):
            sup = Supervisor(tmp_path / name, cgroups=setup, command=COMMAND)
            made.append(sup)
            replicas.append(sup.start(spec(base, pod="m-v1-0", cpu_cores=0.5)))
        first, second = (Path(r.cgroup) for r in replicas)
        assert first != second
        assert first.name == second.name == "default.m-v1-0"
        assert first.parent.name == cgroups.scope_for(tmp_path / "one")
        assert second.parent.name == cgroups.scope_for(tmp_path / "two")
        assert (first / "cgroup.procs").read_text() == str(replicas[0].pid)
        assert (second / "cgroup.procs").read_text() == str(replicas[1].pid)
    finally:
        for sup in made:
            sup.shutdown(grace_s=0.5)


def test_shutdown_removes_the_scope_from_the_real_hierarchy(tmp_path: Path) -> None:
    """Where this machine lets servectl limit CPU (root, a writable cgroup v1 cpu or v2):
    the replica's group and the runtime's scope are gone after shutdown."""
    setup = cgroups.detect()
    if not setup.limits_cpu:
        pytest.skip(f"this machine cannot limit CPU here: {setup.describe()}")
    sup = Supervisor(tmp_path / "run", cgroups=setup, command=COMMAND)
    try:
        replica = sup.start(spec(model(tmp_path), cpu_cores=0.5, memory_bytes=512 << 20))
        scoped = sup.cgroup_setup
        assert scoped is not None and scoped.scope == cgroups.scope_for(tmp_path / "run")
        group = Path(replica.cgroup or "")
        assert group.parent == scoped.cpu and group.is_dir()
        wait_for(sup, all_ready(1))
    finally:
        sup.shutdown(grace_s=0.5)
    assert not group.exists()
    assert all(not parent.exists() for parent in scoped.parents), scoped.parents


def test_shutdown_waits_for_a_busy_group_to_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An adopted replica's last task stays in its group until its new parent reaps it: a
    scope that is busy at first is removed once it empties, not left behind."""
    answers = [["a group (processes still in it?)"], ["a group (processes still in it?)"], []]
    calls: list[cgroups.Setup] = []

    def remove_scope(setup: cgroups.Setup) -> list[str]:
        calls.append(setup)
        return answers[len(calls) - 1]

    monkeypatch.setattr(cgroups, "remove_scope", remove_scope)
    sup = Supervisor(tmp_path / "run", cgroups=_fake_v1(tmp_path / "cg"), command=COMMAND)
    sup.shutdown(grace_s=0.5)
    assert len(calls) == 3 and calls[0].scope == cgroups.scope_for(tmp_path / "run")
