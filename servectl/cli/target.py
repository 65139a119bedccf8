"""Which runtime a service verb talks to: the local runtime, or a cluster (``--context``).

A verb works on a Kubernetes cluster when it is given ``--context NAME`` or
``--kubeconfig PATH`` (that file's current context), or when ``$SERVECTL_CONTEXT`` names a
context and no ``--state-dir`` says otherwise; else on the local runtime, exactly as
before. On a cluster the namespace is ``-n``, else the context's, else ``default``.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from servectl.cli.console import fail

if TYPE_CHECKING:
    from servectl.backends.kubernetes.client import ClientError, KubeClient

CONTEXT_ENV = "SERVECTL_CONTEXT"
PANEL = "Kubernetes"

ContextOption = Annotated[
    str | None,
    typer.Option(
        "--context",
        help="Work on this kubeconfig context's cluster instead of the local runtime "
        f"(default: ${CONTEXT_ENV}).",
        rich_help_panel=PANEL,
        show_default=False,
    ),
]
KubeconfigOption = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig",
        help="The kubeconfig file (default: $KUBECONFIG, else ~/.kube/config); alone, its "
        "current context.",
        dir_okay=False,
        rich_help_panel=PANEL,
        show_default=False,
    ),
]


@dataclass
class Cluster:
    """A verb's cluster: the client, the namespace it works in, how to say it to kubectl."""

    client: KubeClient
    namespace: str
    context: str | None
    kubeconfig: Path | None
    _closed: bool = False

    def flags(self) -> str:
        """``--kubeconfig P --context C`` as given, for commands printed to the user."""
        parts: list[str] = []
        if self.kubeconfig is not None:
            parts += ["--kubeconfig", str(self.kubeconfig)]
        if self.context is not None:
            parts += ["--context", self.context]
        return shlex.join(parts)

    def kubectl(self, *args: str, ns: bool = True) -> str:
        """A kubectl command line for the same cluster (and namespace, with ``ns``)."""
        where = shlex.join(["-n", self.namespace]) if ns else ""
        return " ".join(p for p in ("kubectl", self.flags(), where, shlex.join(args)) if p)

    def servectl(self, *args: str) -> str:
        flags = self.flags()
        ns = shlex.join(["-n", self.namespace])
        return " ".join(p for p in ("servectl", shlex.join(args), ns, flags) if p)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.client.close()


def wanted(context: str | None, kubeconfig: Path | None, state: Path | None) -> bool:
    """Do the options name a cluster (True) or the local runtime (False)?"""
    if context is None and kubeconfig is None:
        # The variable names a context unless an explicit --state-dir says local.
        return bool(os.environ.get(CONTEXT_ENV)) and state is None
    if state is not None:
        raise fail(
            "--state-dir is the local runtime's and --context/--kubeconfig a cluster's: "
            "give one of them"
        )
    return True


def cluster(
    context: str | None,
    kubeconfig: Path | None,
    namespace: str | None,
    state: Path | None,
) -> Cluster | None:
    """The cluster the options name, or None for the local runtime."""
    if not wanted(context, kubeconfig, state):
        return None
    if context is None and kubeconfig is None:
        context = os.environ.get(CONTEXT_ENV) or None
    from servectl.backends.kubernetes.client import ClientError, KubeClient

    try:
        client = KubeClient.connect(str(kubeconfig) if kubeconfig is not None else None, context)
    except ClientError as exc:
        raise refused(exc) from None
    return Cluster(client, namespace or client.namespace, client.context, kubeconfig)


def refused(exc: ClientError) -> typer.Exit:
    """A cluster's refusal as ``error: ...``: exit 2 for bad input, 1 for the cluster."""
    return fail(str(exc), 1 if exc.environment else 2)
