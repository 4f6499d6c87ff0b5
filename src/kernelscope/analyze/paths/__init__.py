"""The critical path: the dependency graph of a run, every step's critical path walked back through it, its tables, and its re-timing with work made faster."""
