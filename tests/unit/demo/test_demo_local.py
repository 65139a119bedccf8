"""The local demo target's reading of its replicas' CPU (the pace uses it)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from servectl.demo.local import LocalTarget, state_dir
from servectl.demo.story import DemoSettings


def _replica(service: str, pod: str, pid: int) -> dict[str, object]:
    return {
        "namespace": "default",
        "service": service,
        "revision": f"{service}-v1",
        "pod": pod,
        "pid": pid,
    }


def test_the_cpu_of_the_demo_services_replicas_and_none_without_them(tmp_path: Path) -> None:
    settings = DemoSettings(out=tmp_path)
    target = LocalTarget(settings, print)
    assert target.cpu_seconds() is None  # no replicas file yet
    state = state_dir(settings)
    state.mkdir(parents=True)
    registry = state / "replicas.json"
    # This process stands in for the replica (no cgroup: read from /proc); another
    # service's replica and one whose process is gone are not counted.
    registry.write_text(
        json.dumps(
            {
                "replicas": [
                    _replica("cost", "cost-v1-0", os.getpid()),
                    _replica("other", "other-v1-0", os.getpid()),
                    _replica("cost", "cost-v1-1", 2**22 + 12345),
                ]
            }
        )
    )
    used = target.cpu_seconds()
    own = os.times()
    assert (
        used is not None
        and 0 < used <= own.user + own.system + own.children_user + own.children_system + 1
    )
    began = time.process_time()
    while time.process_time() - began < 0.05:  # burn 50 ms of CPU (5 clock ticks)
        sum(i * i for i in range(10_000))
    later = target.cpu_seconds()
    assert later is not None and later > used
