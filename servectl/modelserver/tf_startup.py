"""Load TensorFlow without its start-up noise on servectl's output, unless asked for.

As it loads, TensorFlow 2.x writes lines nobody can act on: oneDNN's notice, that no CUDA
driver was found, the CPU instructions it was not built for, and, when its GPU platform
starts on a machine without a GPU, ``failed call to cuInit: ... UNKNOWN ERROR (303)``; two
of its libraries log the first ones, so each comes twice. Every replica's log and the CLI's
stderr (``servectl model export-demo``) started with them. They are written by C++ before
absl's logging is initialised, so ``TF_CPP_MIN_LOG_LEVEL`` does not hold them back (with
TensorFlow 2.21, level 3 drops the cuInit line and nothing else; ``GLOG_minloglevel`` and
``ABSL_MIN_LOG_LEVEL`` nothing).

:func:`import_tensorflow` therefore imports TensorFlow and lists its devices (which starts
the GPU platform, the cuInit line) with file descriptor 2 pointed at a temporary file, then
writes back every line that is not one of :data:`NOISE`: an error of another kind still
shows. It also sets ``TF_CPP_MIN_LOG_LEVEL=1`` (no INFO lines) for what TensorFlow logs
later, unless the environment sets it. With ``SERVECTL_VERBOSE=1`` (``servectl --verbose``,
inherited by the controller and the replicas it starts) nothing is held back.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

VERBOSE_ENV = "SERVECTL_VERBOSE"
"""Set to 1 (``servectl --verbose``) to see everything TensorFlow prints."""

NOISE = (
    re.compile(r"^WARNING: All log messages before absl::InitializeLog\(\) is called"),
    re.compile(r"\] oneDNN custom operations are on\."),
    re.compile(r"\] Could not find cuda drivers on your machine, GPU will not be used\."),
    re.compile(r"\] This TensorFlow binary is optimized to use available CPU instructions"),
    re.compile(r"^To enable the following instructions: .* rebuild TensorFlow"),
    re.compile(r"\] failed call to cuInit: "),
    re.compile(r"\] Unable to register cu(DNN|FFT|BLAS) factory: "),
    re.compile(r"\] TF-TRT Warning: Could not find TensorRT"),
    re.compile(r"\] computation placer already registered\."),
)
"""TensorFlow's start-up lines :func:`import_tensorflow` holds back (matched per line)."""


def verbose() -> bool:
    """Whether the user asked to see TensorFlow's start-up lines."""
    return os.environ.get(VERBOSE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def is_noise(line: str) -> bool:
    return any(pattern.search(line) for pattern in NOISE)


def without_noise(text: str) -> str:
    """``text`` without TensorFlow's start-up lines (the others as they were)."""
    return "".join(line for line in text.splitlines(keepends=True) if not is_noise(line))


@contextlib.contextmanager
def _held_stderr() -> Iterator[None]:
    """File descriptor 2 goes to a temporary file inside; what was written there, less the
    noise, is written to the real one after (also when the body raises)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = without_noise(held.read().decode("utf-8", "replace"))
            if kept:
                os.write(2, kept.encode("utf-8"))


def import_tensorflow() -> Any:
    """``import tensorflow``, its devices listed, with its start-up noise held back unless
    :func:`verbose` (module docstring). Cheap once TensorFlow is loaded."""
    loaded = sys.modules.get("tensorflow")
    if loaded is not None:
        return loaded
    if verbose():
        import tensorflow as tf

        return tf
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    with _held_stderr():
        import tensorflow as tf

        # Starts the platforms now, inside: on a machine without a GPU this is where the
        # cuInit error is logged. Listing devices leaves thread pools configurable.
        tf.config.list_physical_devices()
    return tf
