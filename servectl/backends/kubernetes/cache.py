"""Watch caches (informers): the controller's view of the cluster, kept by list + watch.

Each :class:`Informer` lists one kind once (optionally by label, in one namespace or all),
then watches from that list's ``resourceVersion`` and applies every event to an in-memory
map. A watch that ends is resumed from the last version seen (bookmarks keep it fresh); a
410 Gone (the version fell out of etcd's window) relists. So a reconcile cycle reads no
API at all: the number of requests per cycle is the number of writes.

What the controller writes it also puts into the cache at once (:meth:`Informer.put`, only
if newer than what is there), so the next cycle does not re-apply an object because its
watch event has not arrived yet.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from servectl.backends.kubernetes.kube import Doc, Kube, KubeError, Resource

log = logging.getLogger("servectl.kubernetes")

Key = tuple[str, str]  # (namespace, name)
SERVICE_LABEL = "servectl.io/service"  # objects.LABEL_SERVICE: the index's key


def key_of(doc: Mapping[str, Any]) -> Key:
    meta = doc.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _rv(doc: Mapping[str, Any]) -> int:
    try:
        return int((doc.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:  # opaque versions: treat as unordered (always newer)
        return -1


def _older(doc: Mapping[str, Any], than: Mapping[str, Any] | None) -> bool:
    """``doc`` is an older version than ``than`` (both with integer versions)."""
    if than is None:
        return False
    new, have = _rv(doc), _rv(than)
    return new >= 0 and have >= 0 and new < have


class Informer:
    """A list + watch cache of one kind."""

    def __init__(
        self,
        kube: Kube,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        on_change: Callable[[str, Doc], None] | None = None,
        watch_timeout_s: int = 240,
    ) -> None:
        self.kube = kube
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.on_change = on_change
        self.watch_timeout_s = watch_timeout_s
        self._items: dict[Key, Doc] = {}
        # (namespace, servectl.io/service label) -> keys: a cycle selects each service's
        # objects without scanning every object of every service.
        self._by_service: dict[Key, set[Key]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.synced = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None  # the last list/watch failure, for /readyz
        self.relists = 0

    # ------------------------------------------------------------------ reads

    def items(self) -> list[Doc]:
        with self._lock:
            return list(self._items.values())

    def get(self, namespace: str, name: str) -> Doc | None:
        with self._lock:
            return self._items.get((namespace, name))

    def select(self, namespace: str, labels: Mapping[str, str]) -> list[Doc]:
        """Objects in ``namespace`` whose labels include all of ``labels``."""
        with self._lock:
            out = []
            service = labels.get(SERVICE_LABEL)
            if service is not None:
                keys = self._by_service.get((namespace, service), set())
                candidates = [(k, self._items[k]) for k in keys]
            else:
                candidates = list(self._items.items())
            for (ns, _name), doc in candidates:
                if ns != namespace:
                    continue
                have = (doc.get("metadata") or {}).get("labels") or {}
                if all(have.get(k) == v for k, v in labels.items()):
                    out.append(doc)
            return out

    # ------------------------------------------------------------------ writes

    def put(self, doc: Doc) -> None:
        """Write-through of an object the controller just wrote (kept if not older)."""
        key = key_of(doc)
        with self._lock:
            have = self._items.get(key)
            if not _older(doc, have):
                self._store(key, doc)

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._drop((namespace, name))

    def _store(self, key: Key, doc: Doc) -> None:
        """Put ``doc`` under ``key`` and in the index (the lock is held)."""
        self._drop(key)
        self._items[key] = doc
        service = ((doc.get("metadata") or {}).get("labels") or {}).get(SERVICE_LABEL)
        if service is not None:
            self._by_service.setdefault((key[0], str(service)), set()).add(key)

    def _drop(self, key: Key) -> None:
        old = self._items.pop(key, None)
        if old is None:
            return
        service = ((old.get("metadata") or {}).get("labels") or {}).get(SERVICE_LABEL)
        if service is not None:
            keys = self._by_service.get((key[0], str(service)))
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_service[(key[0], str(service))]

    # ------------------------------------------------------------------ the loop

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name=f"informer-{self.resource.plural}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def wait_synced(self, timeout_s: float) -> bool:
        return self.synced.wait(timeout_s)

    def relist(self) -> str:
        """List everything again and replace the cache; returns the list's version."""
        listed = self.kube.list(self.resource, self.namespace, label_selector=self.label_selector)
        fresh = {key_of(item): item for item in listed["items"]}
        with self._lock:
            gone = [doc for key, doc in self._items.items() if key not in fresh]
            changed = [
                doc
                for key, doc in fresh.items()
                if key not in self._items or _rv(self._items[key]) != _rv(doc)
            ]
            # A write of ours after the list was served is newer than the list's copy.
            kept = {k: d for k, d in self._items.items() if k in fresh and _older(fresh[k], d)}
            self._items = {}
            self._by_service = {}
            for key, doc in fresh.items():
                self._store(key, kept.get(key, doc))
        self.relists += 1
        self.synced.set()
        for doc in gone:
            self._notify("DELETED", doc)
        for doc in changed:
            self._notify("MODIFIED", doc)
        return str(listed["metadata"].get("resourceVersion") or "")

    def _notify(self, kind: str, doc: Doc) -> None:
        if self.on_change is not None:
            try:
                self.on_change(kind, doc)
            except Exception:  # pragma: no cover - a callback must not kill the watch
                log.exception("informer %s: on_change failed", self.resource.plural)

    def _run(self) -> None:
        version = ""
        backoff = 0.5
        while not self._stop.is_set():
            try:
                if not version:
                    version = self.relist()
                version = self._watch(version)
                backoff = 0.5
                self.error = None
            except KubeError as exc:
                if self._stop.is_set():
                    break
                if exc.gone:
                    version = ""  # fell out of the watch window: relist
                    continue
                self.error = str(exc)
                log.warning("informer %s: %s", self.resource.plural, exc)
                version = "" if exc.status in (0, 500, 503) else version
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)
            except Exception as exc:  # a dropped stream, a bad line: start over
                if self._stop.is_set():
                    break
                self.error = f"{type(exc).__name__}: {exc}"
                log.warning("informer %s: watch broke: %s", self.resource.plural, self.error)
                version = ""
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)

    def _watch(self, version: str) -> str:
        started = time.monotonic()
        for event in self.kube.watch(
            self.resource,
            self.namespace,
            resource_version=version,
            label_selector=self.label_selector,
            timeout_s=self.watch_timeout_s,
        ):
            if self._stop.is_set():
                break
            kind = event.get("type")
            doc = event.get("object") or {}
            if kind == "ERROR":
                code = int(doc.get("code") or 0)
                raise KubeError(
                    code,
                    str(doc.get("reason") or ""),
                    str(doc.get("message") or ""),
                    verb="WATCH",
                    path=self.resource.plural,
                )
            new_version = str((doc.get("metadata") or {}).get("resourceVersion") or version)
            if kind == "BOOKMARK":
                version = new_version
                continue
            doc.setdefault("apiVersion", self.resource.api_version)
            doc.setdefault("kind", self.resource.kind)
            key = key_of(doc)
            # Events arrive in order, but a write of ours is put here at once (write-through,
            # :meth:`put`), ahead of its own event and of those before it: an event older
            # than the cached copy would undo the write until the watch caught up, and the
            # next cycle, reading its own status as not written, would write it again.
            with self._lock:
                if _older(doc, self._items.get(key)):
                    pass  # already past it
                elif kind == "DELETED":
                    self._drop(key)
                else:
                    self._store(key, doc)
            version = new_version
            self._notify(str(kind), doc)
        if time.monotonic() - started < 1.0 and self._stop.wait(0.5):
            return version
        return version
