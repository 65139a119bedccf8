"""Hypothesis profiles: CI runs derandomized (the same examples every run, so a red CI
is a real regression, not a new random find); set HYPOTHESIS_PROFILE=explore locally to
search harder with fresh randomness, or HYPOTHESIS_PROFILE=fuzz to fuzz for long."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
# The fuzz harness (tests/fuzz, docs/fuzzing.md): CI runs it briefly under "ci" (fixed seed,
# 100 examples a target); `HYPOTHESIS_PROFILE=fuzz pytest tests/fuzz` searches for longer.
settings.register_profile(
    "fuzz", derandomize=False, max_examples=20_000, deadline=None, print_blob=True
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
