"""The simulator as a backend: the simulated world (:mod:`servectl.sim.world`) behind
:class:`~servectl.controller.backend.Backend`, driven by ``reconcile_once``.

- :mod:`.backend`: :class:`SimBackend`;
- :mod:`.run`: :func:`simulate` (one revision: ``servectl simulate``, ``bench``) and
  :func:`simulate_rollout` / :func:`run_world` (revisions and user commands);
- :mod:`.peers`: Argo- and Flagger-style controllers, emulated as deciders;
- :mod:`.bench`, :mod:`.rollout_bench`: the benchmark harnesses.
"""

from servectl.backends.sim.backend import SimBackend
from servectl.backends.sim.run import run_world, simulate, simulate_rollout

__all__ = ["SimBackend", "run_world", "simulate", "simulate_rollout"]
