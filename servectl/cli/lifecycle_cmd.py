"""``servectl scale`` and ``delete``: change a service's replica bounds, or remove it, on
the local runtime or a cluster, through :class:`servectl.backends.client.ServiceClient`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from servectl.cli import target
from servectl.cli.console import fail, out
from servectl.cli.target import (
    ContextOption,
    KubeconfigOption,
    NameArg,
    NamespaceOption,
    StateDirOption,
)


def scale(
    name: NameArg,
    replicas: Annotated[
        int | None, typer.Option("--replicas", min=1, help="Pin the count (min = max = N).")
    ] = None,
    min_replicas: Annotated[int | None, typer.Option("--min", min=1, help="New minimum.")] = None,
    max_replicas: Annotated[int | None, typer.Option("--max", min=1, help="New maximum.")] = None,
    namespace: NamespaceOption = None,
    state: StateDirOption = None,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Change the replica bounds the autoscaler works within (--replicas pins them)."""
    if replicas is None and min_replicas is None and max_replicas is None:
        raise fail("give --replicas N, or --min and/or --max")
    if replicas is not None and (min_replicas is not None or max_replicas is not None):
        raise fail("--replicas pins both bounds: give it alone, or --min/--max")
    with target.session(state, context, kubeconfig) as client:
        updated = client.scale(
            namespace or client.namespace,
            name,
            replicas=replicas,
            min_replicas=min_replicas,
            max_replicas=max_replicas,
        )
    a = updated.spec.autoscaling
    out.print(f"modelservice/{name} scaled: min {a.min_replicas}, max {a.max_replicas}")


def delete(
    name: NameArg,
    namespace: NamespaceOption = None,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="On a cluster: wait until it is gone (the controller's finalizer has "
            "removed what it ran). The local runtime's store forgets it at once.",
        ),
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=1, help="Seconds --wait waits at most.")
    ] = 120.0,
    state: StateDirOption = None,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Delete a service: its replicas stop (in-flight requests finish) and its ports close."""
    with target.session(state, context, kubeconfig) as client:
        ns = namespace or client.namespace
        client.delete(ns, name)
        out.print(f"modelservice/{name} deleted", highlight=False)
        if wait:
            client.await_deletion(ns, name, timeout)
