"""``servectl events`` and ``logs``: what happened to a service, and what its model
servers printed, through :class:`servectl.backends.client.ServiceClient`.

A cluster's client answers ``logs`` with the kubectl command that shows the pods' logs
(``Elsewhere``): the CLI prints it as the error, exit 1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from servectl.cli import console, target
from servectl.cli import format as fmt
from servectl.cli.console import Output, out
from servectl.cli.target import (
    ContextOption,
    KubeconfigOption,
    NameArg,
    NamespaceOption,
    StateDirOption,
)

if TYPE_CHECKING:
    from servectl.backends.client import LogTail


def events(
    name: NameArg,
    namespace: NamespaceOption = None,
    follow: Annotated[
        bool, typer.Option("-f", "--follow", help="Keep printing new events.")
    ] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, help="How many of the newest.")] = 50,
    output: console.OutputOption = Output.TABLE,
    state: StateDirOption = None,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """The service's events: scaling, weight changes, rollout phases, refused commands.

    On a cluster: the core v1 Events whose involvedObject is the ModelService (the
    cluster keeps them for an hour by default)."""
    with target.session(state, context, kubeconfig) as client:
        batches = client.event_batches(
            namespace or client.namespace, name, limit=limit, follow=follow
        )
        try:
            for batch in batches:
                if output.machine:
                    console.print_records([e.to_record() for e in batch], output)
                    continue
                for e in batch:
                    out.print(
                        f"{fmt.clock_time(e.time)}  {e.type:<7} {e.reason:<20} {e.message}",
                        highlight=False,
                        markup=False,
                    )
        except KeyboardInterrupt:
            pass


def logs(
    name: NameArg,
    namespace: NamespaceOption = None,
    replica: Annotated[
        str | None, typer.Option("--replica", help="One replica (default: every replica).")
    ] = None,
    tail: Annotated[int, typer.Option("--tail", min=1, help="Lines per replica.")] = 20,
    follow: Annotated[
        bool,
        typer.Option(
            "-f", "--follow", help="Keep printing new lines (and new replicas' logs); Ctrl-C stops."
        ),
    ] = False,
    state: StateDirOption = None,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """The model servers' logs (each replica's, newest lines), from the state directory.

    On a cluster it prints the kubectl command that shows them (kubectl logs -f with -f)."""
    with target.session(state, context, kubeconfig) as client:
        ns = namespace or client.namespace
        tails = client.logs(ns, name, replica=replica, tail=tail, follow=follow)
        shown = _print_tails(tails, None)
        if not follow:
            return
        try:
            for batch in client.follow_logs(ns, name, replica=replica):
                shown = _print_tails(batch, shown)
        except KeyboardInterrupt:
            pass


def _print_tails(tails: list[LogTail], shown: str | None) -> str | None:
    """Each replica's lines under a ``==> pod <==`` header, as ``tail -f`` prints several
    files: a header only when the replica changes from the one ``shown`` last."""
    for log in tails:
        if log.replica != shown:
            out.print(f"==> {log.replica} <==", highlight=False, markup=False)
            shown = log.replica
        for line in log.lines:
            out.print(line, highlight=False, markup=False)
    return shown
