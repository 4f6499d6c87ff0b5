import gzip
import json
from pathlib import Path

import polars as pl
import pytest

from kernelscope.errors import UserError
from kernelscope.load.kineto import load_kineto
from tests.conftest import GPU_TRACES, write_trace


def _counts(path: Path) -> dict[str, int]:
    """Independent count with the standard library: complete events per table."""
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    x = [e for e in events if e.get("ph") == "X"]
    return {
        "kernels": sum(e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") for e in x),
        "launches": sum(e.get("cat") in ("cuda_runtime", "cuda_driver") for e in x),
        "ops": sum(e.get("cat") in ("cpu_op", "user_annotation") for e in x),
        "kernel_ns": round(sum(e["dur"] for e in x if e.get("cat") == "kernel") * 1e3),
    }


@pytest.mark.parametrize("path", GPU_TRACES, ids=lambda p: p.name)
@pytest.mark.slow
def test_real_gpu_traces_load_completely(path):
    tables = load_kineto(path)
    expected = _counts(path)
    assert tables.kernels.height == expected["kernels"]
    assert tables.launches.height == expected["launches"]
    assert tables.ops.height == expected["ops"]
    kernel_ns = tables.kernels.filter(pl.col("kind") == "kernel")["dur_ns"].sum()
    assert abs(kernel_ns - expected["kernel_ns"]) <= tables.kernels.height  # rounding to whole ns
    assert tables.meta.device_properties[0]["name"] == "NVIDIA H200"
    assert tables.kernels["correlation"].null_count() == 0
    assert tables.kernels["start_ns"].min() >= 0
    assert set(tables.kernels["kind"]) <= {"kernel", "memcpy", "memset"}


def test_real_trace_fields(qwen_gpu_trace):
    tables = load_kineto(qwen_gpu_trace)
    gemm = tables.kernels.filter(pl.col("name").str.starts_with("nvjet")).row(0, named=True)
    assert gemm["grid_x"] >= 1 and gemm["block_x"] >= 1 and gemm["registers_per_thread"] > 0
    ops = tables.ops.filter(pl.col("name") == "aten::mm")
    assert ops.height > 0 and ops["input_dims"].null_count() == 0
    assert json.loads(ops["input_dims"][0])[0]  # a real shape list
    assert "BFloat16" in ops["input_types"][0]


def test_gzip_and_plain_give_identical_tables(qwen_gpu_trace, tmp_path):
    plain = tmp_path / "trace.json"
    plain.write_bytes(gzip.decompress(qwen_gpu_trace.read_bytes()))
    a, b = load_kineto(qwen_gpu_trace), load_kineto(plain)
    assert a.kernels.equals(b.kernels) and a.ops.equals(b.ops) and a.launches.equals(b.launches)


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_chunked_decoding_matches_single_chunk(qwen_gpu_trace, workers):
    whole = load_kineto(qwen_gpu_trace, workers=1)
    chunked = load_kineto(qwen_gpu_trace, workers=workers, chunk_bytes=1 << 20)  # ~12 chunks for this 12 MB trace
    assert chunked.kernels.equals(whole.kernels)
    assert chunked.ops.equals(whole.ops)
    assert chunked.launches.equals(whole.launches)
    assert chunked.meta.event_count == whole.meta.event_count


def test_older_capitalised_categories_and_field_names(tmp_path):
    events = [
        {"ph": "X", "cat": "Operator", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 100, "dur": 50,
         "args": {"external id": 7, "Input dims": [[2, 3], [3, 4]]}},
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 110, "dur": 5,
         "args": {"correlation": 42, "external id": 7}},
        {"ph": "X", "cat": "Kernel", "name": "gemm_kernel", "pid": 0, "tid": 7, "ts": 130, "dur": 20,
         "args": {"correlation": 42, "external id": 7, "device": 0, "stream": 7}},
        {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7, "ts": 160, "dur": 2,
         "args": {"correlation": 43, "bytes": 64}},
    ]
    tables = load_kineto(write_trace(tmp_path / "old.json", events))
    assert tables.kernels["kind"].to_list() == ["kernel", "memcpy"]
    assert tables.kernels["external_id"].to_list() == [7, None]
    assert tables.ops["input_dims"].to_list() == ["[[2,3],[3,4]]"] or "2" in tables.ops["input_dims"][0]
    assert tables.launches["correlation"].to_list() == [42]
    assert tables.kernels["start_ns"].to_list() == [30_000, 60_000]


def test_bare_array_form(tmp_path):
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 5.5, "dur": 1.25}]
    path = tmp_path / "array.json"
    path.write_text(json.dumps(events))
    tables = load_kineto(path)
    assert tables.ops["name"].to_list() == ["aten::add"]
    assert tables.ops["dur_ns"].to_list() == [1250]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "file is empty"),
        (b"hello", "not JSON"),
        (b'{"traceEvents": [{"ph": "X", "cat": "kernel"', "truncated"),
        (b'{"schemaVersion": 1}', "not a Kineto trace: the document lacks the field `traceEvents`"),
        (b'{"traceEvents": 3}', "not a Kineto trace"),
        (b'{"traceEvents": [{"ph": "X", "ts": "soon"}]}',
         "not a Kineto trace: an event's `ts` is text where Kineto writes a number or null"),
        (b'[{"ph": "X", "name": 5, "ts": 1}]', "an event's `name` is a whole number where Kineto writes text"),
        (gzip.compress(b'{"traceEvents": []}')[:-9], "gzip"),
    ],
)
def test_bad_files_raise_one_clear_error(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(UserError) as err:
        load_kineto(path)
    assert message in str(err.value) and str(path) in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        load_kineto(tmp_path / "nope.json")
    with pytest.raises(UserError, match="is a directory"):
        load_kineto(tmp_path)


def test_unusual_layout_takes_the_exact_path(tmp_path):
    # A long field after the event array defeats the fast text search; the decoder then finds the array.
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"traceEvents": events, "padding": "x" * 70_000, "schemaVersion": 1}))
    tables = load_kineto(path)
    assert tables.ops["name"].to_list() == ["aten::add"]
    assert tables.meta.schema_version == 1


@pytest.mark.parametrize("workers", [1, 2])
def test_columns_empty_in_some_chunks_only(workers):
    """A rank of an expert-parallel run: only 16 of its 2,660 kernels are collectives, so most chunks hold no
    collective fields at all (those columns are constant nulls there, and travel from a helper by name only)
    while a few hold values: the tables still equal one whole-file decode, value for value."""
    path = Path(__file__).parents[1] / "data" / "multi_gpu" / "deepseek_v3_ep2_rank0.json.gz"
    with gzip.open(path, "rt") as f:
        kernels = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel" and e.get("ph") == "X"]
    collectives = sorted(e["args"]["Collective name"] for e in kernels if "Collective name" in e.get("args", {}))
    whole = load_kineto(path, workers=1)
    chunked = load_kineto(path, workers=workers, chunk_bytes=256 << 10)
    assert chunked.kernels.equals(whole.kernels) and chunked.ops.equals(whole.ops)
    assert chunked.launches.equals(whole.launches)
    assert chunked.kernels.schema == whole.kernels.schema
    assert sorted(chunked.kernels["collective"].drop_nulls().to_list()) == collectives
    assert chunked.kernels["group_size"].null_count() == chunked.kernels.height - len(collectives)


@pytest.mark.parametrize("cores", [1, 2, 16, 64])
@pytest.mark.parametrize("mb", [10, 65, 100, 216, 2000])
def test_default_workers_within_the_cores_the_chunks_and_the_cap(monkeypatch, cores, mb):
    import kernelscope.load.kineto.reader as reader

    monkeypatch.setattr(reader, "usable_cores", lambda: cores)
    monkeypatch.setattr(reader, "native_available", lambda: False)  # helper processes
    chunk = 16 << 20
    workers = reader.default_workers(mb << 20, chunk)
    if mb << 20 <= reader.PARALLEL_BYTES:
        assert workers == 1
        return
    assert 1 <= workers <= min(cores, reader.MAX_WORKERS)
    assert workers <= max(1, (mb << 20) // (2 * chunk))  # every process finds two chunks or more
    assert workers == min(cores, reader.MAX_WORKERS) or workers == (mb << 20) // (2 * chunk)  # no idle core left


@pytest.mark.parametrize("cores", [1, 2, 16, 64])
@pytest.mark.parametrize("mb", [10, 16, 17, 65, 2000])
def test_threads_of_the_native_path_one_per_core_and_chunk(monkeypatch, cores, mb):
    import kernelscope.load.kineto.reader as reader

    monkeypatch.setattr(reader, "usable_cores", lambda: cores)
    monkeypatch.setattr(reader, "native_available", lambda: True)
    chunk = 16 << 20
    chunks = -(-(mb << 20) // chunk)
    assert reader.default_workers(mb << 20, chunk) == min(cores, reader.MAX_WORKERS, chunks)


@pytest.mark.parametrize("native", [True, False])
def test_chunks_are_smaller_where_threads_keep_parser_buffers(monkeypatch, native):
    # Each native decoding thread keeps simdjson's buffers, several times its chunk: its chunks are half the size.
    import kernelscope.load.kineto.reader as reader

    monkeypatch.setattr(reader, "native_available", lambda: native)
    expected = reader.NATIVE_CHUNK_BYTES if native else reader.CHUNK_BYTES
    assert reader.default_chunk_bytes() == expected
    assert reader.NATIVE_CHUNK_BYTES < reader.CHUNK_BYTES


def test_schema_messages_in_words_and_others_kept():
    from kernelscope.load.kineto.schema_errors import describe

    assert describe("Expected `float | null`, got `str` - at `$.traceEvents[12].dur`").startswith(
        "an event's `dur` is text where Kineto writes a number or null (Ascend")
    assert describe("Expected `array`, got `object`") == "the document is an object where Kineto writes a list"
    assert describe("Object missing required field `traceEvents`") == "the document lacks the field `traceEvents`"
    assert describe("something else entirely") == "something else entirely"
