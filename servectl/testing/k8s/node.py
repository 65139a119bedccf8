"""A real node for the test control plane: containerd (Debian's, with runc and the CNI
plugins), a kubelet that runs pods through it on a bridge this module creates, and
kube-proxy, joined to a `ControlPlane` started with ``nodes=0`` on the bridge's address.

One such node runs on a machine at a time (it owns the bridge `BRIDGE`, the directories
`NODE_DIR` and `RUN_DIR`, and the cgroup `CGROUP`); `Node.start` refuses, in one line, on a
machine where it cannot run (`NodeUnavailable`), and first puts back what a crashed node
left (servectl.testing.k8s._host). What it changes on the host is recorded before and put
back by `Node.stop`, also at interpreter exit.

The settings are those DESIGN §9 lists as what made a node run pods on these machines
(cgroup v1 without systemd, no CAP_SYS_RESOURCE, no registry); docs/kubernetes.md says why
each is there.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import textwrap
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from servectl import processes
from servectl.testing.k8s import _host
from servectl.testing.k8s._control_plane import ControlPlane, ControlPlaneError

NODE_NAME = "servectl-node"
BRIDGE = "servectl0"
POD_CIDR = "10.213.0.0/24"
NODE_IP = "10.213.0.1"
"""The bridge's address on this machine: the node's InternalIP, the apiserver's address
(pods reach the ``kubernetes`` Service there), the kubelet's."""
NODE_DIR = Path("/var/lib/servectl-node")
RUN_DIR = Path("/run/servectl-node")
CGROUP = "/servectl-node"
PAUSE_IMAGE = "servectl.test/pause:catatonit"
CNI_BIN_DIRS = (Path("/usr/lib/cni"), Path("/opt/cni/bin"))
_RECORD = RUN_DIR / "host.json"
_SOCKET = RUN_DIR / "containerd.sock"
_MARKER = str(RUN_DIR)  # in the command line of containerd, its shims, kubelet, kube-proxy
_HINT = "apt-get install containerd runc containernetworking-plugins catatonit iptables"


class NodeUnavailable(RuntimeError):
    """This machine cannot run a real node; the message says why in one line."""


def preflight(bin_dir: Path) -> None:
    """Raise `NodeUnavailable` naming the first thing missing for a real node here."""
    if os.geteuid() != 0:
        raise NodeUnavailable("a real node needs root (it runs containerd and a kubelet)")
    cgroups = _host.CGROUP_ROOT
    if not (cgroups / "cpu").is_dir() and not (cgroups / "cgroup.controllers").exists():
        raise NodeUnavailable(f"no cgroup hierarchy mounted at {cgroups}")
    for tool in ("containerd", "runc", "ctr", "catatonit", "iptables-save", "ip"):
        if shutil.which(tool) is None:
            raise NodeUnavailable(f"{tool} not found: {_HINT}")
    if cni_bin_dir() is None:
        raise NodeUnavailable(f"no CNI plugins (bridge, host-local) found: {_HINT}")
    for binary in ("kubelet", "kube-proxy"):
        if not os.access(bin_dir / binary, os.X_OK):
            raise NodeUnavailable(
                f"{binary} missing in {bin_dir}: bash scripts/k8s-testbin builds it"
            )


def cni_bin_dir() -> Path | None:
    for directory in CNI_BIN_DIRS:
        if (directory / "bridge").exists() and (directory / "host-local").exists():
            return directory
    return None


@dataclass(eq=False)
class Node:
    """A started one-node cluster (see the module's docstring): its control plane is
    `plane`. Build it with `start`."""

    root: Path
    plane: ControlPlane | None = None
    kubelet_port: int = 0
    """The kubelet's HTTPS port on `NODE_IP` (its API, /metrics and /metrics/cadvisor)."""
    timings: dict[str, float] = field(default_factory=dict)
    _processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)
    _argv: dict[str, list[str]] = field(default_factory=dict, repr=False)

    @classmethod
    def start(
        cls,
        root: Path,
        *,
        bin_dir: Path,
        crds: Sequence[Path] = (),
        timeout_s: float = 180.0,
    ) -> Node:
        """Put back what a crashed node left, record the host, make the bridge; start a
        control plane on the bridge's address (with ``crds``), containerd with the pause
        image, the kubelet and kube-proxy, each with its configuration and log in
        ``root``; wait until the node is Ready. `NodeUnavailable` (one line) where this
        machine cannot run a node; on any other failure whatever was started is stopped,
        the host put back, and `ControlPlaneError` names the part with its log's tail."""
        preflight(bin_dir)
        node = cls(root.resolve())
        _LIVE.append(node)
        begin = time.monotonic()
        try:
            node._start(bin_dir, crds, begin + timeout_s)
        except BaseException:
            node.stop()
            raise
        node.timings["total"] = time.monotonic() - begin
        return node

    @property
    def cluster(self) -> ControlPlane:
        assert self.plane is not None, "the node is not started"
        return self.plane

    def stop(self) -> list[str]:
        """Stop every process (the pods' containers too), the control plane, and put the
        host back; what could not be put back (empty: all). Idempotent."""
        for name in ("kube-proxy", "kubelet", "containerd"):
            process = self._processes.pop(name, None)
            if process is not None:
                _terminate(process, grace_s=5.0)
        if self.plane is not None:
            self.plane.stop()
        problems = _host.restore(_RECORD)
        if self in _LIVE:
            _LIVE.remove(self)
        return problems

    def __enter__(self) -> Node:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def keep(self, pids: Sequence[int] = ()) -> None:
        """Leave the node running when this process exits (it is stopped at exit
        otherwise); ``pids``: other processes of this machine to end with it. `stop_kept`,
        from any process, or the next `start`, stops it and puts the host back."""
        _host.add_pids(_RECORD, list(pids))
        self.cluster.detach()
        if self in _LIVE:
            _LIVE.remove(self)

    def failed(self) -> str | None:
        """Which of the node's processes has exited, and how; None while all run."""
        for name, process in self._processes.items():
            code = process.poll()
            if code is not None:
                return f"{name} exited with code {code}; see {self.root / f'{name}.log'}"
        return None

    def restart(self, name: str, timeout_s: float = 60.0) -> None:
        """Stop ``name`` (``kubelet``, ``kube-proxy`` or ``containerd``) and start it again
        with the same settings; wait until the node is Ready. The pods keep running: they
        are containerd's shims' children, not the kubelet's."""
        argv = self._argv[name]
        process = self._processes.pop(name)
        _terminate(process, grace_s=5.0)
        self._run(name, argv)
        self._wait(name, self._ready, time.monotonic() + timeout_s)

    def apply(self, docs: Sequence[Mapping[str, Any]]) -> None:
        """Server-side apply of each document (any kind the apiserver serves, CRDs' too),
        as ``kubectl apply --server-side`` would, in order."""
        import kubernetes

        client = self.cluster.api_client()
        try:
            dynamic = kubernetes.dynamic.DynamicClient(client)  # type: ignore[no-untyped-call]
            for doc in docs:
                resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
                namespace = doc["metadata"].get("namespace")
                resource.server_side_apply(
                    body=dict(doc),
                    name=doc["metadata"]["name"],
                    namespace=namespace,
                    field_manager="servectl-test",
                    force_conflicts=True,
                )
        finally:
            client.close()  # type: ignore[no-untyped-call]

    def load_image(self, tarball: Path) -> None:
        """Import a docker-archive ``tarball`` (servectl.testing.k8s.images) into the
        node's containerd, where pods with ``imagePullPolicy: Never`` find it."""
        from servectl.testing.k8s import images

        images.import_image(tarball, str(_SOCKET))

    # --- parts ---

    def _start(self, bin_dir: Path, crds: Sequence[Path], deadline: float) -> None:
        leftovers = _host.restore(_RECORD)  # a node that crashed before this one
        if leftovers:
            raise ControlPlaneError(f"a crashed node left: {'; '.join(leftovers)}")
        _host.record(
            _RECORD,
            bridge=BRIDGE,
            cgroup=CGROUP,
            paths=[NODE_DIR, RUN_DIR],
            marker=_MARKER,
        )
        self.root.mkdir(parents=True, exist_ok=True)
        RUN_DIR.mkdir(parents=True, exist_ok=True)
        for sysctl, value in (
            ("net/ipv4/ip_forward", "1"),
            ("net/bridge/bridge-nf-call-iptables", "1"),
        ):
            _host.write_sysctl(sysctl, value)
        self._bridge()
        _host.make_cgroup(CGROUP)
        began = time.monotonic()
        self.plane = ControlPlane.start(
            self.root / "control-plane",
            bin_dir=bin_dir,
            nodes=0,
            crds=crds,
            timeout_s=max(10.0, deadline - time.monotonic()),
            address=NODE_IP,
        )
        _host.add_pids(_RECORD, list(self.plane.pids().values()))
        self.timings["control plane"] = time.monotonic() - began
        began = time.monotonic()
        config = self._containerd_config()
        self._run("containerd", ["containerd", "--config", str(config), "--address", str(_SOCKET)])
        self._wait("containerd", lambda: _ctr_ok(), deadline)
        self._import_pause()
        self.timings["containerd"] = time.monotonic() - began
        began = time.monotonic()
        self._run("kubelet", self._kubelet_argv(bin_dir))
        self._run("kube-proxy", self._kube_proxy_argv(bin_dir))
        self._wait("kubelet", self._ready, deadline)
        self.timings["kubelet"] = time.monotonic() - began

    def _run(self, name: str, argv: list[str]) -> None:
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        process, _ = processes.start_logged(argv, self.root / f"{name}.log", env=env)
        self._processes[name] = process
        self._argv[name] = argv

    def _wait(self, name: str, ready: object, deadline: float) -> None:
        assert callable(ready)
        while not _quietly(ready):
            for other, process in self._processes.items():
                code = process.poll()
                if code is not None:
                    raise self._error(other, f"exited with code {code}")
            if time.monotonic() > deadline:
                raise self._error(name, "not ready in time")
            time.sleep(0.2)

    def _error(self, name: str, what: str) -> ControlPlaneError:
        log = self.root / f"{name}.log"
        return ControlPlaneError(
            f"{name} {what}; last lines of {log}:\n{processes.log_tail(log, 40).rstrip()}"
        )

    def _bridge(self) -> None:
        """The pods' bridge with this machine's address on it, before the apiserver binds
        there (the CNI bridge plugin finds it and adds the pods' ends)."""
        if not Path(f"/sys/class/net/{BRIDGE}").exists():
            _host.run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        addresses = _host.run(["ip", "-4", "-o", "addr", "show", "dev", BRIDGE])
        if f"{NODE_IP}/" not in addresses:
            _host.run(["ip", "addr", "add", f"{NODE_IP}/24", "dev", BRIDGE])
        _host.run(["ip", "link", "set", BRIDGE, "up"])

    def _containerd_config(self) -> Path:
        cni_dir = self.root / "cni"
        cni_dir.mkdir(parents=True, exist_ok=True)
        conflist = {
            "cniVersion": "0.4.0",
            "name": "servectl",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_CIDR, "gateway": NODE_IP}]],
                        # Services' addresses are not on the bridge: through this machine.
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(RUN_DIR / "state" / "ipam"),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
                {"type": "loopback"},
            ],
        }
        (cni_dir / "10-servectl.conflist").write_text(json.dumps(conflist, indent=1))
        path = RUN_DIR / "containerd.toml"
        path.write_text(
            textwrap.dedent(f"""\
            version = 2
            root = "{NODE_DIR / "containerd"}"
            state = "{RUN_DIR / "state"}"
            [grpc]
              address = "{_SOCKET}"
            [ttrpc]
              address = "{_SOCKET}.ttrpc"
            [plugins."io.containerd.grpc.v1.cri"]
              sandbox_image = "{PAUSE_IMAGE}"
              restrict_oom_score_adj = true
              [plugins."io.containerd.grpc.v1.cri".containerd]
                snapshotter = "overlayfs"
                default_runtime_name = "runc"
                [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
                  runtime_type = "io.containerd.runc.v2"
                  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
                    SystemdCgroup = false
                    Root = "{RUN_DIR / "runc"}"
              [plugins."io.containerd.grpc.v1.cri".cni]
                bin_dir = "{cni_bin_dir()}"
                conf_dir = "{cni_dir}"
            """)
        )
        return path

    def _import_pause(self) -> None:
        """The sandbox image, from Debian's static catatonit (no registry here); imported
        at every start, as containerd 1.6 cannot pin it against the kubelet's image GC."""
        from servectl.testing.k8s import images

        tarball = self.root / "pause.tar"
        images.pause_image(tarball, PAUSE_IMAGE)
        images.import_image(tarball, str(_SOCKET))

    def _kubelet_argv(self, bin_dir: Path) -> list[str]:
        kubeconfig = self.root / "kubelet.kubeconfig"
        self.cluster.write_kubeconfig(kubeconfig, f"system:node:{NODE_NAME}", "system:nodes")
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # cgroup v1 and no systemd on these machines (1.35+ refuses v1 unless told).
            "cgroupDriver": "cgroupfs",
            "failCgroupV1": False,
            "cgroupRoot": CGROUP,
            "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{_SOCKET}",
            "address": NODE_IP,
            "port": processes.free_port(),
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": processes.free_port(),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.cluster.ca_cert)},
            },
            "authorization": {"mode": "Webhook"},
            "enforceNodeAllocatable": [],
            # The disk is shared with everything else on the machine: evict only when it is
            # really short, and never collect the pause image we cannot pull again.
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "resolvConf": "",
            "podLogsDir": str(NODE_DIR / "pod-logs"),
            "rotateCertificates": False,
            "nodeStatusUpdateFrequency": "2s",
            "syncFrequency": "5s",
        }
        self.kubelet_port = int(str(config["port"]))
        path = self.root / "kubelet.yaml"
        path.write_text(yaml.safe_dump(config))
        self._healthz = f"http://127.0.0.1:{config['healthzPort']}/healthz"
        return [
            str(bin_dir / "kubelet"),
            f"--config={path}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={NODE_DIR / 'kubelet'}",
            f"--volume-plugin-dir={NODE_DIR / 'volume-plugins'}",
            f"--cert-dir={RUN_DIR / 'kubelet' / 'pki'}",
            f"--hostname-override={NODE_NAME}",
            f"--node-ip={NODE_IP}",
            # cAdvisor (built into the kubelet) finds containers' names, pods and namespaces
            # through containerd's socket, /run/containerd/containerd.sock unless told:
            # without this /metrics/cadvisor has cgroups only, no pod labels.
            f"--containerd={_SOCKET}",
            "--v=1",
        ]

    def _kube_proxy_argv(self, bin_dir: Path) -> list[str]:
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "mode": "iptables",
            "clientConnection": {"kubeconfig": str(self.cluster.kubeconfig)},
            "hostnameOverride": NODE_NAME,
            "clusterCIDR": POD_CIDR,
            "bindAddress": NODE_IP,
            "healthzBindAddress": f"127.0.0.1:{processes.free_port()}",
            "metricsBindAddress": f"127.0.0.1:{processes.free_port()}",
            # Node ports on the bridge's address only: on 127.0.0.1 kube-proxy would set
            # route_localnet; and leave conntrack's table size as the machine has it.
            "nodePortAddresses": [f"{NODE_IP}/32"],
            "conntrack": {"maxPerCore": 0, "min": 0},
        }
        # Under RUN_DIR, so its command line names it (how a crashed node's is found).
        path = RUN_DIR / "kube-proxy.yaml"
        path.write_text(yaml.safe_dump(config))
        return [str(bin_dir / "kube-proxy"), f"--config={path}", "--v=1"]

    def _ready(self) -> bool:
        status, answer = self.cluster.request("GET", f"/api/v1/nodes/{NODE_NAME}")
        if status != 200:
            return False
        conditions = (answer.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _terminate(process: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the process's group, SIGKILL it after ``grace_s``, reap."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _ctr_ok() -> bool:
    done = subprocess.run(
        ["ctr", "--address", str(_SOCKET), "version"], capture_output=True, timeout=5, check=False
    )
    return done.returncode == 0


def _quietly(check: object) -> bool:
    assert callable(check)
    try:
        return bool(check())
    except OSError:
        return False


def stop_kept() -> list[str] | None:
    """Stop a node some process left running (`Node.keep`, or a crash) and put the host
    back: what could not be put back (empty: all); None when no node was running."""
    if not _RECORD.exists():
        return None
    return _host.restore(_RECORD)


_LIVE: list[Node] = []


def _stop_live() -> None:
    for node in list(_LIVE):
        node.stop()


atexit.register(_stop_live)

__all__ = [
    "BRIDGE",
    "NODE_IP",
    "NODE_NAME",
    "POD_CIDR",
    "Node",
    "NodeUnavailable",
    "preflight",
    "stop_kept",
]
