"""The ``servectl`` command line: registers the command modules (``*_cmd``) and runs them.

Consoles, output formats and errors live in ``console``; pure row formatting in ``format``.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.markup import escape

from servectl import __version__
from servectl.cli import (
    bench_cmd,
    demo_cmd,
    deploy_cmd,
    events_cmd,
    get_cmd,
    lifecycle_cmd,
    local_cmd,
    rollout_verbs,
    simulate_cmd,
    spec_cmd,
    target,
)
from servectl.cli.console import err, out
from servectl.cli.exporter_cmd import exporter_app
from servectl.cli.loadtest_cmd import loadtest
from servectl.cli.metrics_cmd import metrics_app
from servectl.cli.model_cmd import model_app
from servectl.cli.policy_cmd import policy_app
from servectl.cli.rollout_cmd import rollout_app
from servectl.cli.spec_cmd import crds_app

app = typer.Typer(
    name="servectl",
    help=(
        "Serve TensorFlow models on Kubernetes with one authority over replicas and traffic.\n\n"
        "Start with `servectl demo` (the local runtime: deploy, load, autoscale, canary, "
        "rollback, in about four minutes), or `servectl up` and `servectl deploy NAME "
        "--model-path DIR` to serve your own model on this machine. `servectl simulate` "
        "compares the autoscaler with Kubernetes HPA and Knative KPA."
    ),
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)
app.add_typer(policy_app, name="policy")
app.add_typer(rollout_app, name="rollout")
app.add_typer(model_app, name="model")
app.add_typer(metrics_app, name="metrics")
app.add_typer(exporter_app, name="exporter")
app.add_typer(crds_app, name="crds")
# Commands in the order a new user meets them; groups follow them in --help.
app.command()(demo_cmd.demo)
app.command()(local_cmd.up)
# The service verbs, one module per verb group, each written once for both runtimes.
app.command()(deploy_cmd.deploy)
app.command()(get_cmd.get)
app.command()(get_cmd.describe)
app.command()(get_cmd.explain)
app.command()(lifecycle_cmd.scale)
app.command()(lifecycle_cmd.delete)
app.command()(events_cmd.events)
app.command()(events_cmd.logs)
app.command()(get_cmd.top)
rollout_verbs.register(rollout_app)
app.command()(local_cmd.status)
app.command()(local_cmd.down)
app.command()(local_cmd.doctor)
app.command()(local_cmd.controller)
app.command()(simulate_cmd.simulate)
app.command()(bench_cmd.bench)
app.command()(spec_cmd.validate)
app.command("loadtest")(loadtest)


@app.callback(invoke_without_command=True)
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            help="Show what TensorFlow prints as it starts, here and (with `up`) in the "
            "controller's model servers; the same as SERVECTL_VERBOSE=1.",
        ),
    ] = False,
    context: target.ContextOption = None,
    kubeconfig: target.KubeconfigOption = None,
) -> None:
    # --context and --kubeconfig go before the verb (`servectl --context prod get -n ml`,
    # as kubectl takes them) or after it; the verb's own win.
    target.set_global(context, kubeconfig)
    if verbose:
        import os

        from servectl.modelserver import tf_startup  # imports no TensorFlow

        os.environ[tf_startup.VERBOSE_ENV] = "1"  # inherited by the processes started
    if version:
        out.print(f"servectl {__version__}")
        raise typer.Exit()


# --------------------------------------------------------------------------- model server


@app.command(
    "model-server",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def model_server(ctx: typer.Context) -> None:
    """A TF-Serving-compatible model server (TF Serving's flags; see docs/modelserver.md)."""
    from servectl.modelserver.server import main as server_main  # TensorFlow loads on use

    raise typer.Exit(server_main(list(ctx.args)))


# Exit status for an unexpected error (a bug), as sysexits' EX_SOFTWARE.
EXIT_INTERNAL = 70


def main() -> None:
    """The console script: bad input gets a message from its command; what still escapes
    is an environment error (one line, exit 1) or a bug (one line and how to see the
    traceback, exit 70), never a traceback on a user's terminal."""
    import os

    try:
        app()
    except OSError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        sys.exit(1)
    except Exception as exc:
        if os.environ.get("SERVECTL_DEBUG"):
            raise
        err.print(
            f"[bold red]internal error (a bug in servectl):[/] {escape(type(exc).__name__)}: "
            f"{escape(str(exc))}\nrun it again with SERVECTL_DEBUG=1 for the traceback, and "
            "please report it",
            highlight=False,
        )
        sys.exit(EXIT_INTERNAL)


if __name__ == "__main__":
    main()
