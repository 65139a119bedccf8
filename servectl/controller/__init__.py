"""The loop every backend runs: observe -> decide -> act (DESIGN §2).

- :mod:`~servectl.controller.spec`: what the loop needs of a ModelService
  (:class:`ServiceSpec`) and the autoscaling policy it names (:func:`policy_for`);
- :mod:`~servectl.controller.decide`: one cycle's pure decision (autoscaler -> rollout ->
  planner) and the :class:`LoopState` it carries from cycle to cycle;
- :mod:`~servectl.controller.state`: the JSON form of that state (status / local store);
- :mod:`~servectl.controller.backend`: the :class:`Backend` and :class:`Decider` protocols;
- :mod:`~servectl.controller.reconcile`: :func:`reconcile_once` and servectl's decider;
- :mod:`~servectl.controller.status`: an outcome as ``ModelServiceStatus`` and events;
- :mod:`~servectl.controller.observe`: an ``Observed`` from metrics and backend state.

Everything here is pure (no I/O, no clock): time is the ``now`` a backend passes in.
"""
