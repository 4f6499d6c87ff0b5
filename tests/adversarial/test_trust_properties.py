"""Property tests (hypothesis) of what kernelscope does with text it does not trust: spreadsheet cells, terminal
text, file names, SQL identifiers read from a run's tables, SQL statements, and outputs named anywhere."""

from __future__ import annotations

import csv
import io
import shutil
import tempfile
from pathlib import Path

import duckdb
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernelscope import inert
from kernelscope.errors import UserError
from kernelscope.filenames import MAX_LENGTH, safe_component
from kernelscope.load import staging
from kernelscope.load.dataset import _one_select, open_dataset
from tests.adversarial.cases import RUN_SEED

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
formula_like = st.builds(lambda quotes, head, rest: "'" * quotes + head + rest, st.integers(0, 3),
                         st.sampled_from(["=", "+", "-", "@", "\t", "\r", "'", "a", " "]), texts)


@SETTINGS
@given(st.one_of(texts, formula_like))
def test_a_csv_cell_is_never_a_formula_and_reads_back_as_the_text(text):
    cell = inert.csv_cell(text)
    assert not cell.startswith(("=", "+", "-", "@", "\t", "\r"))
    assert inert.from_csv_cell(cell) == text
    frame = inert.csv_frame(pl.DataFrame({"name": [text], "n": [-1]}))
    assert frame["name"][0] == cell and frame["n"][0] == -1  # numbers are not text: left as they are
    rows = list(csv.reader(io.StringIO(frame.write_csv())))
    assert rows[1][0] == cell


@SETTINGS
@given(texts)
def test_terminal_text_holds_no_control_character(text):
    shown = inert.terminal(text)
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or c in "\u2028\u2029\u202a\u202b\u202c\u202d\u202e"
                   "\u2066\u2067\u2068\u2069" for c in shown)


@SETTINGS
@given(texts, texts)
def test_a_file_name_from_data_is_one_safe_component_and_distinct_texts_stay_distinct(a, b):
    for text in (a, b):
        name = safe_component(text)
        assert name and "/" not in name and "\0" not in name and name not in (".", "..")
        assert not name.startswith(".") and len(name) <= MAX_LENGTH
    if a != b:
        assert safe_component(a) != safe_component(b)


column_names = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"),
                       min_size=1, max_size=30)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(column_names)
def test_any_column_name_in_a_run_is_an_identifier_never_sql(tmp_path_factory, name):
    """A column of a tampered kernels.parquet, whatever its name, is one more column of the kernels view."""
    work = tmp_path_factory.mktemp("run")
    run = work / "run"
    shutil.copytree(RUN_SEED, run)
    kernels = pl.read_parquet(run / "kernels.parquet")
    if name in kernels.columns or name.lower() == "filename":
        return
    kernels.with_columns(pl.lit("x").alias(name)).write_parquet(run / "kernels.parquet")
    dataset = open_dataset([str(run)])
    relation = dataset.query("select * from kernels limit 1")
    assert name in relation.columns and relation.fetchall()


statements = st.sampled_from([
    "COPY (select 1) TO 'x.csv'", "ATTACH 'x.db'", "SET threads = 1", "INSTALL httpfs", "PRAGMA version",
    "CREATE TABLE t AS SELECT 1", "DROP VIEW kernels", "EXPORT DATABASE 'x'", "CALL pragma_version()",
    "select 1", "with a as (select 1) select * from a", "from runs",
])


@SETTINGS
@given(st.lists(statements, min_size=1, max_size=3))
def test_only_one_select_is_ever_run(parts):
    sql = "; ".join(parts)
    kinds = [s.type for s in duckdb.extract_statements(sql)]
    if kinds == [duckdb.StatementType.SELECT]:
        assert _one_select(sql) == sql
    else:
        with pytest.raises(UserError):
            _one_select(sql)


names = st.lists(st.sampled_from(["a", "b", "..", ".", "link", "file", "x y", "é", ".hidden"]), min_size=1,
                 max_size=4)


@SETTINGS
@given(names, st.booleans())
def test_a_staged_output_lands_where_named_or_is_refused_and_nothing_else_changes(parts, replace):
    """Outputs named by any relative path, among a link to a folder elsewhere and a file: the output is written
    at exactly that path (folders above it are the user's own path, a link among them included), or refused in
    one UserError; the output itself is never a link written through, and nothing else changes."""
    with tempfile.TemporaryDirectory() as top:
        root = Path(top)
        work, elsewhere = root / "work", root / "elsewhere"
        work.mkdir()
        elsewhere.mkdir()
        (elsewhere / "keep.txt").write_text("keep")
        (work / "link").symlink_to(elsewhere)
        (work / "file").write_text("a file")
        target = work.joinpath(*parts)
        before = {str(p.relative_to(root)) for p in root.rglob("*")}
        written = None
        try:
            with staging.staged_directory(target, replace=replace, signature="done.txt") as tmp:
                (tmp / "done.txt").write_text("ok")
            written = staging.anchored(target)
        except UserError:
            pass
        if written is not None:
            assert (written / "done.txt").read_text() == "ok" and not written.is_symlink()
        after = {str(p.relative_to(root)) for p in root.rglob("*")}
        aimed = staging.anchored(target)
        new = {p for p in after - before  # besides the output, only the folders above it may be new
               if not (written is not None and (root / p).resolve().is_relative_to(written))
               and not aimed.is_relative_to((root / p).resolve())}
        assert not new and before <= after and (elsewhere / "keep.txt").read_text() == "keep"
        leftovers = [p for p in root.rglob("*") if ".partial-" in p.name or ".old-" in p.name]
        assert not leftovers
