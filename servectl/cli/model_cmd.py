"""``servectl model ...``: demo SavedModels to serve, in TF Serving's layout."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from servectl.cli import console
from servectl.cli.console import Output, err, fail, out

model_app = typer.Typer(
    help="Models to serve: write demo SavedModels in TF Serving's layout (docs/models.md).",
    no_args_is_help=True,
)


@model_app.command("export-demo")
def export_demo_cmd(
    directory: Annotated[
        Path,
        typer.Argument(
            help="Base directory; each model goes to DIR/<model>/<version>/.", file_okay=False
        ),
    ],
    models: Annotated[
        str, typer.Option(help="Comma-separated models to write: half_plus_two, cost_model.")
    ] = "half_plus_two,cost_model",
    cost: Annotated[
        int,
        typer.Option(
            min=1,
            help="cost_model work per request: chained 128x128 matmuls (50 = about 3 ms on "
            "one core, see docs/models.md).",
        ),
    ] = 50,
    fail_share: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=0.99,
            help="Share of requests cost_model version 3 fails with InvalidArgument.",
        ),
    ] = 0.1,
    slow_factor: Annotated[
        float, typer.Option(min=1.0, help="cost_model version 4's cost, x --cost.")
    ] = 2.0,
    force: Annotated[
        bool, typer.Option("--force", help="Replace version directories that already exist.")
    ] = False,
    output: console.OutputOption = Output.TABLE,
) -> None:
    """Write real SavedModels (with warmup requests) to serve and to roll out.

    \b
    half_plus_two (TF Serving's test model; signatures serving_default, classify_x_to_y,
    regress_x_to_y):
      1  y = 0.5x + 2
      2  y = 0.5x + 3
    cost_model (x float32 [None, 8] -> y; CPU cost per request set by --cost):
      1  stable, cost --cost
      2  good new version: other weights, same cost
      3  failing: fails --fail-share of requests (InvalidArgument)
      4  slow: cost --cost x --slow-factor

    Every version has assets.extra/tf_serving_warmup_requests.

    \b
    Example:
      servectl model export-demo models/ --models cost_model --fail-share 0.2
    """
    from servectl.modelserver import demo

    wanted = [m.strip() for m in models.split(",") if m.strip()]
    try:
        demo.plan(wanted, cost=cost, fail_share=fail_share, slow_factor=slow_factor)
    except demo.DemoExportError as exc:
        raise fail(f"--models/--cost/--fail-share/--slow-factor: {exc}") from exc
    # TensorFlow's C++ start-up chatter (CPU features, CUDA probing) is not for this user.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        written = demo.export_demo(
            directory,
            wanted,
            cost=cost,
            fail_share=fail_share,
            slow_factor=slow_factor,
            force=force,
            progress=lambda line: err.print(f"writing {line}", highlight=False, markup=False),
        )
    except demo.VersionExistsError as exc:
        listed = ", ".join(str(path) for path in exc.paths)
        raise fail(f"{listed} already exist; pass --force to replace them") from exc
    except OSError as exc:
        raise fail(f"{directory}: {exc}", 1) from exc
    console.emit(
        output,
        title=f"SavedModels written under {directory}",
        header=["model", "version", "what it is", "path"],
        rows=[[w.model, str(w.version), w.description, str(w.path)] for w in written],
        records=[
            {
                "model": w.model,
                "version": w.version,
                "description": w.description,
                "path": str(w.path),
            }
            for w in written
        ],
    )
    try:
        config = demo.write_model_config(directory, wanted, force=force)
    except OSError as exc:
        raise fail(f"{directory / demo.CONFIG_FILE}: {exc}", 1) from exc
    config_path = directory / demo.CONFIG_FILE
    if config is None:
        err.print(
            f"kept {config_path} (already there; --force rewrites it)",
            highlight=False,
            markup=False,
        )
    names = ", ".join(n for m in wanted for n in demo.SERVED_NAMES[m])
    (err if output.machine else out).print(
        f"serve them ({names}): servectl model-server "
        f"--model_config_file={config_path} --rest_api_port=8501 --port=8500",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
