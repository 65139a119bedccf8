"""The simulator: replay a load trace through any policy, fast and deterministically.

Modules (import the module, not its names):
    traces    load traces (mean rps per second), generators and the standard suite
    model     the service model, the request stream and the replica/queue fleet
    pipeline  the Prometheus-like view policies get (scrape, lag, windows, Snapshot)
    runner    ``simulate(trace, policy, ...) -> SimResult``: the loop and the scores
    oracle    the perfect-foresight lower bound on replica-seconds
    bench     every trace x every policy, comparisons, the speed check
    plot      timeline figures (matplotlib, optional)

See docs/simulator.md for the model, its defaults and its approximations.
"""
