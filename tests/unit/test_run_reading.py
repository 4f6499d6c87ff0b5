"""Reading a run for the commands that need only its kernels (report, what-if, compare): the ops table is read
only where the kernels lack costs, its file is checked either way; tables that already conform are kept as
read."""

import shutil
from pathlib import Path

import polars as pl
import pytest

from kernelscope.contracts.tables import KERNEL_COLUMNS, conform_kernels, costs_stored
from kernelscope.errors import UserError
from kernelscope.load import rundir

SEED = Path(__file__).parent.parent / "data" / "runs" / "h200-qwen2-0.5b-ncu"


@pytest.fixture
def run_copy(tmp_path: Path) -> Path:
    return Path(shutil.copytree(SEED, tmp_path / "run"))


def test_a_run_with_stored_costs_is_read_without_its_ops(run_copy):
    stored = pl.read_parquet(run_copy / "kernels.parquet")
    assert stored["flops"].is_not_null().any()  # the seed run stores its costs
    run = rundir.read_run(run_copy, ops=False)
    assert run.ops.height == 0
    assert run.kernels.equals(rundir.read_run(run_copy).kernels)
    assert rundir.read_run(run_copy).ops.height == pl.read_parquet(run_copy / "ops.parquet").height > 0


def test_a_run_without_costs_still_gets_its_ops(run_copy):
    path = run_copy / "kernels.parquet"
    pl.read_parquet(path).drop("flops", "cost_model").write_parquet(path)
    assert not costs_stored(pl.read_parquet(path))
    run = rundir.read_run(run_copy, ops=False)
    assert run.ops.height == pl.read_parquet(run_copy / "ops.parquet").height > 0


@pytest.mark.parametrize("damage", ["missing", "garbage"])
def test_the_unread_ops_file_is_still_checked(run_copy, damage):
    ops = run_copy / "ops.parquet"
    if damage == "missing":
        ops.unlink()
    else:
        ops.write_bytes(b"PAR1 not a table PAR1")
    with pytest.raises(UserError, match="ops.parquet"):
        rundir.read_run(run_copy, ops=False)


def test_costs_stored_reads_flops_or_cost_model():
    base = pl.DataFrame({"name": ["a", "b"], "kind": ["kernel"] * 2, "dur_ns": [1, 2]})
    assert not costs_stored(base)
    assert not costs_stored(base.with_columns(pl.lit(None, dtype=pl.Float64).alias("flops")))
    assert costs_stored(base.with_columns(pl.Series("flops", [None, 3.0])))
    assert costs_stored(base.with_columns(pl.Series("cost_model", ["gemm", None])))
    assert costs_stored(base.clear())  # nothing to cost


def test_a_conforming_table_is_returned_as_it_is():
    kernels = conform_kernels(pl.DataFrame({"name": ["a"], "kind": ["kernel"], "dur_ns": [5]}))
    assert list(kernels.columns[: len(KERNEL_COLUMNS)]) == list(KERNEL_COLUMNS)
    assert conform_kernels(kernels) is kernels
    # a null where the format has a default is filled again, not kept
    nulled = kernels.with_columns(pl.lit(None, dtype=pl.Int64).alias("instances"))
    assert conform_kernels(nulled)["instances"].to_list() == [1]
    # a column of another type is cast
    retyped = kernels.with_columns(pl.col("dur_ns").cast(pl.Int32))
    assert conform_kernels(retyped).schema["dur_ns"] == pl.Int64


def test_written_tables_read_back_in_one_piece(run_copy, tmp_path):
    """A run's tables are written as one row group each: read back, every column is one chunk, and reading the run
    keeps it as read instead of copying the whole table into one (which held it twice)."""
    import duckdb

    run = rundir.read_run(run_copy)
    repeats = 300_000 // run.kernels.height + 1  # past Polars' default row group (512² rows)
    big = run.with_kernels(pl.concat([run.kernels] * repeats).with_columns(pl.int_range(pl.len()).alias("kernel_id")))
    out = tmp_path / "written"
    out.mkdir()
    rundir.write_run(out, big, rundir.read_summary(run_copy))
    for table in ("kernels.parquet", "ops.parquet"):
        groups = duckdb.sql(f"select count(distinct row_group_id) from parquet_metadata('{out / table}')").fetchall()
        assert groups == [(1,)]
    read = pl.read_parquet(out / "kernels.parquet")
    assert read.height == big.kernels.height and set(read.n_chunks("all")) == {1}
    assert conform_kernels(read) is read
