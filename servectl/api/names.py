"""Names servectl gives what it creates, written in one place."""

from __future__ import annotations


def revision_name(service: str, version: int) -> str:
    """A revision of ``service`` serving model ``version``: ``<service>-v<version>`` (the
    Deployment and Service on a cluster, the replicas' prefix on the local runtime, the
    ``revision`` label on every metric)."""
    return f"{service}-v{version}"
