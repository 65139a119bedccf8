"""The test control plane's processes: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok, each in its own session with its log in ``root/<name>.log``, on
ports picked at run time; the binaries they run; and :class:`ControlPlane`, which starts,
waits for, talks to and stops them. :mod:`servectl.testing.k8s` is the public face.
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import json
import os
import random
import shutil
import signal
import ssl
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import kubernetes
import yaml

from servectl import processes
from servectl.testing.k8s import _kwok, _pki

K8S_VERSION = "v1.34.4"
KWOK_VERSION = "v0.8.0"
DEFAULT_NODES = 2
BUILD_HINT = "build them with: bash scripts/k8s-testbin (needs Go; ~6 min the first time)"
ETCD_HINT = "install etcd with the Debian package: apt-get install etcd-server"

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
# A real node's (servectl.testing.k8s.node); a cache without them is built again.
_NODE_BINARIES = ("kubelet", "kube-proxy")
_GATEWAY_DIR = "gateway-api"
_REPO = Path(__file__).resolve().parents[3]
_POLL_S = 0.05
_HTTP_TIMEOUT_S = 2.0
_STOP_GRACE_S = 10.0
_START_ATTEMPTS = 3
_LOG_TAIL_LINES = 40
_SERVICE_CIDR = "10.0.0.0/16"  # room for the scale bench: ~4 Services per ModelService
_FIELD_MANAGER = "servectl-test"


class ControlPlaneError(RuntimeError):
    """A component exited early or was not ready in time; the message names it and ends
    with the tail of its log."""


_T = TypeVar("_T")


def wait_for(
    check: Callable[[], _T | None], *, timeout_s: float, what: str, interval_s: float = 0.1
) -> _T:
    """Call ``check`` every ``interval_s`` until it returns something truthy, and return
    that. `TimeoutError` after ``timeout_s``, saying ``what`` was awaited and the last value
    returned (or exception raised: an exception counts as "not yet")."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:
        try:
            value = check()
            if value:
                return value
            last = value
        except Exception as error:  # "not yet"; reported on timeout
            last = error
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: not after {timeout_s:g} s (last: {last!r})")
        time.sleep(interval_s)


# --- binaries -----------------------------------------------------------------------------


def _complete(directory: Path) -> bool:
    built = (*_BINARIES, *_NODE_BINARIES)
    return all(os.access(directory / name, os.X_OK) for name in built) and any(
        (directory / _GATEWAY_DIR).glob("*.yaml")
    )


def _cache_dir() -> Path:
    """The directory scripts/k8s-testbin builds into (same environment variables)."""
    k8s = os.environ.get("K8S_VERSION", K8S_VERSION)
    kwok = os.environ.get("KWOK_VERSION", KWOK_VERSION)
    cache = os.environ.get("SERVECTL_K8S_CACHE")
    if not cache:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        cache = str(Path(xdg) / "servectl" / "k8s")
    return Path(cache) / f"{k8s}-kwok-{kwok}"


def find_binaries(*, build: bool = False) -> Path | None:
    """The directory holding kube-apiserver, kube-controller-manager, kube-scheduler, kwok
    and the Gateway API CRDs: ``$SERVECTL_K8S_BIN``, else the cache directory that
    ``scripts/k8s-testbin`` prints. None when they are not all there.

    With ``build=True``, and this repository's ``scripts/k8s-testbin`` present, runs the
    script first when something is missing (needs Go: None without it; ~6 min cold, ~15 s
    warm). Raises `ControlPlaneError` when the script fails.
    """
    explicit = os.environ.get("SERVECTL_K8S_BIN")
    candidate = Path(explicit) if explicit else _cache_dir()
    if _complete(candidate):
        return candidate
    script = _REPO / "scripts" / "k8s-testbin"
    if explicit or not build or not script.is_file() or shutil.which("go") is None:
        return None
    result = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, check=False, cwd=_REPO
    )
    if result.returncode != 0:
        tail = "\n".join(result.stderr.splitlines()[-_LOG_TAIL_LINES:])
        raise ControlPlaneError(f"scripts/k8s-testbin exited {result.returncode}:\n{tail}")
    lines = result.stdout.strip().splitlines()
    built = Path(lines[-1]) if lines else candidate
    return built if _complete(built) else None


def etcd_binary() -> str | None:
    """Debian's etcd (package etcd-server) or any ``etcd`` on PATH; None when absent."""
    found = shutil.which("etcd")
    if found is not None:
        return found
    return "/usr/bin/etcd" if os.access("/usr/bin/etcd", os.X_OK) else None


def gateway_api_crds(bin_dir: Path) -> list[Path]:
    """The Gateway API standard-channel CRD files scripts/k8s-testbin put beside the
    binaries (``bin_dir/gateway-api/*.yaml``), sorted."""
    files = sorted((bin_dir / _GATEWAY_DIR).glob("*.yaml"))
    if not files:
        raise ControlPlaneError(f"no Gateway API CRDs in {bin_dir / _GATEWAY_DIR}; {BUILD_HINT}")
    return files


# --- processes ----------------------------------------------------------------------------


_PICKED_PORTS: set[int] = set()


def _ephemeral_ports() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def _free_port() -> int:
    """A loopback port free now, below the kernel's ephemeral range: a port the kernel hands
    out (bind to 0) can be taken as the source port of any outgoing connection (a busy
    control plane makes many) before our process binds it. Not one picked before here."""
    low, high = _ephemeral_ports()
    span = (10_000, low - 1) if low > 11_000 else (high + 1, 65_535)
    for _ in range(200):
        port = random.randint(*span)
        if port in _PICKED_PORTS or not processes.port_free(port):
            continue
        _PICKED_PORTS.add(port)
        return port
    return processes.free_port()


@dataclass
class _Component:
    name: str
    argv: list[str]
    log: Path
    ready: Callable[[], bool]
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, **self.env}
        env.pop("KUBECONFIG", None)
        self.process, _ = processes.start_logged(self.argv, self.log, env=env)

    def exited(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def error(self, what: str) -> ControlPlaneError:
        return ControlPlaneError(
            f"{self.name} {what}; last lines of {self.log}:\n"
            f"{processes.log_tail(self.log, _LOG_TAIL_LINES).rstrip()}"
        )

    def signal_group(self, signum: int) -> None:
        if self.process is None or self.process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signum)


def _exited(pid: int) -> bool:
    """Whether the child ``pid`` has exited, without reaping it (a zombie keeps its pid,
    which is its process group's id, from being reused until it is reaped)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _stop_all(components: Iterable[_Component], grace_s: float = _STOP_GRACE_S) -> None:
    """SIGTERM every process group, wait up to ``grace_s``, SIGKILL the groups, reap."""
    running = [c for c in components if c.process is not None]
    for component in running:
        component.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    pending = [c.process.pid for c in running if c.process and c.process.returncode is None]
    while pending and time.monotonic() < deadline:
        pending = [pid for pid in pending if not _exited(pid)]
        if pending:
            time.sleep(_POLL_S / 2)
    for component in running:
        assert component.process is not None
        if component.process.returncode is None:
            # Not reaped yet, so the group id is still this group's: kill whatever is left
            # in it (the leader, if it ignored SIGTERM; any child it left).
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(component.process.pid, signal.SIGKILL)
        component.process.wait()
        component.process = None


_LIVE: list[ControlPlane] = []
_LIVE_LOCK = threading.Lock()


def _stop_live() -> None:
    with _LIVE_LOCK:
        planes = list(_LIVE)
    for plane in planes:
        plane.stop()


atexit.register(_stop_live)


# --- the control plane --------------------------------------------------------------------


@dataclass(eq=False)
class ControlPlane:
    """A started control plane (see the module's docstring). Build it with `start`."""

    root: Path
    kubeconfig: Path
    server: str
    timings: dict[str, float]
    _pki: _pki.Pki = field(repr=False)
    _ssl: ssl.SSLContext = field(repr=False)
    _components: dict[str, _Component] = field(default_factory=dict, repr=False)
    _nodes: int = field(default=DEFAULT_NODES, repr=False)

    # --- lifecycle ---

    @classmethod
    def start(
        cls,
        root: Path,
        *,
        bin_dir: Path,
        nodes: int = DEFAULT_NODES,
        crds: Sequence[Path] = (),
        timeout_s: float = 90.0,
        address: str = "127.0.0.1",
    ) -> ControlPlane:
        """Start etcd, the apiserver, then the controller manager, the scheduler and kwok
        (together), create ``nodes`` fake nodes, apply ``crds``; wait for each to be ready.
        ``root`` (created if needed) must not hold an earlier plane's data.

        With ``nodes=0`` there is no kwok: a real node joins (servectl.testing.k8s.node).
        The apiserver listens on ``address``: a real node's pods reach it there (its
        ``kubernetes`` Service's endpoint), so it must be an address of this machine they
        can route to, such as their bridge's; etcd and the rest stay on 127.0.0.1.

        Raises `ControlPlaneError` (naming the component, with its log's tail) when one
        exits early or is not ready within ``timeout_s`` in all; whatever was started is
        stopped first.
        """
        begin = time.monotonic()
        root = root.resolve()
        if (root / "etcd").exists():
            raise ControlPlaneError(f"{root} already holds a control plane's data: use a new root")
        for attempt in range(1, _START_ATTEMPTS + 1):
            try:
                plane = cls._start_once(root, bin_dir, nodes, crds, begin + timeout_s, address)
            except ControlPlaneError as error:
                # A port free when picked and taken by another process before ours bound it.
                if "address already in use" not in str(error) or attempt == _START_ATTEMPTS:
                    raise
                shutil.rmtree(root / "etcd", ignore_errors=True)
                continue
            plane.timings["total"] = time.monotonic() - begin
            return plane
        raise AssertionError("unreachable")

    @classmethod
    def _start_once(
        cls,
        root: Path,
        bin_dir: Path,
        nodes: int,
        crds: Sequence[Path],
        deadline: float,
        address: str,
    ) -> ControlPlane:
        root.mkdir(parents=True, exist_ok=True)
        etcd = etcd_binary()
        if etcd is None:
            raise ControlPlaneError(f"etcd not found; {ETCD_HINT}")
        needed = [name for name in _BINARIES if nodes or name != "kwok"]
        missing = [name for name in needed if not os.access(bin_dir / name, os.X_OK)]
        if missing:
            raise ControlPlaneError(f"{', '.join(missing)} missing in {bin_dir}; {BUILD_HINT}")
        extra = () if address == "127.0.0.1" else (address,)
        pki = _pki.write_pki(root / "pki", extra_ips=extra)
        port = {name: _free_port() for name in ("etcd", "peer", "api", "kcm", "sched", "kwok")}
        server = f"https://{address}:{port['api']}"
        kubeconfig = root / "kubeconfig"
        _pki.write_kubeconfig(kubeconfig, server, pki)
        context = ssl.create_default_context(cafile=str(pki.ca_cert))
        context.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
        plane = cls(root, kubeconfig, server, {}, pki, context, _nodes=nodes)
        plane._define(etcd, bin_dir, port, address)
        with _LIVE_LOCK:
            _LIVE.append(plane)
        try:
            plane._start_group(["etcd"], deadline)
            plane._start_group(["kube-apiserver"], deadline)
            plane._create_nodes(nodes)
            rest = ["kube-controller-manager", "kube-scheduler"] + (["kwok"] if nodes else [])
            plane._start_group(rest, deadline)
            if crds:
                crds_start = time.monotonic()
                plane.apply_crds(crds, timeout_s=max(1.0, deadline - time.monotonic()))
                plane.timings["crds"] = time.monotonic() - crds_start
        except BaseException:
            plane.stop()
            raise
        return plane

    def stop(self) -> None:
        """SIGTERM every component, SIGKILL after a grace; idempotent.

        In three waves: the apiserver's clients, the apiserver, etcd (an apiserver whose
        etcd is gone does not finish its graceful shutdown: it would wait for the SIGKILL).
        """
        waves = (
            ("kwok", "kube-scheduler", "kube-controller-manager"),
            ("kube-apiserver",),
            ("etcd",),
        )
        for wave in waves:
            _stop_all([self._components[name] for name in wave if name in self._components])
        with _LIVE_LOCK:
            if self in _LIVE:
                _LIVE.remove(self)

    def detach(self) -> None:
        """Leave the control plane running when this process exits (`stop` at exit
        otherwise); whoever keeps it stops it by its processes' ids (`pids`)."""
        with _LIVE_LOCK:
            if self in _LIVE:
                _LIVE.remove(self)

    def stop_component(self, name: str) -> None:
        """Stop one component (SIGTERM, then SIGKILL after a grace), e.g. to restart it."""
        _stop_all([self._component(name)])

    def start_component(self, name: str, timeout_s: float = 60.0) -> None:
        """Start a component `stop_component` stopped (same flags, same ports); wait until
        it is ready. Its log is appended to."""
        component = self._component(name)
        if component.exited() is None and component.process is not None:
            raise ControlPlaneError(f"{name} is already running")
        component.process = None
        self._start_group([name], time.monotonic() + timeout_s)

    def pids(self) -> dict[str, int]:
        """The process id of each running component (each leads its own process group)."""
        return {
            name: c.process.pid
            for name, c in self._components.items()
            if c.process is not None and c.process.returncode is None
        }

    def __enter__(self) -> ControlPlane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- clients ---

    def write_kubeconfig(self, path: Path, user: str, group: str) -> tuple[Path, Path]:
        """A kubeconfig for this apiserver as ``user`` in ``group``, with a client
        certificate from the plane's CA (a kubelet: ``system:node:<name>``, ``system:nodes``);
        the certificate's and key's files (in ``path``'s directory's ``pki/``)."""
        client = _pki.issue_client(self._pki, path.parent / "pki", user, group)
        _pki.write_kubeconfig(path, self.server, self._pki, client)
        return client

    @property
    def ca_cert(self) -> Path:
        """The CA that signed the apiserver's certificate and every client's."""
        return self._pki.ca_cert

    def api_client(self) -> kubernetes.client.ApiClient:
        """A fresh client from `kubeconfig` (context ``servectl-test``)."""
        client: kubernetes.client.ApiClient = kubernetes.config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.kubeconfig), context=_pki.CONTEXT
        )
        return client

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        token: str | None = None,
    ) -> tuple[int, Any]:
        """One authenticated request to the apiserver: (status, decoded JSON or text). As
        the admin (client certificate), or as the holder of ``token`` (a bearer token: a
        ServiceAccount's, say), with no client certificate."""
        parsed = urllib.parse.urlsplit(self.server)
        context = self._ssl
        if token is not None:
            context = ssl.create_default_context(cafile=str(self._pki.ca_cert))
        connection = http.client.HTTPSConnection(
            parsed.hostname or "127.0.0.1",
            parsed.port,
            context=context,
            timeout=_HTTP_TIMEOUT_S * 5,
        )
        try:
            data = None
            if body is not None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers = {"Content-Type": content_type, "Accept": "application/json"}
            if token is not None:
                headers["Authorization"] = f"Bearer {token}"
            connection.request(method, path, body=data, headers=headers)
            response = connection.getresponse()
            raw = response.read().decode(errors="replace")
        finally:
            connection.close()
        try:
            return response.status, json.loads(raw)
        except json.JSONDecodeError:
            return response.status, raw

    def apply_crds(self, paths: Sequence[Path], timeout_s: float = 30.0) -> None:
        """Create or replace (server-side apply, forced) every CRD in ``paths`` (multi-doc
        YAML is fine) and wait until each is Established."""
        names: list[str] = []
        for path in paths:
            for document in yaml.safe_load_all(path.read_text()):
                if not document:
                    continue
                kind = document.get("kind")
                if kind != "CustomResourceDefinition":
                    raise ControlPlaneError(f"{path}: {kind} is not a CustomResourceDefinition")
                name = document["metadata"]["name"]
                query = urllib.parse.urlencode({"fieldManager": _FIELD_MANAGER, "force": "true"})
                status, answer = self.request(
                    "PATCH",
                    f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}?{query}",
                    document,
                    content_type="application/apply-patch+yaml",
                )
                if status not in (200, 201):
                    raise ControlPlaneError(f"applying CRD {name} from {path}: {status} {answer}")
                names.append(name)
        deadline = time.monotonic() + timeout_s
        for name in names:
            url = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
            while not _condition(self.request("GET", url)[1], "Established"):
                if time.monotonic() > deadline:
                    raise ControlPlaneError(f"CRD {name} not Established after {timeout_s} s")
                time.sleep(_POLL_S)

    # --- internals ---

    def _component(self, name: str) -> _Component:
        try:
            return self._components[name]
        except KeyError:
            raise ValueError(f"no component {name!r}; one of {', '.join(COMPONENTS)}") from None

    def _define(self, etcd: str, bin_dir: Path, port: dict[str, int], address: str) -> None:
        pki, root, kubeconfig = self._pki, self.root, str(self.kubeconfig)
        client = f"http://127.0.0.1:{port['etcd']}"
        peer = f"http://127.0.0.1:{port['peer']}"
        # KCM and the scheduler serve their health endpoints with the apiserver's cert
        # (its SANs cover 127.0.0.1), so the checks verify against our CA.
        serving = [
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
        ]
        stages = root / "kwok.yaml"
        stages.write_text(_kwok.kwok_config())
        specs: list[tuple[str, list[str], Callable[[], bool], dict[str, str]]] = [
            (
                "etcd",
                [
                    etcd,
                    "--name=servectl-test",
                    f"--data-dir={root / 'etcd'}",
                    f"--listen-client-urls={client}",
                    f"--advertise-client-urls={client}",
                    f"--listen-peer-urls={peer}",
                    f"--initial-advertise-peer-urls={peer}",
                    f"--initial-cluster=servectl-test={peer}",
                    "--initial-cluster-state=new",
                    "--logger=zap",
                    "--log-level=warn",
                ],
                lambda: _http_ok(f"{client}/health", None),
                {},
            ),
            (
                "kube-apiserver",
                [
                    str(bin_dir / "kube-apiserver"),
                    f"--etcd-servers={client}",
                    f"--bind-address={address}",
                    f"--advertise-address={address}",
                    f"--secure-port={port['api']}",
                    f"--tls-cert-file={pki.serving_cert}",
                    f"--tls-private-key-file={pki.serving_key}",
                    f"--client-ca-file={pki.ca_cert}",
                    f"--service-account-key-file={pki.sa_pub}",
                    f"--service-account-signing-key-file={pki.sa_key}",
                    "--service-account-issuer=https://kubernetes.default.svc",
                    f"--service-cluster-ip-range={_SERVICE_CIDR}",
                    # Node: a real node's kubelet (system:node:<name>) reads and writes what
                    # its pods need and no more, as on any cluster; NodeRestriction too.
                    "--authorization-mode=Node,RBAC",
                    "--enable-admission-plugins=NodeRestriction",
                    # For logs and exec through the apiserver on a real node.
                    f"--kubelet-client-certificate={pki.admin_cert}",
                    f"--kubelet-client-key={pki.admin_key}",
                    # By its address, not its name: a name is looked up in the machine's DNS,
                    # which is not on the network the tests may use.
                    "--kubelet-preferred-address-types=InternalIP",
                    # With WatchList on (1.34's default), a watch from resourceVersion ""
                    # or "0" with bookmarks is served as a watch-list stream, which needs
                    # etcd's RequestWatchProgress (not in Debian's 3.4.23): every such
                    # watch ends at once with an error. kwok watches that way, and saw
                    # pods only at its re-lists, seconds apart.
                    "--feature-gates=WatchList=false",
                    f"--cert-dir={root / 'kube-apiserver'}",
                ],
                lambda: _http_ok(f"{self.server}/readyz", self._ssl),
                {},
            ),
            (
                "kube-controller-manager",
                [
                    str(bin_dir / "kube-controller-manager"),
                    f"--kubeconfig={kubeconfig}",
                    "--leader-elect=false",
                    # No client-side rate limits (as kwokctl runs them): at 20 QPS the
                    # ReplicaSet controller needs 10 s to create 200 pods.
                    "--kube-api-qps=5000",
                    "--kube-api-burst=10000",
                    "--controllers=*",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={port['kcm']}",
                    *serving,
                    f"--service-account-private-key-file={pki.sa_key}",
                    # Not /usr/libexec/kubernetes, which it would create on the host.
                    f"--flex-volume-plugin-dir={root / 'flexvolume'}",
                    f"--root-ca-file={pki.ca_cert}",
                    f"--cluster-signing-cert-file={pki.ca_cert}",
                    f"--cluster-signing-key-file={pki.ca_key}",
                    "--use-service-account-credentials=false",
                    f"--service-cluster-ip-range={_SERVICE_CIDR}",
                ],
                # Healthy, and the service-account controller ran (so informers synced).
                lambda: (
                    _http_ok(f"https://127.0.0.1:{port['kcm']}/healthz", self._ssl)
                    and self.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")[0]
                    == 200
                ),
                {},
            ),
            (
                "kube-scheduler",
                [
                    str(bin_dir / "kube-scheduler"),
                    f"--kubeconfig={kubeconfig}",
                    "--leader-elect=false",
                    # No client-side rate limits (as kwokctl runs them): at 20 QPS the
                    # ReplicaSet controller needs 10 s to create 200 pods.
                    "--kube-api-qps=5000",
                    "--kube-api-burst=10000",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={port['sched']}",
                    *serving,
                ],
                lambda: _http_ok(f"https://127.0.0.1:{port['sched']}/readyz", self._ssl),
                {},
            ),
            (
                "kwok",
                [
                    str(bin_dir / "kwok"),
                    f"--kubeconfig={kubeconfig}",
                    f"--config={stages}",
                    f"--manage-nodes-with-annotation-selector={_kwok.NODE_ANNOTATION}=fake",
                    f"--server-address=127.0.0.1:{port['kwok']}",
                    "--cidr=10.244.0.0/16",
                    "--node-ip=10.200.0.1",
                ],
                lambda: (
                    _http_ok(f"http://127.0.0.1:{port['kwok']}/healthz", None)
                    and self._nodes_ready()
                ),
                # Not ~/.kwok/kwok.yaml, which kwok would load before --config.
                {"KWOK_WORKDIR": str(root / "kwok")},
            ),
        ]
        for name, argv, ready, env in specs:
            if name == "kwok" and not self._nodes:
                continue
            self._components[name] = _Component(name, argv, root / f"{name}.log", ready, env)

    def _start_group(self, names: list[str], deadline: float) -> None:
        """Start ``names`` together and poll each until ready, recording its time."""
        started: dict[str, float] = {}
        for name in names:
            self._components[name].start()
            started[name] = time.monotonic()
        waiting = list(names)
        while waiting:
            for name in list(waiting):
                component = self._components[name]
                code = component.exited()
                if code is not None:
                    raise component.error(f"exited with code {code} before it was ready")
                if _quietly(component.ready):
                    self.timings[name] = time.monotonic() - started[name]
                    waiting.remove(name)
            for other in self._components.values():
                code = other.exited()
                if other.name not in waiting and code is not None:
                    raise other.error(f"exited with code {code}")
            if not waiting:
                break
            if time.monotonic() > deadline:
                raise self._components[waiting[0]].error(
                    f"not ready after {deadline - min(started.values()):.0f} s"
                )
            time.sleep(_POLL_S)

    def _create_nodes(self, count: int) -> None:
        for i in range(count):
            name = f"kwok-node-{i}"
            body = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "annotations": {
                        _kwok.NODE_ANNOTATION: "fake",
                        "node.alpha.kubernetes.io/ttl": "0",
                    },
                    "labels": {
                        **_kwok.NODE_LABELS,
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        "node-role.kubernetes.io/agent": "",
                    },
                },
                "spec": {"podCIDR": f"10.244.{i}.0/24", "podCIDRs": [f"10.244.{i}.0/24"]},
                "status": {
                    "allocatable": _kwok.NODE_RESOURCES,
                    "capacity": _kwok.NODE_RESOURCES,
                    "addresses": [
                        {"type": "InternalIP", "address": f"10.200.0.{i + 1}"},
                        {"type": "Hostname", "address": name},
                    ],
                },
            }
            status, answer = self.request("POST", "/api/v1/nodes", body)
            if status != 201:
                raise ControlPlaneError(f"creating node {name}: {status} {answer}")

    def _nodes_ready(self) -> bool:
        selector = urllib.parse.urlencode({"labelSelector": "type=kwok"})
        status, answer = self.request("GET", f"/api/v1/nodes?{selector}")
        if status != 200:
            return False
        items = answer.get("items", [])
        return len(items) >= self._nodes and all(_condition(n, "Ready") for n in items)


def _condition(obj: Any, kind: str) -> bool:
    if not isinstance(obj, dict):
        return False
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def _quietly(check: Callable[[], bool]) -> bool:
    try:
        return check()
    except (OSError, http.client.HTTPException):
        return False


def _http_ok(url: str, context: ssl.SSLContext | None) -> bool:
    parsed = urllib.parse.urlsplit(url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port
    connection: http.client.HTTPConnection
    if parsed.scheme == "https":
        connection = http.client.HTTPSConnection(
            host, port, context=context, timeout=_HTTP_TIMEOUT_S
        )
    else:
        connection = http.client.HTTPConnection(host, port, timeout=_HTTP_TIMEOUT_S)
    try:
        connection.request("GET", parsed.path or "/")
        response = connection.getresponse()
        response.read()
        return response.status == 200
    finally:
        connection.close()
