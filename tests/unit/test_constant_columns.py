"""Columns with one value in every row are named in the Parquet footer and read as constants
(load/constant_columns.py): the table read back equals the file's own rows, the file keeps every value for other
readers, and a footer that no longer describes its file is ignored."""

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from kernelscope.contracts.tables import conform_kernels, conform_ops
from kernelscope.load import rundir
from kernelscope.load.constant_columns import CONSTANTS_KEY, ROWS_KEY

TRACE = Path(__file__).parents[1] / "data" / "kineto" / "h200-llama-3-8b-p16-n3.trace.json.gz"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("constants") / "run"
    done = subprocess.run([sys.executable, "-m", "kernelscope", "-q", "import", str(TRACE), "--out", str(out),
                           "--no-report"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return out


def _one_value_columns(path: Path) -> dict[str, object]:
    """Independently of kernelscope: every column but the first whose values (Python objects) are all None, or
    all one finite number."""
    rows = pl.read_parquet(path).to_dict(as_series=False)
    found: dict[str, object] = {}
    for column, values in list(rows.items())[1:]:
        distinct = set(values)
        if distinct == {None}:
            found[column] = None
        elif len(distinct) == 1 and isinstance(values[0], int | float) and not isinstance(values[0], bool):
            found[column] = values[0]
    return found


@pytest.mark.parametrize("table", ["kernels.parquet", "ops.parquet"])
def test_the_footer_names_exactly_the_one_value_columns(run_dir, table):
    path = run_dir / table
    metadata = pl.read_parquet_metadata(path)
    expected = _one_value_columns(path)
    assert expected  # a one-GPU trace: rank, device and the collective columns at least
    assert json.loads(metadata[CONSTANTS_KEY]) == expected
    assert int(metadata[ROWS_KEY]) == pl.read_parquet(path).height


def test_a_run_read_back_equals_its_files(run_dir):
    run = rundir.read_run(run_dir)
    assert_frame_equal(run.kernels, conform_kernels(pl.read_parquet(run_dir / "kernels.parquet")))
    assert_frame_equal(run.ops, conform_ops(pl.read_parquet(run_dir / "ops.parquet")))
    # Constants behave as columns: filtered, grouped and turned into values like the others.
    constant = next(iter(_one_value_columns(run_dir / "kernels.parquet")))
    half = run.kernels.filter(pl.col("dur_ns") > run.kernels["dur_ns"].median())
    assert half[constant].to_list() == pl.read_parquet(run_dir / "kernels.parquet").filter(
        pl.col("dur_ns") > pl.col("dur_ns").median())[constant].to_list()


def test_a_footer_that_no_longer_describes_its_file_is_ignored(run_dir, tmp_path):
    """Another tool kept the footer but changed the rows: the file is read whole, as written."""
    path = tmp_path / "kernels.parquet"
    original = pl.read_parquet(run_dir / "kernels.parquet")
    metadata = pl.read_parquet_metadata(run_dir / "kernels.parquet")
    constant = next(c for c, v in json.loads(metadata[CONSTANTS_KEY]).items() if v is not None)
    changed = original.head(original.height - 1).with_columns(pl.lit(7, dtype=original[constant].dtype).alias(constant))
    changed.write_parquet(path, metadata={CONSTANTS_KEY: metadata[CONSTANTS_KEY], ROWS_KEY: metadata[ROWS_KEY]})
    assert rundir._read_table(path)[constant].to_list() == [7] * changed.height


def test_small_and_unusual_tables_round_trip(tmp_path):
    tables = {
        "one_row": pl.DataFrame({"a": [1], "b": [None]}, schema={"a": pl.Int64, "b": pl.Float64}),
        "empty": pl.DataFrame(schema={"a": pl.Int64, "b": pl.String}),
        "all_but_first_constant": pl.DataFrame({"a": [1, 2, 3], "b": [5.5, 5.5, 5.5], "c": [None, None, None]},
                                               schema={"a": pl.Int64, "b": pl.Float64, "c": pl.String}),
        "nan_and_mixed": pl.DataFrame({"a": [1, 2], "b": [float("nan")] * 2, "c": [3, None], "d": ["x", "x"]}),
    }
    for name, table in tables.items():
        path = tmp_path / f"{name}.parquet"
        rundir._write_table(table, path)
        assert_frame_equal(rundir._read_table(path), table, check_exact=True)
        assert_frame_equal(pl.read_parquet(path), table)  # every value is in the file itself
    skipped = json.loads(pl.read_parquet_metadata(tmp_path / "nan_and_mixed.parquet").get(CONSTANTS_KEY, "{}"))
    assert skipped == {}  # NaN, a value beside a null and text are read as written


@pytest.mark.parametrize("footer", ['["rank"]', '{"kernel_id": 1}', '{"no_such_column": 1}', '{"name": 3}',
                                    '{"rank": "x"}', '{"rank": NaN}', '{"rank": [1]}', "not json"])
def test_a_footer_not_as_kernelscope_writes_it_is_ignored(run_dir, tmp_path, footer):
    """A hand-made or damaged footer (wrong shape, the first column, an unknown column, a value of another kind or
    not finite) never changes what is read: the file is read whole."""
    original = pl.read_parquet(run_dir / "kernels.parquet")
    path = tmp_path / "kernels.parquet"
    original.write_parquet(path, metadata={CONSTANTS_KEY: footer, ROWS_KEY: str(original.height)})
    assert_frame_equal(rundir._read_table(path), original)
