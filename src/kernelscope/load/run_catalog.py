"""The runs of a dataset, each with its row of the `runs` view and its table files. A local run whose run.json,
summary.json and kernels table are the files its cached row was made from (one stat each) is taken from the
dataset cache; any other is read through the typed contracts (run.json as RunInfo, summary.json as Summary), so a
broken run is named in one line before any query runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelscope.contracts.run_files import KERNELS, NCU, OPS, RUN_JSON, SUMMARY_JSON
from kernelscope.load.dataset_cache import DatasetCache, Identity, identity
from kernelscope.load.run_locations import CRITICAL_PATH, TABLES, Located, join, locate, run_ids
from kernelscope.load.run_rows import describe

if TYPE_CHECKING:
    import duckdb

    from kernelscope.contracts.run_info import RunInfo
    from kernelscope.contracts.summary import Summary


@dataclass(frozen=True)
class RunFiles:
    """One run of a dataset: its id (unique in the dataset), where it is, its row of `runs` after the id
    (run_rows.describe), and its table files (absolute paths or URLs, as DuckDB reads them; None where the run
    does not hold the table: records kept without their tables, such as benchmark results, still have run.json and
    summary.json). `info` and `summary` are run.json and summary.json as typed records, read on first use where
    the row came from the cache."""

    run_id: str
    directory: str
    row: tuple[Any, ...]
    kernels: str | None
    ops: str | None
    ncu: str | None
    critical_path: str | None = None
    records: tuple[RunInfo, Summary | None] | None = field(default=None, repr=False, compare=False)

    @cached_property
    def info(self) -> RunInfo:
        return self._read()[0]

    @cached_property
    def summary(self) -> Summary | None:
        return self._read()[1]

    def _read(self) -> tuple[RunInfo, Summary | None]:
        return self.records if self.records is not None else read_records(self.directory)


@dataclass
class Catalog:
    """The runs found, the identity each local table file had when found, and the cache to keep what is learned
    (None: no local runs, or caching off)."""

    runs: list[RunFiles]
    identities: dict[str, Identity | None]
    cache: DatasetCache | None


def find_runs(locations: list[str], con: duckdb.DuckDBPyConnection | None = None) -> list[RunFiles]:
    """Every run under `locations`, in the order given (runs of one location sorted by path), each once."""
    found = catalog(locations, con)
    if found.cache is not None:
        found.cache.save()
    return found.runs


def catalog(locations: list[str], con: duckdb.DuckDBPyConnection | None = None) -> Catalog:
    """The runs under `locations` (see find_runs), the cache that gave or now holds their rows, unsaved."""
    located = locate(locations, con)
    local = [run.directory for run in located if run.remote is None]
    # One cache per set of folders holding runs: a run added to a folder reads that run alone.
    cache = DatasetCache("\0".join(sorted({d.rstrip("/").rsplit("/", 1)[0] for d in local}))) if local else None
    runs: list[RunFiles] = []
    identities: dict[str, Identity | None] = {}
    for run_id, run in zip(run_ids([r.directory for r in located]), located, strict=True):
        runs.append(_remote(run_id, run) if run.remote is not None else _local(run_id, run, cache, identities))
    if cache is not None:
        cache.forget_gone(set(local), set(identities))
    return Catalog(runs=runs, identities=identities, cache=cache)


def _local(run_id: str, run: Located, cache: DatasetCache | None,
           identities: dict[str, Identity | None]) -> RunFiles:
    directory = run.directory
    found = {name: identity(join(directory, name)) for name in (RUN_JSON, SUMMARY_JSON, *TABLES)}
    tables = {name: join(directory, name) if found[name] is not None else None for name in TABLES}
    identities.update({tables[name]: found[name] for name in TABLES if tables[name] is not None})
    # The row is made from run.json, summary.json and whether the kernels table is there.
    key = [found[RUN_JSON], found[SUMMARY_JSON], found[KERNELS] is not None]
    row = cache.row(directory, key) if cache is not None else None
    records = None
    if row is None:
        records = read_records(directory)
        row = describe(directory, *records, tables[KERNELS] is not None)
        if cache is not None:
            cache.put_row(directory, key, row)
    return RunFiles(run_id=run_id, directory=directory, row=row, kernels=tables[KERNELS], ops=tables[OPS],
                    ncu=tables[NCU], critical_path=tables[CRITICAL_PATH], records=records)


def _remote(run_id: str, run: Located) -> RunFiles:
    remote = run.remote
    tables = {name: join(run.directory, name) if name in remote.tables else None for name in TABLES}
    row = describe(run.directory, remote.info, remote.summary, tables[KERNELS] is not None)
    return RunFiles(run_id=run_id, directory=run.directory, row=row, kernels=tables[KERNELS], ops=tables[OPS],
                    ncu=tables[NCU], critical_path=tables[CRITICAL_PATH], records=(remote.info, remote.summary))


def read_records(directory: str) -> tuple[RunInfo, Summary | None]:
    """A local run's run.json and summary.json (None where it has none) as typed records; a broken one is one
    UserError naming the file."""
    from kernelscope.load import rundir

    path = Path(directory)
    info = rundir.read_run_info(path)
    return info, rundir.read_summary(path) if (path / SUMMARY_JSON).is_file() else None
