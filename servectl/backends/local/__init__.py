"""The local runtime (DESIGN §7): ``servectl up`` on one machine.

It will hold the state store (:mod:`servectl.backends.local.store`, SQLite: specs, status,
loop state, events, the command queue and rollout history), a process supervisor running
each replica as a model server process in its own cgroup
(:mod:`servectl.backends.local.supervisor`, on :mod:`servectl.backends.local.cgroups`),
HAProxy as the router, and the ``LocalBackend`` that implements
:class:`servectl.controller.backend.Backend` on them. The store, the cgroups and the
supervisor exist so far.

It never imports another backend (import-linter: "Backends are independent").
"""
