"""Workloads: build and run the model, and mark phases, steps and modules. Knows nothing of analysis."""
