"""Container images for the test node, written without a container engine or a registry.

No registry is reachable here and there is no Docker engine, so the node's images are
docker-archive tarballs (``docker save``'s format) written by `write_archive` and loaded
with ``ctr -n k8s.io images import`` (`import_image`). An archive holds ``manifest.json``
(Config, RepoTags, Layers), the config JSON as ``<sha256>.json`` (that digest is the image
id) and each uncompressed layer tar as ``<sha256>.tar`` (its diff_id).

A layer is a host directory taken whole (a rootfs: a `Path` or `Tree`), or a map
``{path in the image: content}`` of bytes, host files, `File`, `Symlink`, `Dir` or a `Tree`
placed at that path. The same inputs give the same bytes, so the same image id: entries
are sorted, map entries have a fixed mtime and uid/gid 0 unless told. A tree keeps its
files' owners and mtimes unless told: a rootfs built as root has meaningful owners (apt's
``_apt`` directories), and Python checks each ``.pyc`` against its source's mtime, so
clamping mtimes would make every start recompile (uncached on a read-only root).

`pause_image` and `httpd_test_image` are the node's sandbox image and a test workload;
``scripts/build-images`` builds the controller and model-server images (docs/images.md).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import stat
import subprocess
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, cast

# The mtime of entries without one of their own (map entries, implicit parents, the
# archive's files): the same inputs give the same bytes whenever they are built.
FIXED_MTIME = 0
CATATONIT = Path("/usr/bin/catatonit")
BUSYBOX = Path("/bin/busybox")
HTTPD_PORT = 8080


class ImageError(Exception):
    """An image cannot be written (bad ref, clashing paths, unsupported file)."""


class ImageImportFailed(Exception):
    """``ctr images import`` failed; the message is one line with ctr's stderr."""


@dataclass(frozen=True)
class File:
    """A regular file: bytes, or a host file's content (symlinks followed). Mode None: the
    host file's permission bits, or 0o644 for bytes."""

    source: bytes | Path
    mode: int | None = None
    uid: int = 0
    gid: int = 0


@dataclass(frozen=True)
class Symlink:
    target: str


@dataclass(frozen=True)
class Dir:
    mode: int = 0o755


@dataclass(frozen=True)
class Tree:
    """A host directory's contents: a whole layer, or placed at a path in a map layer.
    `owner` None keeps each file's uid/gid, `mtime` None each file's mtime."""

    root: Path
    owner: tuple[int, int] | None = None
    mtime: int | None = None


Entry = bytes | Path | File | Symlink | Dir | Tree
Layer = Path | Tree | Mapping[str, Entry]


def host_architecture() -> str:
    """The host's architecture in OCI's words (the binaries copied in are the host's)."""
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


@dataclass(frozen=True)
class Config:
    """The runtime part of an image config (what ``docker inspect`` shows under Config)."""

    entrypoint: Sequence[str] = ()
    cmd: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    user: str = ""
    working_dir: str = "/"
    exposed_ports: Sequence[str] = ()  # "8080/tcp"; a bare number means TCP
    architecture: str = field(default_factory=host_architecture)


@dataclass(frozen=True)
class Image:
    """What `write_archive` wrote: the tarball, its names, its id and its layers' digests."""

    path: Path
    refs: tuple[str, ...]
    image_id: str  # sha256:<hex of the config JSON>
    diff_ids: tuple[str, ...]  # sha256:<hex of each uncompressed layer tar>
    size: int  # bytes of the tarball


# One entry of a layer: its header, its content, and for a host file with other hard links
# its (st_dev, st_ino), so that the others are written as links to the first.
_Member = tuple[tarfile.TarInfo, bytes | Path | None, tuple[int, int] | None]


def normalized(ref: str) -> str:
    """The name containerd keeps an imported ref under, as the kubelet normalizes a pod's
    image: ``servectl:0.1.0`` is ``docker.io/library/servectl:0.1.0``."""
    first, _, rest = ref.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return ref
    return f"docker.io/{ref}" if rest else f"docker.io/library/{ref}"


def _check_ref(ref: str) -> None:
    name, _, tag = ref.rpartition(":")
    if not name or not tag or "/" in tag or "@" in ref or name != name.lower():
        raise ImageError(f"image ref {ref!r}: give name:tag (lower case, a tag, no digest)")


def _clean(path: str) -> str:
    parts = [p for p in path.strip("/").split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise ImageError(f"path in image {path!r}: give a path below /, without '..'")
    return "/".join(parts)


def _info(
    name: str, kind: bytes, mode: int, uid: int = 0, gid: int = 0, mtime: int = FIXED_MTIME
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.uid, info.gid, info.mtime = kind, mode, uid, gid, mtime
    # No user names: they would come from this host's passwd, and the ids are what count.
    info.uname = info.gname = ""
    return info


def _tree_members(tree: Tree, at: str) -> list[_Member]:
    """`tree`'s entries under `at` ("" for the image root)."""
    if not tree.root.is_dir():
        raise ImageError(f"layer directory {tree.root} does not exist")
    paths = [tree.root] if at else []

    def _unreadable(exc: OSError) -> None:
        raise ImageError(f"cannot read {exc.filename}: {exc.strerror}") from exc

    for directory, dirnames, filenames in os.walk(tree.root, onerror=_unreadable):
        paths.extend(Path(directory, name) for name in dirnames + filenames)
    members: list[_Member] = []
    for path in paths:
        st = path.lstat()
        rel = path.relative_to(tree.root).as_posix()
        name = at if rel == "." else (f"{at}/{rel}" if at else rel)
        uid, gid = tree.owner if tree.owner is not None else (st.st_uid, st.st_gid)
        mtime = tree.mtime if tree.mtime is not None else int(st.st_mtime)
        info = _info(name, tarfile.DIRTYPE, stat.S_IMODE(st.st_mode), uid, gid, mtime)
        if stat.S_ISDIR(st.st_mode):
            members.append((info, None, None))
        elif stat.S_ISREG(st.st_mode):
            # Sized now: a file that changes under the writer fails (tarfile checks) loudly.
            info.type, info.size = tarfile.REGTYPE, st.st_size
            members.append((info, path, (st.st_dev, st.st_ino) if st.st_nlink > 1 else None))
        elif stat.S_ISLNK(st.st_mode):
            info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
            members.append((info, None, None))
        else:
            # Device nodes, fifos, sockets: the runtime makes /dev; nothing else needs them.
            raise ImageError(f"{path}: a device, fifo or socket cannot go in a layer")
    return members


def _entry_members(name: str, entry: Entry) -> list[_Member]:
    if isinstance(entry, Path) and entry.is_dir():
        entry = Tree(entry)
    if isinstance(entry, Tree):
        return _tree_members(entry, name)
    if isinstance(entry, Symlink):
        info = _info(name, tarfile.SYMTYPE, 0o777)
        info.linkname = entry.target
        return [(info, None, None)]
    if isinstance(entry, Dir):
        return [(_info(name, tarfile.DIRTYPE, entry.mode), None, None)]
    file = entry if isinstance(entry, File) else File(entry)
    if isinstance(file.source, Path):
        st = file.source.stat()
        if not stat.S_ISREG(st.st_mode):
            raise ImageError(f"{name}: {file.source} is not a regular file")
        mode, size = stat.S_IMODE(st.st_mode), st.st_size
    else:
        mode, size = 0o644, len(file.source)
    mode = mode if file.mode is None else file.mode
    info = _info(name, tarfile.REGTYPE, mode, file.uid, file.gid)
    info.size = size
    return [(info, file.source, None)]


def _layer_members(layer: Layer) -> list[_Member]:
    """Every entry of `layer` in tar order (sorted: a parent before its children), with
    missing parents added and hard links made links."""
    if isinstance(layer, Path | Tree):
        members = _tree_members(layer if isinstance(layer, Tree) else Tree(layer), "")
    else:
        members = [m for name, entry in layer.items() for m in _entry_members(_clean(name), entry)]
    by_name: dict[str, _Member] = {}
    for member in members:
        if member[0].name in by_name:
            raise ImageError(f"{member[0].name!r} is given twice in one layer")
        by_name[member[0].name] = member
    for name in list(by_name):
        parent = name.rpartition("/")[0]
        while parent and parent not in by_name:
            by_name[parent] = (_info(parent, tarfile.DIRTYPE, 0o755), None, None)
            parent = parent.rpartition("/")[0]
        if parent and by_name[parent][0].type != tarfile.DIRTYPE:
            raise ImageError(f"{name!r} lies under {parent!r}, which is not a directory")
    # The first path of an inode (in tar order) carries the data, the others link to it.
    first_of: dict[tuple[int, int], str] = {}
    ordered: list[_Member] = []
    for name in sorted(by_name):
        info, source, inode = by_name[name]
        if inode is not None and inode in first_of:
            info.type, info.size, info.linkname, source = tarfile.LNKTYPE, 0, first_of[inode], None
        elif inode is not None:
            first_of[inode] = name
        ordered.append((info, source, inode))
    return ordered


class _Digesting:
    """Passes what tarfile writes on to the archive file, counting and hashing it."""

    def __init__(self, target: BinaryIO) -> None:
        self.target = target
        self.sha256 = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self.size += len(data)
        self.target.write(data)
        return len(data)


def _header(name: str, size: int) -> bytes:
    """One 512-byte header: names here are short, and GNU's format holds any size."""
    info = _info(name, tarfile.REGTYPE, 0o644)
    info.size = size
    return info.tobuf(format=tarfile.GNU_FORMAT)


def _add_bytes(archive: BinaryIO, name: str, data: bytes) -> None:
    archive.write(_header(name, len(data)) + data + b"\0" * (-len(data) % tarfile.BLOCKSIZE))


def _add_layer(archive: BinaryIO, layer: Layer) -> str:
    """Stream one layer tar into the archive. Its name (its digest) is known only once it
    is written, so a placeholder header goes first and is filled in after."""
    members = _layer_members(layer)
    start = archive.tell()
    archive.write(b"\0" * tarfile.BLOCKSIZE)
    sink = _Digesting(archive)
    # "w|": tarfile only writes to the stream, which it pads to tar's 10 KiB records.
    with tarfile.open(fileobj=cast(BinaryIO, sink), mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for info, source, _ in members:
            if isinstance(source, Path):
                with source.open("rb") as content:
                    tar.addfile(info, content)
            else:
                tar.addfile(info, None if source is None else io.BytesIO(source))
    # No padding after it: tarfile ends a stream on a whole record, a whole number of blocks.
    digest = sink.sha256.hexdigest()
    end = archive.tell()
    archive.seek(start)
    archive.write(_header(f"{digest}.tar", sink.size))
    archive.seek(end)
    return digest


def _config_json(config: Config, diff_ids: Sequence[str]) -> bytes:
    ports = [p if "/" in p else f"{p}/tcp" for p in config.exposed_ports]
    document = {
        "architecture": config.architecture,
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {
            "Entrypoint": list(config.entrypoint) or None,
            "Cmd": list(config.cmd) or None,
            "Env": [f"{key}={value}" for key, value in config.env.items()],
            "User": config.user,
            "WorkingDir": config.working_dir,
            "ExposedPorts": {port: {} for port in sorted(ports)},
        },
        "rootfs": {"type": "layers", "diff_ids": list(diff_ids)},
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def write_archive(
    out: Path, refs: str | Sequence[str], layers: Sequence[Layer], config: Config
) -> Image:
    """Write a docker-archive tarball at `out` (replaced atomically) holding one image."""
    names = (refs,) if isinstance(refs, str) else tuple(refs)
    if not names or not layers:
        raise ImageError("an image needs at least one ref (name:tag) and one layer")
    for ref in names:
        _check_ref(ref)
    partial = out.with_name(f".{out.name}.partial")
    try:
        with partial.open("w+b") as archive:
            diff_ids = [f"sha256:{_add_layer(archive, layer)}" for layer in layers]
            config_bytes = _config_json(config, diff_ids)
            config_hex = hashlib.sha256(config_bytes).hexdigest()
            _add_bytes(archive, f"{config_hex}.json", config_bytes)
            layer_files = [f"{d.removeprefix('sha256:')}.tar" for d in diff_ids]
            manifest = {"Config": f"{config_hex}.json", "RepoTags": names, "Layers": layer_files}
            _add_bytes(archive, "manifest.json", json.dumps([manifest], sort_keys=True).encode())
            end = archive.tell() + 2 * tarfile.BLOCKSIZE
            archive.write(b"\0" * (2 * tarfile.BLOCKSIZE + (-end % tarfile.RECORDSIZE)))
        partial.replace(out)
    finally:
        partial.unlink(missing_ok=True)
    return Image(out, names, f"sha256:{config_hex}", tuple(diff_ids), out.stat().st_size)


def pause_image(out: Path, ref: str, catatonit: Path = CATATONIT) -> Image:
    """The sandbox ("pause") image: Debian's statically linked catatonit as ``/pause``,
    run as ``/pause -P`` (catatonit's pause mode: it only waits for signals)."""
    layer = {"pause": File(catatonit, mode=0o755)}
    return write_archive(out, ref, [layer], Config(entrypoint=["/pause", "-P"]))


HTTPD_INDEX = b"<!doctype html><title>servectl httpd test</title><p>servectl httpd test</p>\n"
HTTPD_HEALTHZ = b"ok\n"


def httpd_test_image(
    out: Path, ref: str, busybox: Path = BUSYBOX, catatonit: Path = CATATONIT
) -> Image:
    """A test workload: Debian's static busybox httpd serving /www on port 8080 (``/`` is
    `HTTPD_INDEX`, ``/healthz`` ``ok``). catatonit is PID 1, since httpd as PID 1 ignores
    SIGTERM (each pod deletion would wait out its grace period); the flags are the Cmd,
    so that a pod's ``args`` may change them."""
    www: dict[str, Entry] = {"www/index.html": HTTPD_INDEX, "www/healthz": HTTPD_HEALTHZ}
    www["bin/busybox"], www["sbin/catatonit"] = File(busybox, 0o755), File(catatonit, 0o755)
    layer = {"tmp": Dir(mode=0o1777), **www}
    config = Config(
        entrypoint=["/sbin/catatonit", "--", "/bin/busybox", "httpd"],
        cmd=["-f", "-v", "-p", str(HTTPD_PORT), "-h", "/www"],
        exposed_ports=[f"{HTTPD_PORT}/tcp"],
    )
    return write_archive(out, ref, [layer], config)


def import_image(
    tarball: Path,
    address: str,
    namespace: str = "k8s.io",
    snapshotter: str = "overlayfs",
    timeout: float = 600.0,
) -> str:
    """Import `tarball` into the containerd at `address` with containerd 1.6's ctr;
    returns ctr's output, raises :class:`ImageImportFailed` (one line) when ctr fails.

    ``images import`` stores the content, names the image after its RepoTags (see
    `normalized`) and unpacks it for the host's platform into `snapshotter`, which must be
    the CRI plugin's: the kubelet runs it with ``imagePullPolicy: Never`` (or
    ``IfNotPresent``) and never pulls. No ``--all-platforms``: the images have one platform.
    No ``--compress-blobs``: gzip costs more time at each import than the disk it saves."""
    command = [
        *("ctr", "--address", address, "--namespace", namespace),
        *("images", "import", "--snapshotter", snapshotter, str(tarball)),
    ]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as exc:
        raise ImageImportFailed(f"cannot import {tarball}: no ctr ({exc.strerror})") from exc
    except subprocess.TimeoutExpired as exc:
        raise ImageImportFailed(f"cannot import {tarball}: ctr ran over {timeout:g} s") from exc
    if result.returncode != 0:
        detail = " ".join(result.stderr.split()) or f"exit status {result.returncode}"
        raise ImageImportFailed(f"cannot import {tarball} into {address}: {detail}")
    return result.stdout
