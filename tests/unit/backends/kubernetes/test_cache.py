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
