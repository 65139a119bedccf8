"""``servectl validate`` and ``servectl crds generate``: resource files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from servectl.cli.console import err, fail, out

crds_app = typer.Typer(help="CustomResourceDefinitions for ModelService and ScalingPolicy.")


# --------------------------------------------------------------------------- specs


def validate(
    files: Annotated[list[Path], typer.Argument(help="ModelService / ScalingPolicy YAML files.")],
) -> None:
    """Check ModelService and ScalingPolicy files; every problem names its field and fix.

    A CEL policy must compile and work on a plain cycle (every signal measured)."""
    from servectl import specfile

    bad = 0
    for path in files:
        try:
            docs = specfile.load_file(path, probe_policies=True)
        except (OSError, ValueError) as exc:
            bad += 1
            problems = specfile.error_text(path, exc)
            err.print(f"[red]{escape(str(path))}: invalid[/]\n{escape(problems)}", highlight=False)
            continue
        kinds = ", ".join(f"{type(d).__name__} {d.metadata.name}" for d in docs)
        out.print(f"{path}: ok ({kinds})", highlight=False, markup=False)
    if bad:
        raise typer.Exit(1)


@crds_app.command("generate")
def crds_generate(
    out_dir: Annotated[Path, typer.Option("--out", help="Directory to write into.")] = Path(
        "deploy/crds"
    ),
) -> None:
    """Regenerate the CRD YAML from the resource model (commit the result)."""
    from servectl import specfile

    try:
        written = specfile.write_crds(out_dir)
    except OSError as exc:
        raise fail(f"--out {out_dir}: cannot write there ({exc.strerror or exc})", 1) from exc
    for path in written:
        out.print(f"wrote {path}", highlight=False, markup=False)
