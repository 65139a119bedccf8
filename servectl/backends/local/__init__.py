"""The local runtime: servectl on one machine, without Kubernetes (docs/local-runtime.md).

- :mod:`~servectl.backends.local.store`: the SQLite state store (specs, status, loop state,
  events, the command queue, rollout history, the runtime's per-service records);
- :mod:`~servectl.backends.local.supervisor`: each replica as a model-server process, in its
  own cgroup (:mod:`~servectl.backends.local.cgroups`);
- :mod:`~servectl.backends.local.router`: HAProxy (its pure half: the routes and their
  plan in :mod:`~servectl.backends.local.router_model`, the config and maps in
  :mod:`~servectl.backends.local.haproxy_config`, the runtime state and commands in
  :mod:`~servectl.backends.local.haproxy_state`);
- :mod:`~servectl.backends.local.backend`: ``LocalBackend``, one service as a
  :class:`servectl.controller.backend.Backend`;
- :mod:`~servectl.backends.local.runtime`: the controller (every piece, and the 1 s loop);
- :mod:`~servectl.backends.local.client`: what the CLI does to the store.

``servectl demo`` runs on it from servectl.demo.local.

It never imports another backend (import-linter: "Backends are independent").
"""
