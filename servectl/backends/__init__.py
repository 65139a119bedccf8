"""Where the controller loop acts: each backend implements
:class:`servectl.controller.backend.Backend` for one ModelService.

- ``sim``: the simulated world (``servectl simulate``, ``bench``, scenario tests);
- ``local`` and ``kubernetes``: the local runtime and the cluster (later issues).

Backends never import each other (import-linter enforces it).
"""
