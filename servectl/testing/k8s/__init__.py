"""A real Kubernetes control plane on loopback, for tests: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, and kwok playing the kubelets of fake nodes.

The binaries: etcd from Debian (``apt-get install etcd-server``); the others built once by
``bash scripts/k8s-testbin`` into a cache directory (`find_binaries` finds it). Every port
is picked at run time, every process runs in its own session with its output in
``root/<name>.log``, and `ControlPlane.stop` (also run at interpreter exit) ends them all.

What kwok does with the pods on its nodes (the Stage documents are `KWOK_STAGES`, written
to ``root/kwok.yaml``):

- a pod scheduled onto a fake node is ``Running`` at once, with a pod IP from its node's
  ``spec.podCIDR`` (10.244.<i>.0/24), its containers started but not ready;
- it turns ``Ready`` `READY_DELAY_ANNOTATION` after that (a Go duration, ``"3s"`` or
  ``"500ms"``; 0.5 s when absent; a value that does not parse means at once). kwok stamps
  that moment into the pod's `READY_AT_ANNOTATION` when it starts the pod, so later changes
  to the pod (labels, annotations) do not push readiness back;
- with `FAIL_ANNOTATION` ``"true"`` it stays ``Running`` and never turns ``Ready`` (a
  replica failing its readiness probe); setting it on a ``Ready`` pod makes the pod unready,
  removing it makes the pod ``Ready`` again (at once if its moment has passed);
- a pod with a deletion timestamp and no finalizers is deleted at once (the grace period is
  not waited for);
- nothing else: containers never exit (a Job's pods never complete), nothing restarts.

Nodes (``kwok-node-0``, ...) are ``Ready``, with 32 CPUs, 256Gi of memory, 110 pods and 8
``nvidia.com/gpu`` each, labelled ``type: kwok``, untainted; kwok renews their leases.

Example::

    plane = ControlPlane.start(tmp, bin_dir=find_binaries(), crds=[Path("deploy/crds/x.yaml")])
    try:
        apps = kubernetes.client.AppsV1Api(plane.api_client())
        ...
    finally:
        plane.stop()

Measured on the 2-core development machine (`ControlPlane.timings`): etcd ready in
0.1-0.8 s, kube-apiserver 2.1-2.5 s after it, then the controller manager, the scheduler and
kwok (started together) 0.3-0.6 s later: ~3.5 s in all; servectl's and the Gateway API's
CRDs take 3-4.5 s more. `stop` takes ~1 s. A pod is Running ~0.1-0.7 s after it is created.

Inside: ``_control_plane`` (the processes, the binaries, :class:`ControlPlane`), ``_kwok``
(the stages and annotations) and ``_pki`` (certificates and the kubeconfig); this package
names what is public. Beside it: ``node`` (a real node: containerd, a kubelet and
kube-proxy running real pods, joined to a `ControlPlane` with no kwok, on a bridge of this
machine; ``_host`` records and puts back what it changes on the host) and ``images``
(docker-archive images built offline, imported into the node's containerd).
"""

from servectl.testing.k8s._control_plane import (
    BUILD_HINT,
    COMPONENTS,
    DEFAULT_NODES,
    ETCD_HINT,
    K8S_VERSION,
    KWOK_VERSION,
    ControlPlane,
    ControlPlaneError,
    etcd_binary,
    find_binaries,
    gateway_api_crds,
    wait_for,
)
from servectl.testing.k8s._kwok import (
    DEFAULT_READY_DELAY,
    FAIL_ANNOTATION,
    KWOK_STAGES,
    NODE_ANNOTATION,
    NODE_LABELS,
    NODE_RESOURCES,
    READY_AT_ANNOTATION,
    READY_DELAY_ANNOTATION,
    kwok_config,
)
from servectl.testing.k8s._pki import CONTEXT

__all__ = [
    "BUILD_HINT",
    "COMPONENTS",
    "CONTEXT",
    "DEFAULT_NODES",
    "DEFAULT_READY_DELAY",
    "ETCD_HINT",
    "FAIL_ANNOTATION",
    "K8S_VERSION",
    "KWOK_STAGES",
    "KWOK_VERSION",
    "NODE_ANNOTATION",
    "NODE_LABELS",
    "NODE_RESOURCES",
    "READY_AT_ANNOTATION",
    "READY_DELAY_ANNOTATION",
    "ControlPlane",
    "ControlPlaneError",
    "etcd_binary",
    "find_binaries",
    "gateway_api_crds",
    "kwok_config",
    "wait_for",
]
