"""``servectl demo``: one story, told on the local runtime or on a real Kubernetes node.

- :mod:`~servectl.demo.story`: the story (a load step x5, a good canary promoted, a failing
  one rolled back, a scale-down) driven by Locust against a :class:`~servectl.demo.story.Target`,
  and what it measured. It imports no runtime.
- :mod:`~servectl.demo.report`: the Markdown report and the PNG timeline.
- :mod:`~servectl.demo.local`: the local runtime as the target (``servectl demo``).
- :mod:`~servectl.demo.kubernetes`: the real one-node cluster of servectl.testing.k8s as the
  target, servectl installed by its Helm chart, Traefik as the Gateway
  (``servectl demo --kubernetes``).
"""
