"""Many run directories as one SQL dataset: an in-memory DuckDB database whose views read the runs' Parquet files
where they are (nothing is copied), each row tagged with its run's id and metadata (docs/dataset.md).

Tables and views: `runs` (one row per run: run.json and summary.json figures, run_rows.py; kept in the dataset
cache while a run's files are unchanged, dataset_cache.py), `kernels`, `ops`, `ncu` (the runs'
tables, conformed to the run format's columns, so runs of older versions and of every source line up), `steps`
(device time per run, rank, phase, generation and step, from kernels), `gemm_shapes` (per run, rank, phase and GEMM
problem, from kernels), `critical_path` (every segment of every step's critical path: critical_path.parquet). Every
data view starts with the run's
columns RUN_COLUMNS; the tables' own `device` column (a CUDA device index) is there as `device_index`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kernelscope.errors import UserError
from kernelscope.load.budget import memory_budget
from kernelscope.load.run_catalog import RunFiles, catalog
from kernelscope.load.run_rows import RUN_COLUMNS, RUNS_SCHEMA
from kernelscope.load.table_schemas import VIEW_DEFAULTS, VIEW_SCHEMAS
from kernelscope.load.table_union import file_columns, literal_pattern, union_sql

if TYPE_CHECKING:
    import duckdb

    from kernelscope.load.dataset_cache import DatasetCache, Identity

# A table column named like a run column is renamed.
RENAMED = {"device": "device_index"}
VIEWS = ("runs", "kernels", "ops", "ncu", "steps", "gemm_shapes", "critical_path")


@dataclass
class Dataset:
    """The runs found and the connection whose views read them."""

    con: duckdb.DuckDBPyConnection
    runs: list[RunFiles]

    def query(self, sql: str) -> duckdb.DuckDBPyRelation:
        """The result of `sql`, one SELECT over the views; anything else, or a bad statement, is one UserError
        line."""
        import duckdb

        try:
            relation = self.con.sql(_one_select(sql))
        except duckdb.Error as exc:
            raise UserError(f"query: {_first_line(exc)}") from None
        if relation is None:
            raise UserError("query: the statement returns no rows (give a SELECT)")
        return relation


def _one_select(sql: str) -> str:
    """`sql` if it is one SELECT statement (WITH …, FROM …, DESCRIBE … included); the views only read the runs,
    and nothing else may run: no COPY, ATTACH, EXPORT, SET, INSTALL, PRAGMA or CREATE."""
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise UserError(f"query: {_first_line(exc)}") from None
    if len(statements) != 1:
        raise UserError(f"query: give exactly one SQL statement (got {len(statements)})")
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        raise UserError(f"query: only a SELECT is run over runs (got {kind.name})")
    return sql


def fetch_rows(relation: duckdb.DuckDBPyRelation) -> list[tuple[Any, ...]]:
    """The relation's rows; errors met only while running (a file unreadable, a cast failing) as one line."""
    import duckdb

    try:
        return relation.fetchall()
    except duckdb.Error as exc:
        raise UserError(f"query: {_first_line(exc)}") from None


def write_parquet(relation: duckdb.DuckDBPyRelation, path: str) -> None:
    """The relation's rows as a Parquet file, written by Polars: the connection itself writes no file."""
    import duckdb
    import polars as pl

    try:
        frame = pl.DataFrame(relation)  # over the Arrow stream DuckDB hands out
    except duckdb.Error as exc:
        raise UserError(f"query: {_first_line(exc)}") from None
    except pl.exceptions.PolarsError as exc:  # e.g. two result columns of one name
        raise UserError(f"query: the result cannot be written as Parquet ({_first_line(exc)})") from None
    frame.write_parquet(path)


def open_dataset(locations: list[str]) -> Dataset:
    """The runs under `locations` (run directories, folders of runs, globs, remote locations) as a Dataset."""
    import duckdb

    # No spilling to disk: a query either fits the memory budget or ends in one line.
    con = duckdb.connect(":memory:", config={"temp_directory": "",
                                              "memory_limit": f"{memory_budget() // (1 << 20)}MB"})
    found = catalog(locations, con)
    runs = found.runs
    try:
        _create_runs(con, runs)
        files = [f for r in runs for f in (r.kernels, r.ops, r.ncu, r.critical_path) if f is not None]
        numbered: list[tuple[int, RunFiles]] = []  # every table file's number, and its run
        for view, types in VIEW_SCHEMAS.items():  # kernels, ops, ncu, critical_path: the runs' files of that name
            of_run = {getattr(r, view): r for r in runs if getattr(r, view) is not None}
            order = _create_table_view(con, view, list(of_run), types, found.cache, found.identities, len(numbered))
            numbered += [(len(numbered) + i, of_run[f]) for i, f in enumerate(order)]
        _number_files(con, numbered)
        if found.cache is not None:
            found.cache.save()
        _create_steps(con)
        _create_gemm_shapes(con)
        _lock_down(con, files)
    except duckdb.Error as exc:
        raise UserError(f"cannot read the runs' tables ({_first_line(exc)})") from None
    return Dataset(con=con, runs=runs)


def _lock_down(con: duckdb.DuckDBPyConnection, files: list[str]) -> None:
    """From now on the connection reads the runs' table files and nothing else: no other file, no network, no
    extension to install or load, and no setting can be changed back (the Python API hands out this
    connection too)."""
    if any("://" in f for f in files):  # a remote run's files are read through httpfs: loaded while we may
        con.execute("load httpfs")
    con.execute("set autoinstall_known_extensions = false")
    con.execute("set autoload_known_extensions = false")
    # A file's own path, and the pattern naming it alone, as the views give it to DuckDB (table_union.py).
    allowed = sorted({*files, *map(literal_pattern, files)})
    con.execute(f"set allowed_paths = {_sql_list(allowed)}")
    con.execute("set enable_external_access = false")
    con.execute("set lock_configuration = true")


def _create_runs(con: duckdb.DuckDBPyConnection, runs: list[RunFiles]) -> None:
    columns = ", ".join(f"{_ident(name)} {kind}" for name, kind in RUNS_SCHEMA.items())
    con.execute(f"create table runs ({columns})")
    _insert(con, "runs", list(RUNS_SCHEMA.values()), [(r.run_id, *r.row) for r in runs])
    run_cols = ", ".join(f"{_ident(name)} {RUNS_SCHEMA[name]}" for name in RUN_COLUMNS)
    con.execute(f"create table _file_runs (file_no INTEGER, {run_cols})")


def _number_files(con: duckdb.DuckDBPyConnection, numbered: list[tuple[int, RunFiles]]) -> None:
    """_file_runs: each table file's number with its run's columns, which the views join to every row by the
    number (an integer join: a join on file names cost more than reading the rows)."""
    places = [list(RUNS_SCHEMA).index(name) - 1 for name in RUN_COLUMNS[1:]]  # in a run's row, after run_id
    rows = [(number, run.run_id, *(run.row[i] for i in places)) for number, run in numbered]
    _insert(con, "_file_runs", ["INTEGER", *(RUNS_SCHEMA[name] for name in RUN_COLUMNS)], rows)


def _insert(con: duckdb.DuckDBPyConnection, table: str, types: list[str], rows: list[tuple[Any, ...]]) -> None:
    """`rows` into `table` (columns of `types`), each column one list parameter (executemany runs one statement
    per row, and a multi-row VALUES binds every value: a thousand runs took seconds)."""
    if not rows:
        return
    columns = [list(column) for column in zip(*rows, strict=True)]
    unnested = ", ".join(f"unnest(${i + 1}::{kind}[])" for i, kind in enumerate(types))
    con.execute(f"insert into {table} select {unnested}", columns)


def _create_table_view(con: duckdb.DuckDBPyConnection, view: str, files: list[str], types: dict[str, str],
                       cache: DatasetCache | None, identities: dict[str, Identity | None], first: int) -> list[str]:
    """`view`: the run columns, then the schema's columns (`types`: name → DuckDB type; missing ones null or their
    default), then the files' other columns. The files in the order of their numbers, `first` the first's."""
    run_cols = ", ".join(f"r.{_ident(c)}" for c in RUN_COLUMNS)
    if not files:  # no run has this table (ncu): the run columns and the schema's, no rows
        typed = [f"NULL::{kind} as {_ident(_renamed(n))}" for n, kind in types.items()]
        con.execute(f"create view {view} as select {', '.join([run_cols, *typed])} from runs r where false")
        return []
    source, names, order = union_sql(file_columns(con, files, cache, identities), types, VIEW_DEFAULTS,
                                     frozenset(), first)
    selected = ", ".join(f"t.{_ident(n)} as {_ident(_renamed(n))}" for n in names[:-1])
    con.execute(f"create view {view} as select {run_cols}, {selected} from ({source}) t "
                f"join _file_runs r on t.{_ident(names[-1])} = r.file_no")
    return order


def _create_steps(con: duckdb.DuckDBPyConnection) -> None:
    keys = ", ".join([*RUN_COLUMNS, "rank", "phase", "generation", "step"])
    con.execute(f"create view steps as select {keys}, sum(instances)::BIGINT as kernel_count, "
                f"sum(dur_ns)::BIGINT as device_time_ns, min(start_ns) as first_start_ns, "
                f"max(start_ns + dur_ns) as last_end_ns from kernels group by {keys}")


def _create_gemm_shapes(con: duckdb.DuckDBPyConnection) -> None:
    """One row per run, rank, phase and GEMM problem (M, N, K, gemm_batch, dtypes, layout, module with its layer numbers
    folded to `*`), as the report's GEMM shape table (analyze/costs/gemm_table.py) without the device's roofs."""
    keys = ", ".join([*RUN_COLUMNS, "rank", "phase"])
    module = r"regexp_replace(module, '(^|\.)\d+(\.|$)', '\1*\2', 'g')"
    con.execute(f"create view gemm_shapes as select {keys}, gemm_m as m, gemm_n as n, gemm_k as k, "
                f"gemm_batch, gemm_dtypes as dtypes, gemm_layout as layout, {module} as module, "
                f"sum(instances)::BIGINT as launches, sum(dur_ns)::BIGINT as total_ns, sum(flops) as flops, "
                f"sum(bytes_moved) as bytes_moved, sum(flops) / (sum(dur_ns) / 1e9) / 1e12 as achieved_tflops, "
                f"mode(cost_source) as cost_source from kernels where gemm_m is not null "
                f"group by {keys}, gemm_m, gemm_n, gemm_k, gemm_batch, gemm_dtypes, gemm_layout, {module}")


def _renamed(name: str) -> str:
    if name in RENAMED:
        return RENAMED[name]
    return f"table_{name}" if name in RUN_COLUMNS else name


def _ident(name: str) -> str:
    """A column name as a quoted SQL identifier: a name read from a run's file is data, never SQL."""
    return '"' + name.replace('"', '""') + '"'


def _sql_list(items: list[str]) -> str:
    return "[" + ", ".join("'" + item.replace("'", "''") + "'" for item in items) + "]"


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__
