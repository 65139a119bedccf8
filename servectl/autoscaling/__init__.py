"""Pure autoscaling: snapshots in, replica decisions out; no I/O, no clock reads.

Modules:
    snapshot   the documented input of every policy (and its JSON form)
    decision   the output: replicas, winning signal, reason code
    config     typed autoscaling configuration (what a ModelService spec turns into)
    policy     the Policy protocol, state handling and the registry of policies by name
    windows    aggregation windows (mean, EWMA, max-over-window, histogram quantiles)
    signals    one replica proposal per signal
    rails      the shared safety rails every policy is wrapped in
    engine     servectl's default policy (signals + panic + rails)
    hpa, kpa   exact reference baselines (Kubernetes HPA v2, Knative KPA)
    cel_policy custom CEL policies (a package: compile, activation, results, CompiledPolicy)
    cel_diagnostics  CEL compile diagnostics with line/column, shared with api.conditions
"""
