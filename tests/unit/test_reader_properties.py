"""Property tests (hypothesis): arbitrary changes to real inputs never make a reader or the kernel catalog fail in
any way but the one-line UserError. Seeds are real: a public HTA Triton trace (Kineto), a vLLM B200 trace written
as an Nsight Systems export, an Nsight Compute CSV of our H200 runs."""

from __future__ import annotations

import copy
import csv
import gzip
import io
import json
import shutil
import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernelscope.errors import UserError
from kernelscope.load.kineto import load_kineto
from tests.adversarial.cases import NCU_SEED
from tests.adversarial.cases_formats import _nsys_export

DATA = Path(__file__).resolve().parents[1] / "data"
KINETO_SEED = DATA / "public" / "hta" / "data__triton_example__triton_example.json.gz"
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)
FIELDS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "args.correlation", "args.External id",
          "args.device", "args.stream", "args.grid", "args.block", "args.Input Dims", "args.Concrete Inputs"]


@pytest.fixture(scope="module")
def kineto_doc() -> dict:
    with gzip.open(KINETO_SEED, "rt") as f:
        return json.load(f)


def _read_or_refuse(read, path: Path) -> None:
    try:
        read(path)
    except UserError as exc:
        assert str(exc).startswith(str(path)) and "\n" not in str(exc)


@SETTINGS
@given(index=st.integers(min_value=0, max_value=70), field=st.sampled_from(FIELDS), value=json_values)
def test_kineto_any_field_any_value(kineto_doc, index, field, value):
    doc = copy.deepcopy(kineto_doc)
    event = doc["traceEvents"][index % len(doc["traceEvents"])]
    if field.startswith("args."):
        if not isinstance(event.get("args"), dict):
            event["args"] = {}
        event["args"][field[5:]] = value
    else:
        event[field] = value
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        path.write_text(json.dumps(doc))
        _read_or_refuse(load_kineto, path)


@SETTINGS
@given(cut=st.floats(min_value=0.0, max_value=1.0), flips=st.lists(
    st.tuples(st.floats(min_value=0.0, max_value=1.0), st.integers(min_value=0, max_value=255)), max_size=4))
def test_kineto_any_truncation_and_byte_flips(cut, flips):
    data = bytearray(gzip.decompress(KINETO_SEED.read_bytes()))
    for where, byte in flips:
        data[int(where * (len(data) - 1))] = byte
    data = data[: max(1, int(len(data) * cut))]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        path.write_bytes(bytes(data))
        _read_or_refuse(load_kineto, path)


@pytest.fixture(scope="module")
def nsys_export(tmp_path_factory) -> Path:
    return _nsys_export(tmp_path_factory.mktemp("nsys"))


NSYS_COLUMNS = ["start", "end", "deviceId", "streamId", "correlationId", "demangledName", "shortName", "gridX",
                "blockX", "registersPerThread", "staticSharedMemory", "globalPid"]
sql_values = (st.none() | st.integers(min_value=-(2**63), max_value=2**63 - 1) | st.floats(allow_nan=False)
              | st.text(max_size=20) | st.binary(max_size=8))


@SETTINGS
@given(column=st.sampled_from(NSYS_COLUMNS), value=sql_values, rows=st.integers(min_value=1, max_value=4))
@pytest.mark.slow
def test_nsys_any_kernel_column_any_value(nsys_export, column, value, rows):
    from kernelscope.load.nsys_sqlite import load_nsys_sqlite

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.sqlite"
        shutil.copyfile(nsys_export, path)
        with sqlite3.connect(path) as db:
            try:
                db.execute(f'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "{column}" = ? WHERE rowid % ? = 0', (value, rows))
            except sqlite3.IntegrityError:  # a NOT NULL column of nsys's own schema: nsys never writes that
                return
        db.close()
        _read_or_refuse(load_nsys_sqlite, path)


@pytest.fixture(scope="module")
def ncu_rows() -> list[list[str]]:
    return list(csv.reader(io.StringIO(NCU_SEED.read_text())))


@SETTINGS
@given(row=st.integers(min_value=0, max_value=6), column=st.integers(min_value=0, max_value=400),
       value=st.text(max_size=30))
@pytest.mark.slow
def test_ncu_any_cell_any_text(ncu_rows, row, column, value):
    from kernelscope.load.ncu import read_ncu_csv

    rows = copy.deepcopy(ncu_rows[:8])
    target = rows[row % len(rows)]
    target[column % len(target)] = value
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "raw.csv"
        path.write_text(buffer.getvalue())
        _read_or_refuse(read_ncu_csv, path)


@settings(max_examples=300, deadline=None)
@given(name=st.text(max_size=300) | st.from_regex(r"void [a-z_:<>, 0-9()*&]{0,200}", fullmatch=True))
def test_catalog_names_any_string(name):
    from kernelscope.analyze.costs.catalog import classify

    info = classify(name)
    assert isinstance(info.library, str) and isinstance(info.friendly_name, str)
