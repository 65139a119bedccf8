"""The local runtime (DESIGN §7): ``servectl up`` on one machine.

It will hold the state store (:mod:`servectl.backends.local.store`, SQLite: specs, status,
loop state, events, the command queue and rollout history), a process supervisor running
each replica as a model server process in its own cgroup, HAProxy as the router, and the
``LocalBackend`` that implements :class:`servectl.controller.backend.Backend` on them.
Built so far: the store, per-replica cgroup limits (:mod:`~servectl.backends.local.cgroups`)
and the router (:mod:`~servectl.backends.local.router`, HAProxy; its pure half, config and
runtime commands, is :mod:`~servectl.backends.local.router_config`).

It never imports another backend (import-linter: "Backends are independent").
"""
