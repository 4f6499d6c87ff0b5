"""Capture: record a workload. The only place that drives profilers."""
