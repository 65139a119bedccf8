"""A real Kubernetes control plane on loopback, for tests: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, and kwok playing the kubelets of fake nodes.

The binaries: etcd from Debian (``apt-get install etcd-server``); the others built once by
``bash scripts/k8s-testbin`` into a cache directory (`find_binaries` finds it). Every port
is picked at run time, every process runs in its own session with its output in
``root/<name>.log``, and `ControlPlane.stop` (also run at interpreter exit) ends them all.

What kwok does with the pods on its nodes (the Stage documents are `KWOK_STAGES`, written
to ``root/kwok.yaml``):

- a pod scheduled onto a fake node is ``Running`` at once, with a pod IP from its node's
  ``spec.podCIDR`` (10.244.<i>.0/24), its containers started but not ready;
- it turns ``Ready`` `READY_DELAY_ANNOTATION` after that (a Go duration, ``"3s"`` or
  ``"500ms"``; 0.5 s when absent; a value that does not parse means at once). kwok stamps
  that moment into the pod's `READY_AT_ANNOTATION` when it starts the pod, so later changes
  to the pod (labels, annotations) do not push readiness back;
- with `FAIL_ANNOTATION` ``"true"`` it stays ``Running`` and never turns ``Ready`` (a
  replica failing its readiness probe); setting it on a ``Ready`` pod makes the pod unready,
  removing it makes the pod ``Ready`` again (at once if its moment has passed);
- a pod with a deletion timestamp and no finalizers is deleted at once (the grace period is
  not waited for);
- nothing else: containers never exit (a Job's pods never complete), nothing restarts.

Nodes (``kwok-node-0``, ...) are ``Ready``, with 32 CPUs, 256Gi of memory, 110 pods and 8
``nvidia.com/gpu`` each, labelled ``type: kwok``, untainted; kwok renews their leases.

Example::

    plane = ControlPlane.start(tmp, bin_dir=find_binaries(), crds=[Path("deploy/crds/x.yaml")])
    try:
        apps = kubernetes.client.AppsV1Api(plane.api_client())
        ...
    finally:
        plane.stop()

Measured on the 2-core development machine (`ControlPlane.timings`): etcd ready in
0.1-0.8 s, kube-apiserver 2.1-2.5 s after it, then the controller manager, the scheduler and
kwok (started together) 0.3-0.6 s later: ~3.5 s in all; servectl's and the Gateway API's
CRDs take 3-4.5 s more. `stop` takes ~1 s. A pod is Running ~0.1-0.7 s after it is created.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import datetime
import http.client
import ipaddress
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import kubernetes
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

K8S_VERSION = "v1.34.4"
KWOK_VERSION = "v0.8.0"
DEFAULT_NODES = 2
READY_DELAY_ANNOTATION = "kwok.servectl.io/ready-after"
FAIL_ANNOTATION = "kwok.servectl.io/fail"
READY_AT_ANNOTATION = "kwok.servectl.io/ready-at"
"""Stamped by kwok when the pod starts: the moment it turns Ready (RFC 3339)."""
DEFAULT_READY_DELAY = "500ms"
CONTEXT = "servectl-test"
BUILD_HINT = "build them with: bash scripts/k8s-testbin (needs Go; ~6 min the first time)"
ETCD_HINT = "install etcd with the Debian package: apt-get install etcd-server"
NODE_ANNOTATION = "kwok.x-k8s.io/node"
NODE_LABELS = {"type": "kwok"}
NODE_RESOURCES = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"}

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
_GATEWAY_DIR = "gateway-api"
_REPO = Path(__file__).resolve().parents[2]
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
    return all(os.access(directory / name, os.X_OK) for name in _BINARIES) and any(
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


# --- kwok stages --------------------------------------------------------------------------

_NODE_STATUS = """\
{{ $now := Now }}
{{ $lastTransitionTime := or .metadata.creationTimestamp $now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $lastTransitionTime | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
"""

_NODE_INFO = """\
{{ $kwokVersion := printf "kwok-%s" Version }}
nodeInfo:
  architecture: amd64
  bootID: ""
  containerRuntimeVersion: {{ $kwokVersion | Quote }}
  kernelVersion: {{ $kwokVersion | Quote }}
  kubeProxyVersion: {{ $kwokVersion | Quote }}
  kubeletVersion: {{ $kwokVersion | Quote }}
  machineID: ""
  operatingSystem: linux
  osImage: ""
  systemUUID: ""
phase: Running
"""

_POD_RUNNING = """\
{{ $now := Now }}
{{ $annotations := or .metadata.annotations dict }}
{{ $fail := eq (toString (index $annotations "kwok.servectl.io/fail")) "true" }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: PodReadyToStartContainers
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  type: Ready
  reason: ContainersNotReady
  message: {{ if $fail }}"readiness probe failed (kwok.servectl.io/fail)"{{ else }}"not ready yet (kwok.servectl.io/ready-after)"{{ end }}
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  type: ContainersReady
  reason: ContainersNotReady
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  imageID: {{ printf "kwok://%s" .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  started: true
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
{{ with .spec.initContainers }}
initContainerStatuses:
{{ range . }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  restartCount: 0
  state:
    terminated:
      exitCode: 0
      finishedAt: {{ $now | Quote }}
      reason: Completed
      startedAt: {{ $now | Quote }}
{{ end }}
{{ end }}
{{ $hostIPs := NodeIPsWith .spec.nodeName }}
{{ with $hostIPs }}
hostIP: {{ index . 0 | Quote }}
hostIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
{{ $podIPs := PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
{{ with $podIPs }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
"""  # noqa: E501

# Go's time.RFC3339Nano, which kwok's durationFrom parses (then subtracts now).
_READY_AT = """\
{{ $annotations := or .metadata.annotations dict }}
{{ $after := or (index $annotations "kwok.servectl.io/ready-after") "500ms" }}
annotations:
  kwok.servectl.io/ready-at: {{ dateModify $after now | date "2006-01-02T15:04:05.999999999Z07:00" | Quote }}
"""  # noqa: E501


def _pod_readiness(ready: bool, message: str) -> str:
    status = '"True"' if ready else '"False"'
    reason = "" if ready else "\n  reason: ContainersNotReady"
    msg = f"\n  message: {json.dumps(message)}" if message else ""
    flag = "true" if ready else "false"
    return f"""\
{{{{ $now := Now }}}}
{{{{ $started := or .status.startTime $now }}}}
conditions:
- lastTransitionTime: {{{{ $now | Quote }}}}
  status: {status}
  type: Ready{reason}{msg}
- lastTransitionTime: {{{{ $now | Quote }}}}
  status: {status}
  type: ContainersReady{reason}
containerStatuses:
{{{{ range .spec.containers }}}}
- image: {{{{ .image | Quote }}}}
  imageID: {{{{ printf "kwok://%s" .image | Quote }}}}
  name: {{{{ .name | Quote }}}}
  ready: {flag}
  restartCount: 0
  started: true
  state:
    running:
      startedAt: {{{{ $started | Quote }}}}
{{{{ end }}}}
"""


def _jq(key: str, operator: str, *values: str) -> dict[str, Any]:
    expression: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        expression["values"] = list(values)
    return {"jq": expression}


def _annotation(name: str) -> str:
    return f'.metadata.annotations["{name}"]'


_READY = '.status.conditions.[] | select( .type == "Ready" ) | .status'


def _stage(
    name: str,
    kind: str,
    match: list[dict[str, Any]],
    steps: list[dict[str, Any]],
    delay: dict[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceRef": {"apiGroup": "v1", "kind": kind},
        "selector": {"matchExpressions": match},
        "steps": steps,
    }
    if delay is not None:
        spec["delay"] = delay
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": spec,
    }


def _status_patch(template: str) -> dict[str, Any]:
    return {"patch": {"subresource": "status", "root": "status", "template": template}}


_ALIVE = _jq(".metadata.deletionTimestamp", "DoesNotExist")
_RUNNING = _jq(".status.phase", "In", "Running")

KWOK_STAGES: list[dict[str, Any]] = [
    # Nodes: Ready at once, then a status heartbeat every ~10 min (kwok renews the leases,
    # which is what the node lifecycle controller watches).
    _stage(
        "node-initialize",
        "Node",
        [_jq(_READY, "NotIn", "True")],
        [_status_patch(_NODE_STATUS + _NODE_INFO)],
    ),
    _stage(
        "node-heartbeat-with-lease",
        "Node",
        [_jq(".status.phase", "In", "Running"), _jq(_READY, "In", "True")],
        [_status_patch(_NODE_STATUS)],
        delay={"durationMilliseconds": 600_000, "jitterDurationMilliseconds": 610_000},
    ),
    # Pods: Running as soon as kwok sees them on its node, with the ready-at stamp.
    _stage(
        "pod-running",
        "Pod",
        [_ALIVE, _jq(".status.podIP", "DoesNotExist")],
        [
            _status_patch(_POD_RUNNING),
            {"patch": {"root": "metadata", "type": "merge", "template": _READY_AT}},
        ],
    ),
    # Ready at the stamped moment, unless told to fail.
    _stage(
        "pod-ready",
        "Pod",
        [
            _ALIVE,
            _RUNNING,
            _jq(_READY, "NotIn", "True"),
            _jq(_annotation(READY_AT_ANNOTATION), "Exists"),
            _jq(_annotation(FAIL_ANNOTATION), "NotIn", "true"),
        ],
        [_status_patch(_pod_readiness(True, ""))],
        delay={
            "durationMilliseconds": 0,
            "durationFrom": {"jq": {"expression": _annotation(READY_AT_ANNOTATION)}},
        },
    ),
    # A Ready pod told to fail turns unready.
    _stage(
        "pod-fail",
        "Pod",
        [
            _ALIVE,
            _RUNNING,
            _jq(_READY, "In", "True"),
            _jq(_annotation(FAIL_ANNOTATION), "In", "true"),
        ],
        [_status_patch(_pod_readiness(False, "readiness probe failed (kwok.servectl.io/fail)"))],
    ),
    # Deleted pods go at once (once any finalizer is gone).
    _stage(
        "pod-delete",
        "Pod",
        [
            _jq(".metadata.deletionTimestamp", "Exists"),
            _jq(".metadata.finalizers", "DoesNotExist"),
        ],
        [{"delete": True}],
    ),
]


class _LiteralDumper(yaml.SafeDumper):
    """Multi-line strings (the templates) as ``|`` blocks, so ``root/kwok.yaml`` reads well."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_LiteralDumper.add_representer(str, _str_representer)


def kwok_config() -> str:
    """The ``--config`` file kwok runs with: the `KWOK_STAGES` documents."""
    return yaml.dump_all(KWOK_STAGES, Dumper=_LiteralDumper, sort_keys=False)


# --- certificates -------------------------------------------------------------------------


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization is not None:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


@dataclass(frozen=True)
class _Pki:
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    sa_key: Path
    sa_pub: Path


def _write_pki(directory: Path) -> _Pki:
    """A CA, the apiserver's serving cert, an admin client cert (system:masters) and the
    service-account RSA key pair, all PEM files in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=30)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("servectl-test-ca")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(
        subject: x509.Name, usage: x509.ObjectIdentifier, sans: list[x509.GeneralName]
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return builder.sign(ca_key, hashes.SHA256()), key

    dns = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"]
    dns.append("kubernetes.default.svc.cluster.local")
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", "10.0.0.1")]
    serving, serving_key = leaf(
        _name("kube-apiserver"), x509.oid.ExtendedKeyUsageOID.SERVER_AUTH, sans
    )
    admin, admin_key = leaf(
        _name("servectl-test-admin", "system:masters"),
        x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH,
        [],
    )
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pki = _Pki(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        admin_cert=directory / "admin.crt",
        admin_key=directory / "admin.key",
        sa_key=directory / "sa.key",
        sa_pub=directory / "sa.pub",
    )
    pki.ca_cert.write_bytes(_pem_cert(ca))
    pki.serving_cert.write_bytes(_pem_cert(serving))
    pki.admin_cert.write_bytes(_pem_cert(admin))
    for path, key in (
        (pki.ca_key, ca_key),
        (pki.serving_key, serving_key),
        (pki.admin_key, admin_key),
        (pki.sa_key, sa_key),
    ):
        path.write_bytes(_pem_key(key))
        path.chmod(0o600)
    pki.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki


def _write_kubeconfig(path: Path, server: str, pki: _Pki) -> None:
    def b64(file: Path) -> str:
        return base64.b64encode(file.read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CONTEXT,
                "cluster": {"server": server, "certificate-authority-data": b64(pki.ca_cert)},
            }
        ],
        "users": [
            {
                "name": CONTEXT,
                "user": {
                    "client-certificate-data": b64(pki.admin_cert),
                    "client-key-data": b64(pki.admin_key),
                },
            }
        ],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT}}],
        "current-context": CONTEXT,
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


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
        if port in _PICKED_PORTS:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _PICKED_PORTS.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        with path.open(errors="replace") as log:
            return "".join(deque(log, maxlen=lines)).rstrip()
    except OSError as error:
        return f"(no log: {error})"


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
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    def exited(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def error(self, what: str) -> ControlPlaneError:
        return ControlPlaneError(
            f"{self.name} {what}; last lines of {self.log}:\n{_tail(self.log)}"
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
    _pki: _Pki = field(repr=False)
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
    ) -> ControlPlane:
        """Start etcd, the apiserver, then the controller manager, the scheduler and kwok
        (together), create ``nodes`` fake nodes, apply ``crds``; wait for each to be ready.
        ``root`` (created if needed) must not hold an earlier plane's data.

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
                plane = cls._start_once(root, bin_dir, nodes, crds, begin + timeout_s)
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
        cls, root: Path, bin_dir: Path, nodes: int, crds: Sequence[Path], deadline: float
    ) -> ControlPlane:
        root.mkdir(parents=True, exist_ok=True)
        etcd = etcd_binary()
        if etcd is None:
            raise ControlPlaneError(f"etcd not found; {ETCD_HINT}")
        missing = [name for name in _BINARIES if not os.access(bin_dir / name, os.X_OK)]
        if missing:
            raise ControlPlaneError(f"{', '.join(missing)} missing in {bin_dir}; {BUILD_HINT}")
        pki = _write_pki(root / "pki")
        port = {name: _free_port() for name in ("etcd", "peer", "api", "kcm", "sched", "kwok")}
        server = f"https://127.0.0.1:{port['api']}"
        kubeconfig = root / "kubeconfig"
        _write_kubeconfig(kubeconfig, server, pki)
        context = ssl.create_default_context(cafile=str(pki.ca_cert))
        context.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
        plane = cls(root, kubeconfig, server, {}, pki, context, _nodes=nodes)
        plane._define(etcd, bin_dir, port)
        with _LIVE_LOCK:
            _LIVE.append(plane)
        try:
            plane._start_group(["etcd"], deadline)
            plane._start_group(["kube-apiserver"], deadline)
            plane._create_nodes(nodes)
            plane._start_group(["kube-controller-manager", "kube-scheduler", "kwok"], deadline)
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

    def api_client(self) -> kubernetes.client.ApiClient:
        """A fresh client from `kubeconfig` (context ``servectl-test``)."""
        client: kubernetes.client.ApiClient = kubernetes.config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.kubeconfig), context=CONTEXT
        )
        return client

    def request(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        """One authenticated request to the apiserver: (status, decoded JSON or text)."""
        parsed = urllib.parse.urlsplit(self.server)
        connection = http.client.HTTPSConnection(
            parsed.hostname or "127.0.0.1",
            parsed.port,
            context=self._ssl,
            timeout=_HTTP_TIMEOUT_S * 5,
        )
        try:
            data = None
            if body is not None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers = {"Content-Type": content_type, "Accept": "application/json"}
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

    def _define(self, etcd: str, bin_dir: Path, port: dict[str, int]) -> None:
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
        stages.write_text(kwok_config())
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
                    "--bind-address=127.0.0.1",
                    "--advertise-address=127.0.0.1",
                    f"--secure-port={port['api']}",
                    f"--tls-cert-file={pki.serving_cert}",
                    f"--tls-private-key-file={pki.serving_key}",
                    f"--client-ca-file={pki.ca_cert}",
                    f"--service-account-key-file={pki.sa_pub}",
                    f"--service-account-signing-key-file={pki.sa_key}",
                    "--service-account-issuer=https://kubernetes.default.svc",
                    f"--service-cluster-ip-range={_SERVICE_CIDR}",
                    "--authorization-mode=RBAC",
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
                    f"--manage-nodes-with-annotation-selector={NODE_ANNOTATION}=fake",
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
                    "annotations": {NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                    "labels": {
                        **NODE_LABELS,
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        "node-role.kubernetes.io/agent": "",
                    },
                },
                "spec": {"podCIDR": f"10.244.{i}.0/24", "podCIDRs": [f"10.244.{i}.0/24"]},
                "status": {
                    "allocatable": NODE_RESOURCES,
                    "capacity": NODE_RESOURCES,
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
