"""The node puts this machine back: after a normal stop, and after the process that
started it was killed (SIGKILL: no atexit, containerd, kubelet, kube-proxy and the pods'
containers left running), by the next node's start. And the kubelet restarted: pods keep
serving."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from servectl.testing.k8s import _host, images
from servectl.testing.k8s.node import BRIDGE, CGROUP, NODE_DIR, RUN_DIR, Node

HTTPD = "servectl.test/httpd:1"


def host_state() -> dict[str, Any]:
    """What a node may change, as comparable values."""

    def rules(tool: str) -> list[str]:
        saved = _host.run([f"{tool}-save"], check=False)
        # Counters and comments change by themselves; the chains and rules are the state.
        return sorted(
            line.split(" [")[0] for line in saved.splitlines() if line and line[0] not in "#"
        )

    fixed = {
        path: sorted(p.name for p in Path(path).iterdir()) if Path(path).is_dir() else None
        for path in _host.FIXED_PATHS
        if path != "/run/containerd/s"  # other containerds' shims come and go
    }
    processes = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(RUN_DIR) in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    processes.append(entry.name)
            except OSError:
                continue
    return {
        "sysctls": {name: _host.read_sysctl(name) for name in _host.SYSCTLS},
        "iptables": rules("iptables"),
        "ip6tables": rules("ip6tables"),
        "bridge": Path(f"/sys/class/net/{BRIDGE}").exists(),
        "mounts": _host.mounts_under([str(NODE_DIR), str(RUN_DIR), "/run/netns"]),
        "cgroups": [str(p) for p in _host.cgroup_dirs(CGROUP)],
        "dirs": [str(p) for p in (NODE_DIR, RUN_DIR) if p.exists()],
        "fixed": fixed,
        "processes": processes,
    }


_CRASHING = """
import sys, time
from pathlib import Path
from servectl.testing.k8s import images
from servectl.testing.k8s.node import Node
import kubernetes
root = Path(sys.argv[1])
node = Node.start(root, bin_dir=Path(sys.argv[2]))
images.httpd_test_image(root / "httpd.tar", "servectl.test/httpd:1")
node.load_image(root / "httpd.tar")
core = kubernetes.client.CoreV1Api(node.cluster.api_client())
core.create_namespaced_pod("default", {"apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "left"}, "spec": {"containers": [{"name": "main",
    "image": "servectl.test/httpd:1", "imagePullPolicy": "Never"}]}})
while core.read_namespaced_pod("left", "default").status.phase != "Running":
    time.sleep(0.2)
print("RUNNING", flush=True)
time.sleep(600)
"""


def test_a_node_started_after_a_crash_puts_back_what_the_crashed_one_left(
    node_bin_dir: Path, tmp_path: Path
) -> None:
    before = host_state()
    crashing = subprocess.Popen(
        [sys.executable, "-c", _CRASHING, str(tmp_path / "crashed"), str(node_bin_dir)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert crashing.stdout is not None
        line = crashing.stdout.readline()
        assert line.strip() == "RUNNING", f"the first node did not run its pod: {line!r}"
    finally:
        os.killpg(crashing.pid, signal.SIGKILL)  # its process group only: not its node's
        crashing.wait()
    left = host_state()
    assert left["processes"] and left["bridge"] and left["cgroups"], left  # a real mess
    node = Node.start(tmp_path / "second", bin_dir=node_bin_dir)
    try:
        core = kubernetes.client.CoreV1Api(node.cluster.api_client())
        assert [n.metadata.name for n in core.list_node().items] == ["servectl-node"]
    finally:
        assert node.stop() == []
    after = host_state()
    assert after == before, json.dumps({"before": before, "after": after}, indent=1)
    # The crashed node's control plane (etcd, apiserver, ...: in their own sessions, so the
    # SIGKILL of their parent's group left them running) is gone too.
    assert not running_under(tmp_path / "crashed"), running_under(tmp_path / "crashed")


def running_under(root: Path) -> list[str]:
    """Live processes whose command line names ``root``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            named = str(root) in (entry / "cmdline").read_bytes().decode(errors="replace")
            zombie = (entry / "stat").read_text().rsplit(")", 1)[1][:3] == " Z "
        except OSError:
            continue
        if named and not zombie:
            found.append(entry.name)
    return found


def test_pods_keep_serving_while_the_kubelet_restarts(node_bin_dir: Path, tmp_path: Path) -> None:
    with Node.start(tmp_path / "node", bin_dir=node_bin_dir) as node:
        images.httpd_test_image(tmp_path / "httpd.tar", HTTPD)
        node.load_image(tmp_path / "httpd.tar")
        core = kubernetes.client.CoreV1Api(node.cluster.api_client())
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "steady"},
            "spec": {"containers": [{"name": "main", "image": HTTPD, "imagePullPolicy": "Never"}]},
        }
        core.create_namespaced_pod("default", body)
        deadline = time.monotonic() + 60
        while core.read_namespaced_pod("steady", "default").status.phase != "Running":
            assert time.monotonic() < deadline, "the pod did not run"
            time.sleep(0.2)
        address = core.read_namespaced_pod("steady", "default").status.pod_ip
        url = f"http://{address}:{images.HTTPD_PORT}/"
        uid = core.read_namespaced_pod("steady", "default").metadata.uid
        answers: list[bool] = []
        stop = threading.Event()

        def ask() -> None:  # a request every 50 ms until told, at most 1,200
            while not stop.is_set() and len(answers) < 1200:
                try:
                    with urllib.request.urlopen(url, timeout=2) as answer:
                        answers.append(answer.read() == images.HTTPD_INDEX)
                except OSError:
                    answers.append(False)
                time.sleep(0.05)

        asking = threading.Thread(target=ask)
        asking.start()
        try:
            node.restart("kubelet")
            time.sleep(1.0)
        finally:
            stop.set()
            asking.join()
        assert len(answers) >= 10 and all(answers), f"{answers.count(False)} failed"
        status = core.read_namespaced_pod("steady", "default").status
        assert core.read_namespaced_pod("steady", "default").metadata.uid == uid
        assert status.container_statuses[0].restart_count == 0


@pytest.mark.parametrize("missing", ["kubelet"])
def test_a_machine_without_a_kubelet_is_refused_in_one_line(tmp_path: Path, missing: str) -> None:
    from servectl.testing.k8s.node import NodeUnavailable, preflight

    with pytest.raises(NodeUnavailable) as refused:
        preflight(tmp_path)
    assert "\n" not in str(refused.value) and missing in str(refused.value)
