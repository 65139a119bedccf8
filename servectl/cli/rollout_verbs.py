"""``servectl rollout start|status|promote|abort|pause|resume|retry|undo|history``: a
rollout on the local runtime or a cluster, through
:class:`servectl.backends.client.ServiceClient`.

``rollout simulate`` (the rehearsal in the simulator) and the group itself live in
``rollout_cmd``; :func:`register` adds these verbs to it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from servectl.cli import console, target
from servectl.cli import format as fmt
from servectl.cli.console import Output, err, out
from servectl.cli.target import (
    ContextOption,
    KubeconfigOption,
    NameArg,
    NamespaceOption,
    StateDirOption,
)

ROLLOUT_OVER = ("Idle", "Completed", "Aborted", "Degraded")


def _queue(
    name: str,
    namespace: str | None,
    state: Path | None,
    op: str,
    version: int | None = None,
    context: str | None = None,
    kubeconfig: Path | None = None,
) -> None:
    from servectl.rollout.machine import Op

    with target.session(state, context, kubeconfig) as client:
        request = client.rollout_command(namespace or client.namespace, name, Op(op), version)
        warning = client.controller_warning()
    if request.queued:
        out.print(
            f"modelservice/{name}: {op} queued" + (f" (version {version})" if version else "")
        )
    elif request.id is None:
        out.print(
            f"modelservice/{name}: rollout to v{version} requested (spec.model.version)",
            highlight=False,
        )
    else:
        out.print(
            f"modelservice/{name}: {op} requested"
            + (f" (version {version})" if version is not None else "")
            + f", command {request.id}",
            highlight=False,
        )
    if request.replaced is not None:
        err.print(
            f"note: the previous command ({request.replaced}) had not been carried out yet; "
            "this one replaces it",
            highlight=False,
        )
    if warning is not None:
        err.print(warning, highlight=False)


def rollout_start(
    name: NameArg,
    version: Annotated[int, typer.Option("--version", min=0, help="The version to roll out.")],
    namespace: NamespaceOption = None,
    state: StateDirOption = None,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Start a rollout to VERSION with the service's strategy (canary, abTest, blueGreen).

    On a cluster, VERSION becomes spec.model.version (as a deploy of it would do)."""
    _queue(name, namespace, state, "start", version, context, kubeconfig)


def rollout_promote(
    name: NameArg,
    full: Annotated[bool, typer.Option("--full", help="Skip the remaining steps.")] = False,
    namespace: NamespaceOption = None,
    state: StateDirOption = None,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Go past the current pause or analysis (--full: straight to 100 %)."""
    _queue(name, namespace, state, "promote-full" if full else "promote", None, context, kubeconfig)


def _simple(op: str, doc: str) -> Any:
    def command(
        name: NameArg,
        namespace: NamespaceOption = None,
        state: StateDirOption = None,
        context: ContextOption = None,
        kubeconfig: KubeconfigOption = None,
    ) -> None:
        _queue(name, namespace, state, op, None, context, kubeconfig)

    command.__doc__ = doc
    return command


rollout_abort = _simple("abort", "Stop the rollout: all traffic back to the stable revision.")
rollout_pause = _simple("pause", "Hold the rollout at its current step.")
rollout_resume = _simple("resume", "Continue a paused rollout.")
rollout_retry = _simple("retry", "Start an aborted rollout again from its first step.")
rollout_undo = _simple("undo", "Roll back to the previous version (a rollout back to it).")


def _rollout_record(status: dict[str, Any]) -> dict[str, Any]:
    """``rollout status``'s record from a ModelService status."""
    rollout = status.get("rollout") or {}
    return {
        "phase": rollout.get("phase", "Idle"),
        "step": rollout.get("step"),
        "stableVersion": rollout.get("stableVersion"),
        "canaryVersion": rollout.get("canaryVersion"),
        "weights": {r["name"]: r.get("weight", 0) for r in status.get("revisions", [])},
        "message": rollout.get("message", ""),
        "verdicts": rollout.get("verdicts", []),
    }


def _rollout_line(record: dict[str, Any]) -> str:
    return (
        f"{record['phase']} step {record['step']}  "
        + " ".join(f"{k}:{v}%" for k, v in record["weights"].items())
        + f"  {record['message']}"
    )


def rollout_status(
    name: NameArg,
    namespace: NamespaceOption = None,
    watch: Annotated[bool, typer.Option("-w", "--watch", help="Follow until it finishes.")] = False,
    output: console.OutputOption = Output.TABLE,
    state: StateDirOption = None,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Where the rollout stands: phase, step, weights, verdicts (--watch to follow)."""
    with target.session(state, context, kubeconfig) as client:
        ns = namespace or client.namespace
        client.require(ns, name)
        last = None
        try:
            while True:
                record = _rollout_record(client.status(ns, name) or {})
                if output.machine and not watch:
                    console.print_records([record], output)
                    return
                line = _rollout_line(record)
                if line != last:
                    out.print(
                        f"{fmt.clock_time(time.time())}  {line}", highlight=False, markup=False
                    )
                    last = line
                if not watch or record["phase"] in ROLLOUT_OVER:
                    return
                time.sleep(client.poll_s)
        except KeyboardInterrupt:
            pass


def rollout_history(
    name: NameArg,
    namespace: NamespaceOption = None,
    output: console.OutputOption = Output.TABLE,
    state: StateDirOption = None,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Finished rollouts, oldest first: versions, outcome, verdicts.

    On a cluster: the current (or last) rollout from status; the history of finished
    rollouts is kept by the local runtime only."""
    with target.session(state, context, kubeconfig) as client:
        history = client.rollout_history(namespace or client.namespace, name)
    if history.note is not None:
        err.print(f"note: {history.note}", highlight=False, markup=False)
    console.emit(
        output,
        title=f"Rollouts of {name}" + (f" ({history.source})" if history.source else ""),
        header=["#", "TIME", "FROM", "TO", "OUTCOME", "MESSAGE"],
        rows=[
            [
                "-" if r.id is None else str(r.id),
                "-" if r.time is None else fmt.clock_time(r.time),
                f"v{r.from_version}",
                f"v{r.to_version}" if r.to_version is not None else "-",
                r.phase,
                r.message,
            ]
            for r in history.rollouts
        ],
        records=history.records,
    )


def register(rollout_app: typer.Typer) -> None:
    """The rollout verbs, in the order ``servectl rollout --help`` lists them."""
    rollout_app.command("start")(rollout_start)
    rollout_app.command("status")(rollout_status)
    rollout_app.command("promote")(rollout_promote)
    rollout_app.command("abort")(rollout_abort)
    rollout_app.command("pause")(rollout_pause)
    rollout_app.command("resume")(rollout_resume)
    rollout_app.command("retry")(rollout_retry)
    rollout_app.command("undo")(rollout_undo)
    rollout_app.command("history")(rollout_history)
