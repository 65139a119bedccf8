"""Which runtime a service verb talks to, and the client for it: the local runtime, or a
cluster (``--context``).

A verb works on a Kubernetes cluster when it is given ``--context NAME`` or
``--kubeconfig PATH`` (that file's current context), before the verb (``servectl
--context prod get``, as kubectl takes them: :func:`set_global`) or after it, or when
``$SERVECTL_CONTEXT`` names a context and no ``--state-dir`` says otherwise; else on the
local runtime, exactly as before. The verb's own options win over the global ones. On a
cluster the namespace is ``-n``, else the context's, else ``default``.

:func:`session` opens the one or the other as a
:class:`servectl.backends.client.ServiceClient`, so that each verb is written once; the
verb never asks which it got.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from servectl.cli.console import fail
from servectl.cli.local_cmd import StateDirOption, _client, state_dir

if TYPE_CHECKING:
    from servectl.backends.client import ClientError, ServiceClient

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
NamespaceOption = Annotated[
    str | None,
    typer.Option(
        "-n",
        "--namespace",
        help="The service's namespace (default: default; on a cluster, the context's).",
        show_default=False,
    ),
]
NameArg = Annotated[str, typer.Argument(help="The ModelService's name.")]
__all__ = [
    "ContextOption",
    "KubeconfigOption",
    "NameArg",
    "NamespaceOption",
    "StateDirOption",
    "refused",
    "session",
    "wanted",
]


# The options given before the verb (``servectl --context prod get``): set once by the root
# command for the one command a process runs; a verb's own options win over them.
_global: tuple[str | None, Path | None] = (None, None)


def set_global(context: str | None, kubeconfig: Path | None) -> None:
    """Record ``--context``/``--kubeconfig`` given before the verb (the root command)."""
    global _global
    _global = (context, kubeconfig)


def _with_global(context: str | None, kubeconfig: Path | None) -> tuple[str | None, Path | None]:
    return (
        context if context is not None else _global[0],
        kubeconfig if kubeconfig is not None else _global[1],
    )


def wanted(context: str | None, kubeconfig: Path | None, state: Path | None) -> bool:
    """Do the options name a cluster (True) or the local runtime (False)?"""
    context, kubeconfig = _with_global(context, kubeconfig)
    if context is None and kubeconfig is None:
        # The variable names a context unless an explicit --state-dir says local.
        return bool(os.environ.get(CONTEXT_ENV)) and state is None
    if state is not None:
        raise fail(
            "--state-dir is the local runtime's and --context/--kubeconfig a cluster's: "
            "give one of them"
        )
    return True


def open_client(state: Path | None, context: str | None, kubeconfig: Path | None) -> ServiceClient:
    """The client the options name: a cluster's, else the local runtime's."""
    if not wanted(context, kubeconfig, state):
        client: ServiceClient = _client(state_dir(state))
        return client
    context, kubeconfig = _with_global(context, kubeconfig)
    if context is None and kubeconfig is None:
        context = os.environ.get(CONTEXT_ENV) or None
    from servectl.backends.kubernetes.client import ClientError, KubeClient

    try:
        cluster = KubeClient.connect(str(kubeconfig) if kubeconfig is not None else None, context)
    except ClientError as exc:
        raise refused(exc) from None
    cluster.kubeconfig = kubeconfig
    return cluster


@contextmanager
def session(
    state: Path | None, context: str | None, kubeconfig: Path | None
) -> Iterator[ServiceClient]:
    """:func:`open_client`, closed on the way out; a refusal inside becomes
    ``error: ...`` and its exit status (:func:`refused`)."""
    from servectl.backends.client import ClientError

    client = open_client(state, context, kubeconfig)
    try:
        yield client
    except ClientError as exc:
        raise refused(exc) from None
    finally:
        client.close()


def refused(exc: ClientError) -> typer.Exit:
    """A runtime's refusal as ``error: ...``: exit 2 for bad input, 1 for the runtime."""
    return fail(str(exc), exc.exit_code)
