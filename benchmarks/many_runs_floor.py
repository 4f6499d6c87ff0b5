"""What a `kernelscope query` over many runs cannot go below on this machine, each a whole process timed like the
query's calls (benchmarks/many_runs.py --floor): the interpreter alone, the interpreter importing DuckDB, and DuckDB
alone answering the same SQL over the same kernels.parquet files (a view `kernels` over read_parquet with
union_by_name, `instances` defaulted to 1 as the run format does, the file's name standing for its run's id; no run
discovery, no run metadata, no lock-down).
With --copy-floor also the other design: every run's kernels copied once into one consolidated Parquet file (the
copy timed as one process) and the same SQL over that file in fresh processes.
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

BARE = """
import sys, duckdb
files = open(sys.argv[1]).read().split("\\n")
listed = "[" + ", ".join("'" + f.replace("'", "''") + "'" for f in files) + "]"
con = duckdb.connect()
con.execute("create view kernels as select * exclude (filename) replace (coalesce(instances, 1) as instances), "
            "filename as run_id from read_parquet(" + listed + ", union_by_name = true, filename = true)")
rows = con.execute(sys.argv[2]).fetchall()
print("\\n".join(",".join(map(str, row)) for row in rows))
"""
COPY = """
import sys, duckdb
files = open(sys.argv[1]).read().split("\\n")
duckdb.connect().execute("copy (select * exclude (filename) replace (coalesce(instances, 1) as instances), "
                         "filename as run_id from read_parquet(?, union_by_name = true, filename = true)) "
                         "to '" + sys.argv[2].replace("'", "''") + "' (format parquet)", [files])
"""
ONE_FILE = """
import sys, duckdb
con = duckdb.connect()
con.execute("create view kernels as select * from read_parquet('" + sys.argv[1].replace("'", "''") + "')")
rows = con.execute(sys.argv[2]).fetchall()
print("\\n".join(",".join(map(str, row)) for row in rows))
"""


def timed(argv: list[str]) -> dict:
    """One process: wall and CPU seconds (user+system, from the children's rusage), and its output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:3]} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 4), "cpu_s": round(cpu, 4), "output": proc.stdout}


def _medians(calls: list[dict]) -> dict:
    outputs = {c.pop("output") for c in calls}
    return {"calls": calls, "median_wall_s": statistics.median(c["wall_s"] for c in calls),
            "median_cpu_s": statistics.median(c["cpu_s"] for c in calls), "answers": len(outputs),
            "answer": outputs.pop() if len(outputs) == 1 else None}


def floors(runs: Path, work: Path, sql: str, repeats: int, copy: bool) -> dict:
    """The floors above, `repeats` processes each, alternated; with `copy` the consolidated copy too."""
    listing = work / "kernels-files.txt"
    listing.write_text("\n".join(str(p) for p in sorted(runs.glob("*/kernels.parquet"))))
    py = sys.executable
    kinds = {"python": [py, "-c", "pass"], "python_import_duckdb": [py, "-c", "import duckdb"],
             "duckdb_over_the_run_files": [py, "-c", BARE, str(listing), sql]}
    out: dict = {}
    if copy:
        consolidated = work / "consolidated-kernels.parquet"
        consolidated.unlink(missing_ok=True)
        made = timed([py, "-c", COPY, str(listing), str(consolidated)])
        made.pop("output")
        out["consolidated_copy"] = {**made, "bytes": consolidated.stat().st_size,
                                    "source_bytes": sum(Path(f).stat().st_size
                                                        for f in listing.read_text().split("\n"))}
        kinds["duckdb_over_one_consolidated_file"] = [py, "-c", ONE_FILE, str(consolidated), sql]
    calls: dict[str, list] = {name: [] for name in kinds}
    for _ in range(repeats):
        for name, argv in kinds.items():
            calls[name].append(timed(argv))
    out.update({name: _medians(c) for name, c in calls.items()})
    if copy:
        consolidated.unlink(missing_ok=True)
    return out
