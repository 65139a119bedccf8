"""The watch cache's bookkeeping without an API server: write-through only when newer, and
the per-service index that ``select`` uses."""

from __future__ import annotations

from typing import Any

from servectl.backends.kubernetes.cache import Informer
from servectl.backends.kubernetes.kube import DEPLOYMENTS


def doc(name: str, rv: int, service: str | None = "a", ns: str = "ml") -> dict[str, Any]:
    labels = {"servectl.io/service": service} if service else {}
    return {
        "metadata": {
            "name": name,
            "namespace": ns,
            "resourceVersion": str(rv),
            "labels": {**labels, "tier": "x"},
        }
    }


def test_put_keeps_the_newer_version() -> None:
    cache = Informer(None, DEPLOYMENTS)  # type: ignore[arg-type]
    cache.put(doc("a-v1", 5))
    cache.put(doc("a-v1", 3))  # a late watch event must not undo a write
    got = cache.get("ml", "a-v1")
    assert got is not None and got["metadata"]["resourceVersion"] == "5"
    cache.put(doc("a-v1", 7))
    got = cache.get("ml", "a-v1")
    assert got is not None and got["metadata"]["resourceVersion"] == "7"


def test_select_by_service_uses_the_index_and_follows_relabels_and_forgets() -> None:
    cache = Informer(None, DEPLOYMENTS)  # type: ignore[arg-type]
    cache.put(doc("a-v1", 1))
    cache.put(doc("a-v2", 2))
    cache.put(doc("b-v1", 3, service="b"))
    cache.put(doc("a-v1", 4, ns="other"))
    cache.put(doc("loose", 5, service=None))

    def names(ns: str, labels: dict[str, str]) -> list[str]:
        return sorted(d["metadata"]["name"] for d in cache.select(ns, labels))

    assert names("ml", {"servectl.io/service": "a"}) == ["a-v1", "a-v2"]
    assert names("ml", {"servectl.io/service": "a", "tier": "x"}) == ["a-v1", "a-v2"]
    assert names("ml", {"servectl.io/service": "a", "tier": "y"}) == []
    assert names("ml", {"tier": "x"}) == ["a-v1", "a-v2", "b-v1", "loose"]
    cache.put(doc("a-v2", 6, service="b"))  # relabelled: moves to b's entry
    assert names("ml", {"servectl.io/service": "a"}) == ["a-v1"]
    assert names("ml", {"servectl.io/service": "b"}) == ["a-v2", "b-v1"]
    cache.forget("ml", "a-v1")
    assert names("ml", {"servectl.io/service": "a"}) == []
    assert cache.get("ml", "a-v1") is None
    assert names("other", {"servectl.io/service": "a"}) == ["a-v1"]


class _Stream:
    """A Kube whose list and watch serve fixed documents and events."""

    def __init__(self, listed: list[dict[str, Any]], events: list[dict[str, Any]]) -> None:
        self.listed, self.events = listed, events

    def list(self, *_: Any, **__: Any) -> dict[str, Any]:
        return {"metadata": {"resourceVersion": "10"}, "items": self.listed}

    def watch(self, *_: Any, **__: Any) -> Any:
        yield from self.events


def test_a_late_watch_event_does_not_undo_a_write_put_through() -> None:
    # The controller wrote a-v1 (rv 12) and put it through; the watch then delivers the
    # events before it (rv 11) and its own (rv 12): the cache never goes back to 11.
    events = [
        {"type": "MODIFIED", "object": doc("a-v1", 11)},
        {"type": "MODIFIED", "object": doc("a-v1", 12)},
        {"type": "DELETED", "object": doc("a-v2", 9)},  # deleted, then created again by us
        {"type": "MODIFIED", "object": doc("b-v1", 13, service="b")},
    ]
    cache = Informer(_Stream([], events), DEPLOYMENTS)  # type: ignore[arg-type]
    cache.put(doc("a-v1", 12))
    cache.put(doc("a-v2", 14))
    assert cache._watch("10") == "13"  # every event applied in order, the version last seen
    got = cache.get("ml", "a-v1")
    assert got is not None and got["metadata"]["resourceVersion"] == "12"
    recreated = cache.get("ml", "a-v2")
    assert recreated is not None and recreated["metadata"]["resourceVersion"] == "14"
    fresh = cache.get("ml", "b-v1")
    assert fresh is not None and fresh["metadata"]["resourceVersion"] == "13"


def test_a_relist_keeps_a_write_newer_than_the_list() -> None:
    cache = Informer(_Stream([doc("a-v1", 8), doc("a-v2", 9)], []), DEPLOYMENTS)  # type: ignore[arg-type]
    cache.put(doc("a-v1", 11))  # written after the list was served
    cache.put(doc("gone", 3))
    assert cache.relist() == "10"
    got = cache.get("ml", "a-v1")
    assert got is not None and got["metadata"]["resourceVersion"] == "11"
    assert cache.get("ml", "a-v2") is not None and cache.get("ml", "gone") is None
