"""The Kubernetes backend: ModelServices in a cluster (docs/kubernetes.md).

- ``kube``: JSON requests over the official client (server-side apply, counted);
- ``cache``: list + watch caches, so a cycle reads no API;
- ``objects``: the Deployments, Services, ConfigMaps and routes a ModelService runs as (pure);
- ``backend``: one ModelService as a ``controller.Backend``;
- ``leader``: leader election on a Lease;
- ``controller``: the loop over every ModelService, probes and metrics.
"""
