"""The names of a run directory's files (the run-directory contract, docs/architecture.md). A module of its own, free
of heavy imports, so that a command can look at a run directory before it loads the libraries that read it."""

RUN_JSON = "run.json"
SUMMARY_JSON = "summary.json"
KERNELS = "kernels.parquet"
OPS = "ops.parquet"
CRITICAL_PATH = "critical_path.parquet"  # every step's critical path (written with the summary)
CALLS = "calls.parquet"  # runtime calls that launched nothing (absent from runs written before it)
TRACE = "trace.json.gz"
TRACES_DIR = "traces"  # runs of several ranks: one trace per rank
NCU = "ncu.parquet"
NCU_METRICS = "ncu_metrics.parquet"
NCU_DIR = "ncu"
REPORT_DIR = "report"
POWER = "power.parquet"  # profile --energy: the energy counter and power samples
ENERGY = "energy.parquet"  # profile --energy: every sampled window (setup, prefill, decode step) and its joules
