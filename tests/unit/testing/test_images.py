"""servectl.testing.k8s.images: the docker-archive writer without a container engine.

The archive is read back with tarfile: manifest, config and layers agree with each other
and with their digests, the same inputs give the same bytes, layers hold what they were
given (modes, owners, links, parents), and bad inputs fail with one line. With root,
containerd, ctr and runc on the machine, one more test imports the pause and httpd images
into a containerd of its own (its own socket and directories under /tmp, never the
default ones) and serves a request from the httpd image on 127.0.0.1; otherwise it skips.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import tarfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servectl.testing.k8s import images
from servectl.testing.k8s.images import Config, Dir, File, Symlink, Tree


def _read(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        files = {}
        for member in tar.getmembers():
            content = tar.extractfile(member)
            assert content is not None, member.name
            files[member.name] = content.read()
    return files


def _manifest(archive: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, bytes]]:
    files = _read(archive)
    [manifest] = json.loads(files["manifest.json"])
    return manifest, json.loads(files[manifest["Config"]]), files


def _layer(data: bytes) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return tar.getmembers()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _rootfs(root: Path) -> Path:
    """A small rootfs with a hard link, a symlink, a setuid file and pinned mtimes."""
    (root / "bin").mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "bin" / "tool").write_bytes(b"#!/bin/sh\necho tool\n")
    (root / "bin" / "tool").chmod(0o4755)
    os.link(root / "bin" / "tool", root / "bin" / "tool-again")
    (root / "bin" / "sh").symlink_to("tool")
    (root / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    for path in [root, *root.rglob("*")]:
        os.utime(path, (1_700_000_000, 1_700_000_000), follow_symlinks=False)
    return root


CONFIG = Config(
    entrypoint=["/bin/tool", "serve"],
    cmd=["--port", "8080"],
    env={"PATH": "/bin", "HOME": "/tmp"},
    user="65532:65532",
    working_dir="/srv",
    exposed_ports=["8080/tcp", "8081"],
)


def _write(tmp: Path, name: str, rootfs: Path) -> images.Image:
    layers: list[images.Layer] = [
        rootfs,
        {
            "srv/app.py": b"print('app')\n",
            "srv/run": File(b"#!/bin/sh\n", mode=0o755, uid=65532, gid=65532),
            "usr/bin/app": Symlink("/srv/run"),
            "data": Dir(mode=0o1777),
        },
    ]
    return images.write_archive(tmp / name, ["app:1.0", "registry.test/app:1.0"], layers, CONFIG)


def test_manifest_config_and_layers_agree_with_their_digests(tmp_path: Path) -> None:
    image = _write(tmp_path, "app.tar", _rootfs(tmp_path / "rootfs"))
    manifest, config, files = _manifest(image.path)
    assert set(files) == {"manifest.json", manifest["Config"], *manifest["Layers"]}
    assert manifest["RepoTags"] == ["app:1.0", "registry.test/app:1.0"]
    # The config is named by its digest, which is the image id.
    assert manifest["Config"] == f"{_sha256(files[manifest['Config']])}.json"
    assert image.image_id == f"sha256:{manifest['Config'].removesuffix('.json')}"
    # Each layer is named by its digest, and those are the config's diff_ids, in order.
    digests = [f"sha256:{_sha256(files[name])}" for name in manifest["Layers"]]
    assert [f"sha256:{name.removesuffix('.tar')}" for name in manifest["Layers"]] == digests
    assert config["rootfs"] == {"type": "layers", "diff_ids": digests}
    assert list(image.diff_ids) == digests and len(digests) == 2
    assert image.size == image.path.stat().st_size
    assert (config["architecture"], config["os"]) == (images.host_architecture(), "linux")
    assert config["config"] == {
        "Entrypoint": ["/bin/tool", "serve"],
        "Cmd": ["--port", "8080"],
        "Env": ["PATH=/bin", "HOME=/tmp"],
        "User": "65532:65532",
        "WorkingDir": "/srv",
        "ExposedPorts": {"8080/tcp": {}, "8081/tcp": {}},
    }
    # Readable by tar(1) too: a plain uncompressed archive ending on a whole record.
    assert image.size % tarfile.RECORDSIZE == 0


def test_the_same_inputs_give_the_same_bytes_and_another_input_another_id(
    tmp_path: Path,
) -> None:
    rootfs = _rootfs(tmp_path / "rootfs")
    first = _write(tmp_path, "a.tar", rootfs)
    second = _write(tmp_path, "b.tar", rootfs)
    assert first.path.read_bytes() == second.path.read_bytes()
    assert first.image_id == second.image_id
    (rootfs / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/bash\n")
    os.utime(rootfs / "etc" / "passwd", (1_700_000_000, 1_700_000_000))
    third = _write(tmp_path, "c.tar", rootfs)
    assert third.diff_ids[0] != first.diff_ids[0] and third.diff_ids[1] == first.diff_ids[1]
    assert third.image_id != first.image_id
    # The config alone changes the id, not the layers.
    other = images.write_archive(tmp_path / "d.tar", "app:1.0", [rootfs], Config(user="1"))
    assert other.diff_ids[0] == third.diff_ids[0] and other.image_id != third.image_id


def test_a_tree_layer_keeps_modes_owners_links_and_mtimes(tmp_path: Path) -> None:
    rootfs = _rootfs(tmp_path / "rootfs")
    image = images.write_archive(tmp_path / "a.tar", "app:1", [rootfs], CONFIG)
    _, _, files = _manifest(image.path)
    members = {m.name: m for m in _layer(files[f"{image.diff_ids[0][7:]}.tar"])}
    assert list(members) == sorted(members), "entries are sorted"
    assert set(members) == {"bin", "bin/sh", "bin/tool", "bin/tool-again", "etc", "etc/passwd"}
    tool, again, sh = members["bin/tool"], members["bin/tool-again"], members["bin/sh"]
    assert tool.isreg() and tool.mode == 0o4755 and tool.size == len(b"#!/bin/sh\necho tool\n")
    assert again.islnk() and again.linkname == "bin/tool" and again.size == 0
    assert sh.issym() and sh.linkname == "tool"
    assert all(m.mtime == 1_700_000_000 for m in members.values())
    assert all((m.uid, m.gid) == (os.getuid(), os.getgid()) for m in members.values())
    assert all(m.uname == "" and m.gname == "" for m in members.values())
    # Told otherwise, every entry gets that owner and mtime.
    forced = images.write_archive(
        tmp_path / "b.tar", "app:1", [Tree(rootfs, owner=(7, 8), mtime=5)], CONFIG
    )
    _, _, files = _manifest(forced.path)
    layer = _layer(files[f"{forced.diff_ids[0][7:]}.tar"])
    assert {(m.uid, m.gid, m.mtime) for m in layer} == {(7, 8, 5)}


def test_a_map_layer_has_fixed_mtimes_root_owners_and_its_parents(tmp_path: Path) -> None:
    host_file = tmp_path / "tool"
    host_file.write_bytes(b"binary")
    host_file.chmod(0o750)
    tree = tmp_path / "venv"
    (tree / "bin").mkdir(parents=True)
    (tree / "bin" / "python").write_bytes(b"py")
    layer: dict[str, images.Entry] = {
        "/usr/local/bin/tool": host_file,
        "opt/venv": tree,
        "etc/motd": b"hello\n",
        "run/x": File(b"x", mode=0o600, uid=3, gid=4),
        "bin/link": Symlink("/usr/local/bin/tool"),
    }
    image = images.write_archive(tmp_path / "a.tar", "app:1", [layer], Config())
    _, config, files = _manifest(image.path)
    members = {m.name: m for m in _layer(files[f"{image.diff_ids[0][7:]}.tar"])}
    assert list(members) == [
        "bin", "bin/link", "etc", "etc/motd", "opt", "opt/venv", "opt/venv/bin",
        "opt/venv/bin/python", "run", "run/x", "usr", "usr/local", "usr/local/bin",
        "usr/local/bin/tool",
    ]  # fmt: skip
    for name in ("bin", "etc", "opt", "run", "usr", "usr/local", "usr/local/bin"):
        assert members[name].isdir() and members[name].mode == 0o755
    assert members["usr/local/bin/tool"].mode == 0o750, "a host file keeps its mode"
    assert members["etc/motd"].mode == 0o644
    assert (members["run/x"].mode, members["run/x"].uid, members["run/x"].gid) == (0o600, 3, 4)
    assert members["bin/link"].linkname == "/usr/local/bin/tool"
    mapped = {n for n in members if not n.startswith("opt/venv")}
    assert {members[n].mtime for n in mapped} == {images.FIXED_MTIME}
    assert {(members[n].uid, members[n].gid) for n in mapped - {"run/x"}} == {(0, 0)}
    # No command given: null, as docker writes it.
    assert config["config"]["Entrypoint"] is None and config["config"]["Cmd"] is None


@pytest.mark.parametrize(
    ("refs", "layers", "message"),
    [
        ("app", [{"a": b""}], "give name:tag"),
        ("App:1", [{"a": b""}], "lower case"),
        ("app@sha256:abc", [{"a": b""}], "no digest"),
        ("app:1", [], "at least one"),
        ("app:1", [{"a/../b": b""}], "without '..'"),
        ("app:1", [{"a": b"", "/a": b""}], "given twice"),
        ("app:1", [{"a": b"", "a/b": b""}], "not a directory"),
    ],
)
def test_bad_inputs_fail_with_one_line(
    tmp_path: Path, refs: str, layers: list[images.Layer], message: str
) -> None:
    with pytest.raises(images.ImageError, match=message) as caught:
        images.write_archive(tmp_path / "x.tar", refs, layers, Config())
    assert "\n" not in str(caught.value)
    assert not list(tmp_path.iterdir()), "nothing is left behind"


def test_a_socket_in_a_tree_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "r"
    root.mkdir()
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(root / "sock"))
        with pytest.raises(images.ImageError, match="cannot go in a layer"):
            images.write_archive(tmp_path / "x.tar", "app:1", [root], Config())


def test_pause_and_httpd_images(tmp_path: Path) -> None:
    catatonit, busybox = tmp_path / "catatonit", tmp_path / "busybox"
    catatonit.write_bytes(b"catatonit")
    busybox.write_bytes(b"busybox")
    pause = images.pause_image(tmp_path / "pause.tar", "registry.test/pause:3.10", catatonit)
    manifest, config, files = _manifest(pause.path)
    assert manifest["RepoTags"] == ["registry.test/pause:3.10"]
    assert config["config"]["Entrypoint"] == ["/pause", "-P"]
    [member] = _layer(files[manifest["Layers"][0]])
    assert (member.name, member.mode, member.size) == ("pause", 0o755, len(b"catatonit"))

    httpd = images.httpd_test_image(tmp_path / "httpd.tar", "httpd:1", busybox, catatonit)
    manifest, config, files = _manifest(httpd.path)
    run = config["config"]["Entrypoint"] + config["config"]["Cmd"]
    assert run == [
        "/sbin/catatonit", "--", "/bin/busybox", "httpd", "-f", "-v", "-p", "8080", "-h", "/www",
    ]  # fmt: skip
    assert config["config"]["ExposedPorts"] == {"8080/tcp": {}}
    with tarfile.open(fileobj=io.BytesIO(files[manifest["Layers"][0]])) as tar:
        assert tar.getmember("bin/busybox").mode == 0o755
        assert tar.getmember("sbin/catatonit").mode == 0o755
        assert tar.getmember("tmp").mode == 0o1777
        healthz = tar.extractfile("www/healthz")
        assert healthz is not None and healthz.read() == images.HTTPD_HEALTHZ


def test_normalized_names_are_containerds() -> None:
    assert images.normalized("servectl:0.1.0") == "docker.io/library/servectl:0.1.0"
    assert images.normalized("team/app:1") == "docker.io/team/app:1"
    assert images.normalized("registry.k8s.io/pause:3.10") == "registry.k8s.io/pause:3.10"
    assert images.normalized("localhost:5000/app:1") == "localhost:5000/app:1"


def _fake_ctr(tmp_path: Path, script: str, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ctr").write_text(f"#!/bin/sh\n{script}\n")
    (bin_dir / "ctr").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_import_runs_ctr_with_the_address_namespace_and_snapshotter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_ctr(tmp_path, 'echo "$@"', monkeypatch)
    out = images.import_image(tmp_path / "x.tar", "/run/test.sock")
    assert out.split() == [
        "--address", "/run/test.sock", "--namespace", "k8s.io",
        "images", "import", "--snapshotter", "overlayfs", str(tmp_path / "x.tar"),
    ]  # fmt: skip


def test_a_failing_import_raises_one_line_with_ctrs_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_ctr(tmp_path, 'echo "ctr: failed to dial\n  connection refused" >&2; exit 1', monkeypatch)
    with pytest.raises(images.ImageImportFailed) as caught:
        images.import_image(tmp_path / "x.tar", "/run/test.sock")
    message = str(caught.value)
    assert "\n" not in message
    assert message.endswith("/run/test.sock: ctr: failed to dial connection refused")


def test_import_without_ctr_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(images.ImageImportFailed, match="no ctr"):
        images.import_image(tmp_path / "x.tar", "/run/test.sock")


# --- a private containerd ----------------------------------------------------------------

# A fixed place of its own, so that a run killed midway is cleaned up by the next one; the
# lock keeps two test sessions on this machine (CI's and a developer's) from sharing it.
CONTAINERD_DIR = Path("/tmp/servectl-test-images-containerd")
CONTAINERD_LOCK = Path("/tmp/servectl-test-images-containerd.lock")
CONTAINERD_CONFIG = """version = 2
root = "{d}/root"
state = "{d}/state"
[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.test/pause:1"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{d}/cni"
"""


def _containerd_missing() -> str | None:
    if os.geteuid() != 0:
        return "not root"
    for tool in ("containerd", "ctr", "runc", "containerd-shim-runc-v2"):
        if shutil.which(tool) is None:
            return f"no {tool} (Debian: apt-get install containerd)"
    for host_file in (images.BUSYBOX, images.CATATONIT):
        if not host_file.is_file():
            return f"no {host_file} (Debian: busybox-static, catatonit)"
    return None


def _clean_containerd_dir() -> None:
    """Stop a containerd left by an earlier run, unmount what it left, remove the dir."""
    pid_file = CONTAINERD_DIR / "containerd.pid"
    if pid_file.exists():
        with contextlib.suppress(ValueError, OSError):
            pid = int(pid_file.read_text())
            if str(CONTAINERD_DIR) in Path(f"/proc/{pid}/cmdline").read_text():
                os.kill(pid, signal.SIGKILL)
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(f"{CONTAINERD_DIR}/")), reverse=True):
        subprocess.run(["umount", "-l", mount], check=False, capture_output=True)
    shutil.rmtree(CONTAINERD_DIR, ignore_errors=True)


@contextlib.contextmanager
def _private_containerd() -> Iterator[str]:
    with CONTAINERD_LOCK.open("w") as lock:
        # Released by the kernel when a holder dies, so a crashed run never blocks the next.
        fcntl.flock(lock, fcntl.LOCK_EX)
        with _containerd_started() as address:
            yield address


@contextlib.contextmanager
def _containerd_started() -> Iterator[str]:
    _clean_containerd_dir()
    (CONTAINERD_DIR / "cni").mkdir(parents=True)
    config = CONTAINERD_DIR / "config.toml"
    config.write_text(CONTAINERD_CONFIG.format(d=CONTAINERD_DIR))
    address = str(CONTAINERD_DIR / "containerd.sock")
    with (CONTAINERD_DIR / "containerd.log").open("wb") as log:
        process = subprocess.Popen(
            ["containerd", "--config", str(config)],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    (CONTAINERD_DIR / "containerd.pid").write_text(str(process.pid))
    try:
        deadline = time.monotonic() + 30
        while _ctr(address, "version").returncode != 0:
            assert process.poll() is None, (CONTAINERD_DIR / "containerd.log").read_text()
            assert time.monotonic() < deadline, "containerd did not answer in 30 s"
            time.sleep(0.2)
        yield address
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)
        _clean_containerd_dir()


def _ctr(address: str, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    command = ["ctr", "--address", address, "--namespace", "k8s.io", *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.skipif(_containerd_missing() is not None, reason=str(_containerd_missing()))
def test_images_import_into_containerd_and_httpd_serves(tmp_path: Path) -> None:
    pause = images.pause_image(tmp_path / "pause.tar", "registry.test/pause:1")
    httpd = images.httpd_test_image(tmp_path / "httpd.tar", "servectl-test/httpd:1")
    with _private_containerd() as address:
        for image in (pause, httpd):
            images.import_image(image.path, address)
        listed = _ctr(address, "images", "ls").stdout
        for name in ("registry.test/pause:1", "docker.io/servectl-test/httpd:1"):
            assert name in listed, listed
        # The CRI plugin (the kubelet's side) saw them: it labels the images it manages.
        deadline = time.monotonic() + 10
        while listed.count("io.cri-containerd.image=managed") < 4:  # 2 names + 2 ids
            assert time.monotonic() < deadline, listed
            time.sleep(0.2)
            listed = _ctr(address, "images", "ls").stdout
        port = _free_port()
        name = f"servectl-test-httpd-{os.getpid()}"
        # The host's network, so only 127.0.0.1: the image's flags with another address.
        # ctr itself does not normalize names: it needs containerd's.
        run = ["run", "--rm", "--net-host", images.normalized("servectl-test/httpd:1"), name]
        flags = ["/sbin/catatonit", "--", "/bin/busybox", "httpd", "-f", "-p"]
        command = ["ctr", "--address", address, "--namespace", "k8s.io", *run]
        server = subprocess.Popen(
            [*command, *flags, f"127.0.0.1:{port}", "-h", "/www"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        # No proxy, whatever the environment says: the request stays on loopback.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    with opener.open(f"http://127.0.0.1:{port}/healthz", timeout=2) as reply:
                        assert reply.read() == images.HTTPD_HEALTHZ
                        break
                except OSError:
                    assert server.poll() is None, server.stderr and server.stderr.read()
                    assert time.monotonic() < deadline, "httpd did not answer in 30 s"
                    time.sleep(0.2)
            # SIGTERM reaches httpd through catatonit: the task ends without a SIGKILL.
            assert _ctr(address, "task", "kill", name).returncode == 0
            server.wait(timeout=20)
        finally:
            if server.poll() is None:
                _ctr(address, "task", "kill", "--signal", "SIGKILL", name)
                server.wait(timeout=20)
