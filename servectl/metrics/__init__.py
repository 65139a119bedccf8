"""Metrics: per-revision signals from Prometheus, and the local runtime's exporters."""
