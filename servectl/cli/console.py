"""The CLI's consoles and output formats: tables for people, JSON or YAML for tools.

Every command that prints a table takes ``-o/--output`` in the kubectl style:

- ``table`` (default): the table, fitted to a terminal; in a pipe or a file every row is
  printed whole (a pipe has no width, so nothing is cut to ``98…``);
- ``wide``: the table with the extra columns the command has, never cut;
- ``json``: one JSON object per record, one per line (JSON Lines: ``jq`` reads it as a
  stream, and it is what ``--json`` printed before ``-o`` existed);
- ``yaml``: one YAML document per record, separated by ``---``.

Records in JSON and YAML hold raw numbers (ratios as fractions, seconds as seconds), not
the rounded text of the table. Progress and notes go to stderr, so stdout stays parseable.
"""

from __future__ import annotations

import enum
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console, ConsoleDimensions
from rich.markup import escape
from rich.text import Text

# Width given to rich when stdout is not a terminal: wide enough that no row is cut.
PIPE_WIDTH = 4096


class Output(enum.StrEnum):
    TABLE = "table"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"

    @property
    def machine(self) -> bool:
        """JSON or YAML: only records on stdout, progress on stderr or nowhere."""
        return self in (Output.JSON, Output.YAML)


OUTPUT_HELP = (
    "Output format: table, wide (extra columns), json (one object per line) or yaml "
    "(one document per record)."
)
OutputOption = Annotated[
    Output,
    typer.Option("-o", "--output", help=OUTPUT_HELP, case_sensitive=False),
]
JsonAlias = Annotated[bool, typer.Option("--json", help="Same as -o json.")]


def resolve(output: Output, as_json: bool = False) -> Output:
    """``--json`` is kept as an alias of ``-o json``; both at once must agree."""
    if as_json and output not in (Output.TABLE, Output.JSON):
        raise fail(f"--json and -o {output.value} disagree: give one of them")
    return Output.JSON if as_json else output


class _Console(Console):
    """A rich console that, outside a terminal, prints whole lines and whole tables.

    ``$COLUMNS`` is a terminal's width, not a pipe's: GNU readline exports it (80 when
    it cannot tell) in whatever process loads it, and every child inherits it, so it is
    read only while printing to a terminal. A width set on the console itself holds."""

    def __init__(self, *, stderr: bool = False) -> None:
        super().__init__(stderr=stderr)
        self._width = None  # not $COLUMNS: rich reads it again for a terminal

    @property
    def size(self) -> ConsoleDimensions:
        dims = super().size
        if self.is_terminal or self._width is not None:
            return dims
        return ConsoleDimensions(PIPE_WIDTH, dims.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size


out = _Console()
err = _Console(stderr=True)


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``error: message`` on stderr; raise the returned Exit (2: bad usage).

    The message is text, not markup: a ``[`` in a path or an address prints as it is.
    """
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    return typer.Exit(code)


def output_file(path: Path, option: str) -> Path:
    """Check before a long run that ``path`` can be written (making its folder); the
    error names the option. The file itself is written later."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise fail(f"{option} {path}: cannot make {path.parent} ({exc.strerror or exc})") from exc
    if path.is_dir():
        raise fail(f"{option} {path}: is a directory; give a file name, e.g. {path / 'out.png'}")
    if not os.access(path.parent, os.W_OK):
        raise fail(f"{option} {path}: {path.parent} is not writable")
    return path


def print_table(
    title: str, header: Sequence[str], rows: Iterable[Sequence[str]], *, console: Console = out
) -> None:
    """A titled table, laid out by :func:`servectl.cli.format.table_lines`: numbers
    right-aligned, text left-aligned, a rule under the header, no borders.

    On a terminal, a last column of text (a message) is wrapped to the terminal's width;
    in a pipe or a file every row is printed whole, and no line is padded with spaces.
    No other cell is ever cut or wrapped, as in kubectl: a table wider than the terminal
    runs past its edge rather than print ``98…`` for a number.
    """
    from servectl.cli import format as fmt

    width = console.width if console.is_terminal else None
    lines = fmt.table_lines(header, [list(row) for row in rows], width=width)
    # The title is a line of its own: as a table title it would wrap to the table's width.
    console.print(title, highlight=False, markup=False, style="italic")
    for i, line in enumerate(lines):
        # Cells are text, never markup; soft_wrap: a line wider than the terminal is
        # left to the terminal rather than cut or folded by rich.
        console.print(Text(line, style="bold" if i == 0 else ""), soft_wrap=True)


def _plain(value: Any) -> Any:
    """JSON/YAML-safe values: enums as their value, non-finite floats as null."""
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def print_records(records: Iterable[Mapping[str, Any]], output: Output) -> None:
    """Records as JSON Lines or YAML documents on stdout (plain print: no rich markup)."""
    if output is Output.YAML:
        import yaml

        first = True
        for record in records:
            if not first:
                print("---")
            first = False
            print(yaml.safe_dump(_plain(record), sort_keys=False, allow_unicode=True), end="")
        return
    for record in records:
        print(json.dumps(_plain(record), allow_nan=False))


def emit(
    output: Output,
    *,
    title: str,
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    records: Sequence[Mapping[str, Any]],
    wide_header: Sequence[str] = (),
    wide_rows: Sequence[Sequence[str]] = (),
) -> None:
    """Print one result in the chosen format.

    ``wide_header``/``wide_rows`` are columns appended to the table for ``-o wide``.
    """
    if output.machine:
        print_records(records, output)
        return
    if output is Output.WIDE and wide_header:
        header = [*header, *wide_header]
        rows = [[*row, *extra] for row, extra in zip(rows, wide_rows, strict=True)]
    print_table(title, header, rows)
