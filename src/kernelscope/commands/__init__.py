"""Commands: each runs the stages for one CLI verb (workload → capture → load → analyze → report)."""
