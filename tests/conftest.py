"""Hypothesis profiles: CI runs derandomized (the same examples every run, so a red CI
is a real regression, not a new random find); set HYPOTHESIS_PROFILE=explore locally to
search harder with fresh randomness."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
