"""``servectl demo --kubernetes`` without a cluster: what it says it will build, how it runs
a build, what it reads from the API, and its command line. The demo itself runs on the
real node (tests/integration/k8s_node/stack/test_demo.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from servectl.api import validation
from servectl.demo import builds
from servectl.demo import kubernetes as kube_demo
from servectl.demo.story import DemoError, DemoSettings
from tests.unit.cli.helpers import flat, servectl


def test_the_plan_names_each_missing_build_its_command_and_the_total() -> None:
    parts = [
        builds.Build("Traefik", ("traefik-build",), 11, lambda: False),
        builds.Build("Prometheus", ("metrics-build", "prometheus"), 2, lambda: False),
        builds.Build("Helm", ("k8s-clients",), 0.5, lambda: True),
    ]
    lines = builds.plan_lines(parts)
    assert lines[1] == "  - Traefik (~11 min): bash scripts/traefik-build"
    assert lines[2] == "  - Prometheus (~2 min): bash scripts/metrics-build prometheus"
    assert not any("Helm" in line for line in lines)
    assert "about 13 min on 2 cores in all" in lines[-1]
    assert builds.plan_lines(parts[2:]) == []


def script(repo: Path, body: str) -> builds.Build:
    (repo / "scripts").mkdir(parents=True, exist_ok=True)
    (repo / "scripts" / "fake-build").write_text(body)
    return builds.Build("a fake", ("fake-build", "arg"), 1, lambda: False)


def test_a_build_passes_its_progress_on_and_returns_what_it_printed_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(builds, "HEARTBEAT_S", 0.3)
    build = script(
        tmp_path,
        'echo "fake-build: step one ($1)" >&2\necho "go: noise" >&2\nsleep 1\n'
        "echo first\necho /cache/dir\n",
    )
    said: list[str] = []
    printed = builds.run_script(tmp_path, build, said.append, tmp_path / "logs")
    assert printed == "/cache/dir"
    assert "  fake-build: step one (arg)" in said
    assert not any("noise" in line for line in said)  # in the log only
    assert any("a fake:" in line and "s so far" in line for line in said)  # the heartbeat
    assert said[-1].startswith("built a fake in ")
    log = (tmp_path / "logs" / "fake-build-arg.log").read_text()
    assert "go: noise" in log


def test_a_failed_build_names_its_command_and_log(tmp_path: Path) -> None:
    build = script(tmp_path, 'echo "fake-build: no Go" >&2\nexit 3\n')
    with pytest.raises(DemoError, match=r"bash scripts/fake-build arg failed \(exit 3\).*logs"):
        builds.run_script(tmp_path, build, lambda line: None, tmp_path / "logs")


def test_the_service_is_a_valid_modelservice_on_the_models_claim(tmp_path: Path) -> None:
    settings = kube_demo.defaults(DemoSettings(out=tmp_path))
    doc = kube_demo.service_doc(settings, "servectl-model-server:1")
    service = validation.load_model_service(doc)
    assert service.spec.model.base_path == "pvc://models/cost_model"
    assert doc["spec"]["runtime"]["resources"]["cpu"] == "250m"
    assert (settings.base_rps, settings.step) == (5.0, 5.0)


class FakeCluster:
    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, str, Any]] = []

    def request(
        self, method: str, path: str, body: Any = None, *, content_type: str = ""
    ) -> tuple[int, Any]:
        self.calls.append((method, path, body))
        for prefix, answer in self.answers.items():
            if path.startswith(prefix):
                return answer
        return 404, {}


class FakeNode:
    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster


def event(name: str, stamp: str, reason: str, version: str = "1") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "resourceVersion": version},
        "lastTimestamp": stamp,
        "type": "Normal",
        "reason": reason,
        "message": f"{reason} happened",
    }


def test_events_come_once_each_in_time_order(tmp_path: Path) -> None:
    items = [
        event("b", "2026-11-28T10:00:05Z", "Scaled"),
        event("a", "2026-11-28T10:00:01Z", "Deployed"),
        {"metadata": {"name": "c"}, "reason": "NoTime"},  # no timestamp: skipped
    ]
    cluster = FakeCluster({"/api/v1/namespaces/demo/events": (200, {"items": items})})
    target = kube_demo.KubeTarget(DemoSettings(out=tmp_path), print)
    target.node = FakeNode(cluster)
    first = target.new_events()
    assert [e["reason"] for e in first] == ["Deployed", "Scaled"]
    assert first[1]["time"] - first[0]["time"] == 4.0
    assert target.new_events() == []
    assert "involvedObject.name=cost" in cluster.calls[0][1]


def test_events_in_one_second_come_in_the_order_they_were_posted(tmp_path: Path) -> None:
    # A rollout completed and the next begun in the same second (the API's whole seconds).
    items = [
        event("x", "2026-12-05T07:50:13Z", "Begun", version="912"),
        event("y", "2026-12-05T07:50:13Z", "Completed", version="911"),
        event("z", "2026-12-05T07:50:12Z", "Weights", version="913"),  # stamped earlier
    ]
    cluster = FakeCluster({"/api/v1/namespaces/demo/events": (200, {"items": items})})
    target = kube_demo.KubeTarget(DemoSettings(out=tmp_path), print)
    target.node = FakeNode(cluster)
    found = target.new_events()
    assert [e["reason"] for e in found] == ["Weights", "Completed", "Begun"]
    assert all("order" not in e for e in found)


def test_pods_are_timed_from_creation_to_ready_and_named_in_the_notes(tmp_path: Path) -> None:
    pods = [
        {
            "metadata": {"name": "cost-v1-a", "creationTimestamp": "2026-11-28T10:00:00Z"},
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "lastTransitionTime": "2026-11-28T10:00:07Z",
                    }
                ]
            },
        },
        {  # not Ready yet: timed later
            "metadata": {"name": "cost-v1-b", "creationTimestamp": "2026-11-28T10:00:00Z"},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]},
        },
    ]
    cluster = FakeCluster(
        {
            "/apis/servectl.io": (200, {"status": {"revisions": [{"name": "cost-v1"}]}}),
            "/api/v1/namespaces/demo/pods": (200, {"items": pods}),
        }
    )
    target = kube_demo.KubeTarget(DemoSettings(out=tmp_path), print)
    target.node = FakeNode(cluster)
    assert target.status() == {"revisions": [{"name": "cost-v1"}]}
    assert target.pod_ready_s == {"cost-v1-a": 7.0}
    assert any("median 7 s, at most 7 s over 1 pods" in line for line in target.notes())


def test_a_rollout_is_a_change_of_spec_model_version(tmp_path: Path) -> None:
    cluster = FakeCluster({"/apis/servectl.io": (200, {})})
    target = kube_demo.KubeTarget(DemoSettings(out=tmp_path), print)
    target.node = FakeNode(cluster)
    target.start_rollout(2)
    method, path, body = cluster.calls[-1]
    assert (method, body) == ("PATCH", {"spec": {"model": {"version": 2}}})
    assert path.endswith("/namespaces/demo/modelservices/cost")
    cluster.answers = {"/apis/servectl.io": (422, {"message": "no"})}
    with pytest.raises(DemoError, match=r"spec\.model\.version to 3 was refused"):
        target.start_rollout(3)


def test_stop_says_when_there_is_nothing_to_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube_demo, "stop", lambda: None)
    done = servectl("demo", "--kubernetes", "--stop")
    assert done.exit_code == 0 and "no demo cluster is running" in done.output
    monkeypatch.setattr(kube_demo, "stop", lambda: ["iptables: busy"])
    done = servectl("demo", "--kubernetes", "--stop")
    assert done.exit_code == 1 and "could not put back: iptables: busy" in done.output
    done = servectl("demo", "--stop")
    assert done.exit_code != 0 and "--stop is for --kubernetes" in flat(done.output)


def test_standby_is_refused_on_kubernetes_in_one_line() -> None:
    done = servectl("demo", "--kubernetes", "--standby", "1")
    assert done.exit_code != 0
    assert "--standby is for the local runtime" in flat(done.output)


def test_help_says_what_a_first_run_builds_and_how_long_it_takes() -> None:
    text = flat(servectl("demo", "--help").output)
    assert "--kubernetes" in text and "--stop" in text
    assert "A first run builds Kubernetes, Traefik, Prometheus and the images" in text


def test_a_demo_that_cannot_run_here_says_why_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse() -> None:
        raise DemoError(
            "no etcd: install etcd with the Debian package: apt-get install etcd-server"
        )

    monkeypatch.setattr(kube_demo, "preflight", refuse)
    done = servectl("demo", "--kubernetes", "--out", tmp_path / "out")
    assert done.exit_code == 1
    assert "demo: no etcd" in flat(done.output) and "Traceback" not in done.output
