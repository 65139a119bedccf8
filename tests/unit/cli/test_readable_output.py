"""What ``describe``, ``explain`` and ``get`` print for a user (issue 25, item 10): long
messages wrapped to the terminal and never padded in a pipe, times as local times and how
far from now rather than raw epoch seconds, the resource as kubectl prints it rather than
the controller's internal state, and where the service answers.

Over a store the test fills as a controller that ticked for a minute would leave it
(no controller, no processes); the same resource shape on a cluster is in
tests/unit/backends/kubernetes/test_client.py."""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from servectl.api import validation
from servectl.autoscaling import decision
from servectl.backends import client as protocol
from servectl.backends.local.client import LocalClient
from servectl.cli import console
from servectl.cli import format as fmt
from tests.unit.cli.helpers import servectl

LONG = (
    "requests missing for cost-v1 (requests: no TF Serving series "
    ":tensorflow:serving:request_count: start the model server with "
    '--monitoring_config_file (prometheus_config {enable: true, path: "/monitoring/'
    'prometheus/metrics"}) and scrape that path): holding or scaling up only, never down'
)


def status_at(now: float) -> dict[str, Any]:
    """A status as the controller writes it a minute after the service started, in a
    panic that holds until ``now + 42``."""
    # One recommendation a second for the stabilization window: what status carried.
    policy_state = {
        "behavior": {"recommendations": [[now - 60 + i, 2] for i in range(60)]},
        "surges": [],
        "peaks": [[now - 30, 12.5]],
    }
    rollout_state = {"stable": 1, "phase": "Idle", "canary": None, "step": 0}
    return {
        "revisions": [
            {
                "name": "cost-v1",
                "version": 1,
                "weight": 100,
                "desiredReplicas": 2,
                "readyReplicas": 2,
                "modelState": "AVAILABLE",
            }
        ],
        "rollout": {
            "phase": "Idle",
            "step": 0,
            "stableVersion": 1,
            "message": "",
            "verdicts": [],
            "state": rollout_state,
        },
        "autoscaling": {
            "desiredReplicas": 2,
            "decidedBy": "backlog",
            "reason": "PANIC",
            "message": f"in panic until {decision.instant(now + 42)}: no scale-down",
            "lastScaleTime": decision.instant(now - 120),
            "policyState": policy_state,
        },
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Serving",
                "message": "every revision with traffic has a ready replica",
                "lastTransitionTime": decision.instant(now - 60),
            },
            {
                "type": "MetricsAvailable",
                "status": "False",
                "reason": "MetricsStale",
                "message": LONG,
                "lastTransitionTime": decision.instant(now - 60),
            },
        ],
    }


def cycle_at(now: float) -> dict[str, Any]:
    """The last cycle's record at ``now``: a panic held for 42 s more, and the old
    revision draining for 300 s more."""
    return {
        "time": now - 0.5,
        "applied": True,
        "metricsOk": True,
        "metricsDetail": "",
        "service": {"cpuUtilization": 41.0, "rps": 12.5, "latencyMs": {"p99": 42.25}},
        "replicas": {"current": 2, "ready": 2, "min": 1, "max": 4},
        "revisions": [],
        "decision": {
            "recommended": 2,
            "reason": "PANIC",
            "signal": "backlog",
            "detail": f"in panic until {decision.instant(now + 42)}: no scale-down",
            "proposals": {"backlog": 3.1},
        },
        "requested": 2,
        "demand": 2,
        "errors": [],
        "plan": {
            "phase": "Idle",
            "message": "",
            "revisions": [
                {
                    "name": "cost-v0",
                    "replicas": 1,
                    "weight": 0,
                    "reason": "Draining",
                    "message": f"keeps 1 replicas until {decision.instant(now + 300)} (300 s "
                    "after losing traffic), then shrinks",
                }
            ],
        },
    }


@dataclass(frozen=True)
class Filled:
    state: Path  # the state directory
    now: float  # when it was filled
    status: dict[str, Any]  # cost's


@pytest.fixture
def filled(tmp_path: Path) -> Filled:
    """cost (status, last cycle, ports) and fresh (nothing yet), filled just now."""
    base = tmp_path / "models" / "cost_model"
    (base / "1").mkdir(parents=True)
    (base / "1" / "saved_model.pb").write_bytes(b"")
    directory = tmp_path / "state"
    now = time.time()
    status = status_at(now)
    client = LocalClient(directory)
    try:
        for name in ("cost", "fresh"):
            doc = {
                "apiVersion": "servectl.io/v1alpha1",
                "kind": "ModelService",
                "metadata": {"name": name},
                "spec": {"model": {"name": "cost_model", "basePath": str(base), "version": 1}},
            }
            client.deploy(validation.load_model_service(doc))
        client.store.put_status("default", "cost", status)
        client.store.put_cycle("default", "cost", cycle_at(now))
        client.store.put_runtime("default", "cost", {"restPort": 8503, "grpcPort": 8502})
    finally:
        client.close()
    return Filled(directory, now, status)


# ----------------------------------------------------------------------------- tables


def test_a_long_message_is_not_padded_in_a_pipe(filled: Filled) -> None:
    described = servectl("describe", "cost", "--state-dir", filled.state)
    assert described.exit_code == 0, described.output
    lines = described.stdout.splitlines()
    assert not [line for line in lines if line != line.rstrip()], "lines padded with spaces"
    ready = next(line for line in lines if line.startswith("Ready "))
    stale = next(line for line in lines if line.startswith("MetricsAvailable "))
    # Whole rows, each message right after its reason, both starting in the same column.
    assert stale.endswith(LONG) and ready.endswith(
        "every revision with traffic has a ready replica"
    )
    assert ready.index("every revision") == stale.index("requests missing")
    assert re.search(r"MetricsStale {3}requests missing", stale)
    header = next(line for line in lines if line.startswith("TYPE "))
    assert header.split() == ["TYPE", "STATUS", "REASON", "MESSAGE"]
    assert len(header) < 80 and len(lines[lines.index(header) + 1]) == len(header)


def test_on_a_terminal_the_message_wraps_under_itself() -> None:
    terminal = Console(force_terminal=True, width=80, color_system=None, record=True)
    console.print_table(
        "Conditions",
        ["TYPE", "STATUS", "REASON", "MESSAGE"],
        [["MetricsAvailable", "False", "MetricsStale", LONG], ["Ready", "True", "Serving", "ok"]],
        console=terminal,
    )
    lines = terminal.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    start = lines[1].index("MESSAGE")
    wrapped = lines[3 : lines.index(next(x for x in lines if x.startswith("Ready")))]
    assert len(wrapped) > 3
    assert all(line[:start].strip() == "" for line in wrapped[1:])
    assert " ".join(line[start:].strip() for line in wrapped) == LONG  # every word, whole


def test_table_lines_align_numbers_right_and_text_left() -> None:
    lines = fmt.table_lines(
        ["NAME", "READY", "WEIGHT", "MODEL", "P99 MS"],
        [["cost-v1", "2/2", "100%", "AVAILABLE", "42.2"], ["cost-v10", "10/12", "0%", "-", "-"]],
    )
    assert lines == [
        "NAME       READY   WEIGHT   MODEL       P99 MS",
        "─" * 46,
        "cost-v1      2/2     100%   AVAILABLE     42.2",
        "cost-v10   10/12       0%   -                -",
    ]
    assert fmt.numeric(["1.00×", "+0.12 pp", "12m", "22:31:18", "24,307", "—"])
    assert not fmt.numeric(["cost-v1:100", "3"]) and not fmt.numeric(["-", ""])


# ----------------------------------------------------------------------------- times

# A local time, with the date in front when it falls on another day than now (a run
# just before midnight shows the panic's end as tomorrow's).
CLOCK = r"(?:\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d"


def test_explain_and_describe_show_times_as_local_times_and_how_far(filled: Filled) -> None:
    explained = servectl("explain", "cost", "--state-dir", filled.state)
    assert explained.exit_code == 0, explained.output
    text = explained.stdout
    panic = fmt.moment(filled.now + 42, filled.now)
    assert re.search(rf"in panic until {CLOCK} \(in 4[12] s\): no scale-down", text), text
    assert re.search(rf"keeps 1 replicas until {CLOCK} \(in 5 min\)", text), text
    assert panic.split()[0] in text
    assert "t=" not in text and not re.search(r"\d{9,}", text)
    described = servectl("describe", "cost", "--state-dir", filled.state).stdout
    assert re.search(rf"in panic until {CLOCK} \(in 4[12] s\)", described), described
    # -o json keeps the text as the controller wrote it: an RFC 3339 time, for tools
    record = json.loads(
        servectl("explain", "cost", "--state-dir", filled.state, "-o", "json").stdout
    )
    assert decision.instant(filled.now + 42) in record["decision"]["detail"]


def test_the_loop_writes_a_moment_as_an_rfc3339_time() -> None:
    assert decision.instant(102.7) == "1970-01-01T00:01:42Z"
    assert decision.instant(1_795_805_059) == "2026-11-27T18:44:19Z"


def test_relative_and_readable_times() -> None:
    assert [fmt.relative(d) for d in (0.4, 42, -42, 300, -7300, 200_000)] == [
        "now",
        "in 42 s",
        "42 s ago",
        "in 5 min",
        "2 h ago",
        "in 2 d",
    ]
    # a moment on another day than now carries its date, whatever the machine's zone
    before_midnight = dt.datetime(2026, 11, 27, 23, 59, 40).timestamp()
    assert fmt.moment(before_midnight + 42, before_midnight) == "2026-11-28 00:00:22 (in 42 s)"
    assert fmt.moment(before_midnight + 10, before_midnight) == "23:59:50 (in 10 s)"
    later = fmt.readable_times("until 2026-11-27T13:24:19Z, then 2026-11-27T13:24:19.5Z", 0.0)
    assert "Z" not in later and later.count("(in 20785 d)") == 2


# ----------------------------------------------------------------------------- -o json|yaml


def test_get_o_yaml_is_the_resource_without_internal_state(filled: Filled) -> None:
    printed = servectl("get", "cost", "--state-dir", filled.state, "-o", "yaml")
    assert printed.exit_code == 0, printed.output
    doc = yaml.safe_load(printed.stdout)
    assert list(doc) == ["apiVersion", "kind", "metadata", "spec", "status"]
    assert (doc["apiVersion"], doc["kind"]) == ("servectl.io/v1alpha1", "ModelService")
    meta = doc["metadata"]
    assert list(meta) == ["name", "namespace", "generation", "creationTimestamp"]
    assert (meta["name"], meta["namespace"], meta["generation"]) == ("cost", "default", 1)
    created = protocol.timestamp(meta["creationTimestamp"])
    assert created is not None and abs(created - filled.now) < 60
    status = doc["status"]
    assert "policyState" not in status["autoscaling"] and "state" not in status["rollout"]
    assert status["rollout"] == {k: v for k, v in filled.status["rollout"].items() if k != "state"}
    assert status["autoscaling"]["lastScaleTime"] == filled.status["autoscaling"]["lastScaleTime"]
    assert status["endpoints"] == {"rest": "http://127.0.0.1:8503", "grpc": "127.0.0.1:8502"}
    assert len(printed.stdout.splitlines()) < 70
    # describe -o json prints the same resource; -o json is one object per line
    described = servectl("describe", "cost", "--state-dir", filled.state, "-o", "json").stdout
    assert described.count("\n") == 1 and json.loads(described) == doc
    listed = servectl("get", "--state-dir", filled.state, "-o", "json").stdout.splitlines()
    assert [json.loads(line)["metadata"]["name"] for line in listed] == ["cost", "fresh"]


def test_public_status_keeps_what_users_read() -> None:
    status = {
        "observedGeneration": 3,
        "rollout": {"phase": "Paused", "step": 1, "verdicts": [{"step": 0}], "state": {"x": 1}},
        "autoscaling": {"desiredReplicas": 2, "policyState": {"behavior": {}}},
        "conditions": [],
        "loop": {"state": {}},
    }
    assert protocol.public_status(status) == {
        "observedGeneration": 3,
        "rollout": {"phase": "Paused", "step": 1, "verdicts": [{"step": 0}]},
        "autoscaling": {"desiredReplicas": 2},
        "conditions": [],
    }


# ----------------------------------------------------------------------------- endpoints


def test_get_and_describe_show_where_the_service_answers(filled: Filled) -> None:
    table = servectl("get", "--state-dir", filled.state)
    lines = table.stdout.splitlines()
    assert lines[1].split()[:7] == ["NAME", "READY", "WEIGHTS", "ROLLOUT", "REST", "GRPC", "AGE"]
    cost = next(line for line in lines if line.startswith("cost "))
    assert cost.split()[4:6] == ["http://127.0.0.1:8503", "127.0.0.1:8502"]
    fresh = next(line for line in lines if line.startswith("fresh "))
    assert fresh.split()[4:6] == ["-", "-"]
    described = servectl("describe", "cost", "--state-dir", filled.state).stdout.splitlines()
    assert described[2] == (
        "endpoints: REST http://127.0.0.1:8503/v1/models/cost_model   gRPC 127.0.0.1:8502"
    )
    waiting = servectl("describe", "fresh", "--state-dir", filled.state).stdout.splitlines()
    assert waiting[2] == (
        "endpoints: not given yet: the controller gives a service its ports at its next tick"
    )
