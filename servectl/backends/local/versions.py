"""The numbered model versions on disk under a model's base path (TF Serving's layout):
which exist, and which one a spec's ``model.version`` means."""

from __future__ import annotations

import re
from pathlib import Path

_VERSION_DIR = re.compile(r"^[0-9]+$")


class ModelPathError(ValueError):
    """A model path or version that cannot be served; the message names the field."""


def versions_on_disk(base_path: Path) -> list[int]:
    """The numbered version directories under ``base_path`` that hold a SavedModel."""
    try:
        entries = list(base_path.iterdir())
    except FileNotFoundError:
        raise ModelPathError(
            f"spec.model.basePath: {base_path} does not exist; export a SavedModel there "
            "(<basePath>/<version>/saved_model.pb), e.g. `servectl model export-demo DIR`"
        ) from None
    except NotADirectoryError:
        raise ModelPathError(
            f"spec.model.basePath: {base_path} is a file; give the directory that holds the "
            "numbered version directories"
        ) from None
    except OSError as exc:
        raise ModelPathError(f"spec.model.basePath: cannot read {base_path}: {exc}") from None
    return sorted(
        int(e.name)
        for e in entries
        if _VERSION_DIR.match(e.name) and (e / "saved_model.pb").is_file()
    )


def check_version(base_path: Path, version: int | None, *, field: str = "spec.model") -> int:
    """The version to serve (the latest when None); raises :class:`ModelPathError` naming
    ``field`` when it is not on disk."""
    versions = versions_on_disk(base_path)
    if not versions:
        raise ModelPathError(
            f"{field}.basePath: no version under {base_path}: TF Serving needs numbered "
            f"directories with a SavedModel in each ({base_path}/1/saved_model.pb)"
        )
    if version is None:
        return versions[-1]
    if version not in versions:
        have = ", ".join(str(v) for v in versions)
        raise ModelPathError(
            f"{field}.version: version {version} is not under {base_path} (it has {have}); "
            f"export it to {base_path}/{version}/ or pick one of those"
        )
    return version
