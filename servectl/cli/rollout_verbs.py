"""``servectl rollout start|status|promote|abort|pause|resume|retry|undo|history``: a
rollout on the local runtime or a cluster, through
:class:`servectl.backends.client.ServiceClient`.

``rollout simulate`` (the rehearsal in the simulator) and the group itself live in
``rollout_cmd``; :func:`register` adds these verbs to it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from servectl.backends.client import CommandOutcome, RolloutRequest, ServiceClient
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


WAIT_S = 30.0
"""How long a rollout command waits, by default, for the controller to carry it out."""
NoWaitOption = Annotated[
    bool,
    typer.Option(
        "--no-wait",
        help="Return once the command is queued; do not wait for the controller to carry "
        "it out or refuse it.",
    ),
]
TimeoutOption = Annotated[
    float,
    typer.Option(
        "--timeout",
        min=0.0,
        help="Seconds to wait for the controller to carry the command out or refuse it "
        "(then it stays queued, and the command exits 1).",
    ),
]


def _queue(
    name: str,
    namespace: str | None,
    state: Path | None,
    op: str,
    version: int | None = None,
    context: str | None = None,
    kubeconfig: Path | None = None,
    *,
    wait: bool = True,
    timeout: float = WAIT_S,
    written: Callable[[], None] | None = None,
) -> None:
    """Write the command (refused at once, exit 2, where the rollout's state already
    refuses it), then wait until the controller carries it out (exit 0) or refuses it
    (exit 2, its reason); exit 1 when it is down or the wait times out: the command
    stays queued. ``written`` runs once it is written, before the wait."""
    from servectl.rollout.machine import Op

    with target.session(state, context, kubeconfig) as client:
        ns = namespace or client.namespace
        request = client.rollout_command(ns, name, Op(op), version)
        warning = client.controller_warning()
        _say_written(name, op, version, request)
        if written is not None:
            written()
        if not wait:
            if warning is not None:
                err.print(warning, highlight=False)
            return
        outcome, waited = _await(client, ns, name, request, timeout)
    what = (
        f"{op} (command {request.id})" if request.id is not None else f"the rollout to v{version}"
    )
    if outcome.state == "done":
        out.print(
            f"modelservice/{name}: {op} carried out"
            + (f": {outcome.message}" if outcome.message else ""),
            highlight=False,
            markup=False,
        )
        return
    if outcome.state == "refused":
        reason = outcome.message.removeprefix(f"{op}: ")
        raise console.fail(f"{op} refused by the controller: {reason}", 2)
    if outcome.state == "stopped":
        raise console.fail(
            f"the controller is not running: {what} stays queued and is carried out when it "
            "starts (`servectl up`)",
            1,
        )
    if outcome.state == "lost":
        raise console.fail(
            f"the controller stopped after taking {what}, before deciding on it; "
            f"`servectl rollout status {name}` shows where the rollout stands",
            1,
        )
    raise console.fail(
        f"the controller has not decided on {what} "
        + (f"within {waited:g} s" if waited is not None else "yet (interrupted)")
        + f": it stays queued; `servectl rollout status {name}` and `servectl events {name}` "
        "follow it",
        1,
    )


def _say_written(name: str, op: str, version: int | None, request: RolloutRequest) -> None:
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


def _await(
    client: ServiceClient, namespace: str, name: str, request: RolloutRequest, timeout: float
) -> tuple[CommandOutcome, float | None]:
    """Poll the command's outcome until it is decided, the controller is known to be
    down, or ``timeout`` s pass; and how long that was (None: interrupted)."""
    began = time.monotonic()
    every = min(client.poll_s / 4, 0.5)  # the local controller ticks every second
    try:
        while True:
            outcome = client.command_outcome(namespace, name, request)
            waited = time.monotonic() - began
            if outcome.state != "waiting" or waited >= timeout:
                return outcome, round(waited, 1)
            time.sleep(min(every, timeout - waited))
    except KeyboardInterrupt:
        return CommandOutcome("waiting"), None


def rollout_start(
    name: NameArg,
    version: Annotated[int, typer.Option("--version", min=0, help="The version to roll out.")],
    namespace: NamespaceOption = None,
    no_wait: NoWaitOption = False,
    timeout: TimeoutOption = WAIT_S,
    state: StateDirOption = None,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Start a rollout to VERSION with the service's strategy (canary, abTest, blueGreen).

    On a cluster, VERSION becomes spec.model.version (as a deploy of it would do)."""
    _queue(
        name,
        namespace,
        state,
        "start",
        version,
        context,
        kubeconfig,
        wait=not no_wait,
        timeout=timeout,
        written=lambda: _print_plan(name, namespace, state, version, context, kubeconfig),
    )


def _print_plan(
    name: str,
    namespace: str | None,
    state: Path | None,
    version: int,
    context: str | None,
    kubeconfig: Path | None,
) -> None:
    """The steps the rollout will follow, one a line with the analysis each runs, from the
    service's spec (servectl.rollout.plan renders them)."""
    from pydantic import ValidationError

    from servectl.api import models
    from servectl.rollout import plan

    with target.session(state, context, kubeconfig) as client:
        document = client.list_services(namespace or client.namespace, name)[0].spec
    try:
        rollout = models.RolloutSpec.model_validate(document.get("spec", {}).get("rollout") or {})
    except ValidationError:
        return  # a spec the controller cannot read: its status and events say why
    for line in plan.describe(rollout, version):
        out.print(line, highlight=False, markup=False)


def rollout_promote(
    name: NameArg,
    full: Annotated[bool, typer.Option("--full", help="Skip the remaining steps.")] = False,
    namespace: NamespaceOption = None,
    no_wait: NoWaitOption = False,
    timeout: TimeoutOption = WAIT_S,
    state: StateDirOption = None,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Go past the current pause or analysis (--full: straight to 100 %)."""
    op = "promote-full" if full else "promote"
    _queue(name, namespace, state, op, None, context, kubeconfig, wait=not no_wait, timeout=timeout)


def _simple(op: str, doc: str) -> Any:
    def command(
        name: NameArg,
        namespace: NamespaceOption = None,
        no_wait: NoWaitOption = False,
        timeout: TimeoutOption = WAIT_S,
        state: StateDirOption = None,
        context: ContextOption = None,
        kubeconfig: KubeconfigOption = None,
    ) -> None:
        _queue(
            name,
            namespace,
            state,
            op,
            None,
            context,
            kubeconfig,
            wait=not no_wait,
            timeout=timeout,
        )

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
