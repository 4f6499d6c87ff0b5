"""The Kineto reader's native fast path (load/kineto/native) against its msgspec path: on every committed trace and
on hostile events, it either declines a chunk or yields the very tables, counts and order the msgspec path does."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from kernelscope.errors import UserError
from kernelscope.load.kineto import events, native_tables
from kernelscope.load.kineto.chunks import chunk_ranges, chunk_text
from kernelscope.load.kineto.document import locate_events, open_trace_text
from kernelscope.load.kineto.reader import load_kineto
from kernelscope.load.native_reader import NATIVE_ENV, native_reader_built

DATA = Path(__file__).resolve().parents[1] / "data"
TRACES = sorted(p for folder in ("kineto", "public", "multi_gpu", "foreign") for p in (DATA / folder).rglob("*.json*")
                if p.name.endswith((".json", ".json.gz")))

needs_native = pytest.mark.skipif(not native_tables.available(), reason="native fast path not built here")


def test_the_fast_path_is_built_where_the_machine_can_build_it():
    # CI sets KERNELSCOPE_REQUIRE_NATIVE=1: an install that silently lost the extension must not pass.
    if os.environ.get("KERNELSCOPE_REQUIRE_NATIVE") != "1":
        pytest.skip("KERNELSCOPE_REQUIRE_NATIVE is not set")
    assert native_tables.available()


def test_knowing_whether_it_is_built_needs_no_loading(monkeypatch):
    # Commands decide early, from the file alone, whether a large trace needs helper processes.
    assert native_reader_built() == native_tables.available()
    monkeypatch.setenv(NATIVE_ENV, "0")
    assert not native_reader_built()


def _both(text: bytes) -> tuple[dict | None, dict | Exception]:
    try:
        slow: dict | Exception = events._decode_chunk("trace.json", bytearray(text), False)
    except Exception as exc:  # noqa: BLE001 - the msgspec path's refusal is what is compared
        slow = exc
    return native_tables.decode_native(bytearray(text)), slow


def _assert_same(fast: dict, slow: dict) -> None:
    assert fast["event_count"] == slow["event_count"]
    assert fast["unread"] == slow["unread"]
    assert list(fast["dropped"].items()) == list(slow["dropped"].items())
    for name in ("kernels", "launches", "ops"):
        assert_frame_equal(fast[name], slow[name])


def _equal_or_declined(text: bytes) -> dict | None:
    fast, slow = _both(text)
    if isinstance(slow, Exception):
        assert fast is None, f"the fast path read a chunk the msgspec path refuses ({slow})"
        return None
    if fast is not None:
        _assert_same(fast, slow)
    return fast


def _array_texts(path: Path) -> list[bytes]:
    with open_trace_text(path) as (_, data):
        array = locate_events(path, data, exact=True)
        chunks = chunk_ranges(data, array.offset, array.length, closed=not array.unclosed, chunk_bytes=1 << 20)
        return [bytes(chunk_text(data, chunk)) for chunk in chunks]


def _is_kineto(path: Path) -> bool:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        head = f.read(1 << 16)
    return b'"traceEvents"' in head or head.lstrip().startswith(b"[")


@needs_native
@pytest.mark.parametrize("path", [p for p in TRACES if _is_kineto(p)], ids=lambda p: str(p.relative_to(DATA)))
@pytest.mark.slow
def test_every_committed_trace_reads_the_same_both_ways(path):
    try:
        texts = _array_texts(path)
    except UserError:
        pytest.skip("not a Kineto trace the reader takes")
    for text in texts:
        assert _equal_or_declined(text) is not None, "the fast path declined a real trace's chunk"


GOOD = {"ph": "X", "cat": "kernel", "name": "ampere_sgemm", "pid": 0, "tid": 7, "ts": 10.5, "dur": 3.25,
        "args": {"External id": 4, "correlation": 9, "grid": [1, 2, 3], "block": [128, 1, 1], "device": 0,
                 "stream": 7, "registers per thread": 32, "shared memory": 0, "est. achieved occupancy %": 50.5}}
OP = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 9.0, "dur": 5,
      "args": {"External id": 4, "Sequence number": 3, "Input Dims": [[8, 16], [16, 4]],
               "Input type": ["float", "float"]}}
LAUNCH = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 9.5, "dur": 1,
          "args": {"External id": 4, "correlation": 9}}


def _chunk(*hostile: str) -> bytes:
    """A chunk holding well-formed events around the hostile ones (written as raw JSON text)."""
    good = [json.dumps(e) for e in (GOOD, OP, LAUNCH)]
    return ("[" + ", ".join([*good, *hostile, *good]) + "]").encode()


def _with(event: dict, **changes) -> str:
    return json.dumps({**event, **changes})


def _with_args(event: dict, **changes) -> str:
    return json.dumps({**event, "args": {**event["args"], **changes}})


# Args that do not fit their struct: the fast path must read them (counted as malformed), not decline.
MALFORMED_ARGS = [
    _with_args(GOOD, grid="1,2,3"), _with_args(GOOD, grid=[1, 2.5, 3]), _with_args(GOOD, grid=[1, True, 3]),
    _with_args(GOOD, correlation=1.0), _with_args(GOOD, correlation="9"), _with_args(GOOD, device=True),
    _with_args(GOOD, **{"est. achieved occupancy %": "high"}), _with_args(GOOD, **{"Collective name": 3}),
    _with(GOOD, args=None), _with(GOOD, args=[1, 2]), _with(GOOD, args="x"),
    _with_args(OP, **{"Sequence number": [1]}), _with_args(LAUNCH, kernel=7), _with_args(LAUNCH, correlation={}),
]
# Events the fast path reads exactly (and must not decline).
READ = [
    _with(GOOD, args={}), _with(GOOD, dur=None), json.dumps({k: v for k, v in GOOD.items() if k != "dur"}),
    _with(GOOD, ts=None), _with(GOOD, ph="B"), _with(GOOD, dur=-1), _with(GOOD, ts=5e15), _with(GOOD, dur=2e12),
    _with(GOOD, cat="Kernel"), _with(GOOD, cat="gpu_memcpy", args={"bytes": 4096}), _with(GOOD, cat="ac2g"),
    _with(GOOD, cat="gpu_user_annotation"), _with(GOOD, cat="GPU_User_Annotation"), _with(GOOD, tid="stream 7"),
    _with(GOOD, pid="12", tid=" -3 "), _with(GOOD, pid=None), _with(GOOD, name="k" * 5000),
    _with(GOOD, name="\u6838\u51fd\u6570 \u00e9\u00e8 \\n tab\\t"), _with(GOOD, args={"grid": [1, 2]}),
    _with(GOOD, args={"grid": None, "External id": None, "external id": 5}),
    _with(OP, args={"Input dims": [[1]], "Input type": "float  ", "Concrete Inputs": ["", "1"]}),
    _with(OP, name="aten::scaled_dot_product_attention", args={"Concrete Inputs": ["", "", "0.0", "True"]}),
    _with(OP, args={"Input Dims": 3}), _with(OP, args={"Input Dims": "x"}),
    _with(OP, cat="python_function", args={"Python id": 3, "External id": "no"}),
    _with(OP, cat="Python_Function"), _with(OP, cat="user_annotation", name="ks.phase:decode"),
    _with(LAUNCH, args={"kernel": "k" * 5000, "correlation": 9}), _with(LAUNCH, cat="cuda_driver"),
    _with(GOOD, extra={"deep": [[[{"x": [1, {"y": None}]}]]]}),
    '{"ph": "X", "cat": "kernel", "name": "a", "ts": 1, "dur": 1, "args": {"grid": [1, 2, 3]}}',
    '{"ph":"X","cat":"cpu_op","name":"b","pid":1,"tid":1,"ts":1,"dur":1,"args":{"Input Dims":  [ [1,2] , [] ]  }}',
    '{"ph": "X", "cat": "kernel", "name": "n", "pid": 0, "tid": 0, "ts": 1e3, "dur": 0.0001, "args": {}}',
]
# Chunks the msgspec path refuses or reads its own way: the fast path must decline or agree.
EDGES = [
    _with(GOOD, name=None), _with(GOOD, ph=1), _with(GOOD, ts="10"), _with(GOOD, ts=True), _with(GOOD, pid=1.5),
    _with(GOOD, pid=2**63), _with(GOOD, tid=[1]), "[1, 2]", '"text"', "null",
    _with_args(GOOD, correlation=2**63), _with_args(GOOD, correlation=2**64 + 1), _with_args(GOOD, grid=[2**70, 1, 1]),
    _with(GOOD, ts=2**64 + 5), '{"ph": "X", "ph": "X", "cat": "kernel", "name": "a", "ts": 1}',
    '{"ph": "X", "cat": "kernel", "name": "a", "ts": 1, "args": {"correlation": 1, "correlation": 2}}',
    _with(GOOD, cat="\u212aernel"), _with(GOOD, cat="cpu_op\u0130"), _with(GOOD, name="\\ud83d\\ude00"),
    '{"ph": "X", "cat": "kernel", "name": "\\ud800", "ts": 1}', '{"ph": "X", "cat": "kernel", "name": "a", "ts": 1e400}',
    '{"ph": "X", "cat": "kernel", "name": "a", "ts": 1, "skipped": [1 2]}',
    '{"ph": "X", "cat": "kernel", "name": "a", "ts": 1, "skipped": tru}', '{"ph": "X", "cat": "kernel",}',
    '{"ph": "X", "cat": "kernel", "name": "a", "ts": 01}', '{"ph": "X", "cat": "kernel", "name": "a\x01", "ts": 1}',
    '{"ph": "X", "cat": "kernel", "name": "a", "ts": 1, "x": ' + "[" * 300 + "]" * 300 + "}",
    '{"ph": "X", "cat": "kernel", "name": "a", "ts": NaN}', '{"ph": "X", "cat": "kernel", "name": "a", "ts": -0}',
    '{"n\\u0061me": "escaped key", "ph": "X", "cat": "kernel", "ts": 1}',
]


@needs_native
@pytest.mark.parametrize("event", MALFORMED_ARGS + READ)
def test_the_fast_path_reads_what_it_can_read_exactly(event):
    assert _equal_or_declined(_chunk(event)) is not None


@needs_native
def test_malformed_args_are_counted_as_the_msgspec_path_counts_them():
    fast = _equal_or_declined(_chunk(*MALFORMED_ARGS))
    assert fast is not None and fast["dropped"]["malformed args"] == len(MALFORMED_ARGS)


@needs_native
@pytest.mark.parametrize("event", EDGES)
def test_edges_are_declined_or_read_the_same(event):
    _equal_or_declined(_chunk(event))


@needs_native
def test_invalid_utf8_is_left_to_the_msgspec_path_which_repairs_it():
    text = _chunk(_with(GOOD, name="ab")).replace(b'"ab"', b'"a\xffb"')
    fast, slow = _both(text)
    assert fast is None and slow["dropped"]["invalid UTF-8 repaired"] == 1


_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**65), 2**65), st.floats(allow_nan=False),
                     st.text(max_size=6), st.sampled_from(["X", "B", "kernel", "cpu_op", "cuda_runtime",
                                                           "python_function", "Kernel", "gpu_memset", "12"]))
_values = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                          st.dictionaries(st.text(max_size=4), inner, max_size=3)),
                       max_leaves=8)
_arg_keys = st.sampled_from(["External id", "external id", "correlation", "device", "stream", "grid", "block",
                             "registers per thread", "est. achieved occupancy %", "bytes", "Collective name",
                             "kernel", "Sequence number", "Input Dims", "Input dims", "Input type",
                             "Concrete Inputs", "dtype", "Group size", "other"])
_events = st.fixed_dictionaries(
    {"ph": st.one_of(st.just("X"), _values), "cat": st.one_of(st.sampled_from(
        ["kernel", "cpu_op", "cuda_runtime", "python_function", "gpu_memcpy", "user_annotation",
         "cuda_profiler_range", "Runtime"]), _values),
     "name": st.one_of(st.text(max_size=8), _values), "ts": st.one_of(st.floats(-1e16, 1e16), _values)},
    optional={"pid": _values, "tid": _values, "dur": st.one_of(st.floats(-10, 1e13), _values),
              "args": st.one_of(st.dictionaries(_arg_keys, _values, max_size=5), _values)})


@needs_native
@settings(max_examples=300, deadline=None)
@given(st.lists(_events.flatmap(lambda e: st.permutations(list(e.items()))), min_size=1, max_size=6))
@pytest.mark.slow
def test_random_events_are_declined_or_read_the_same(generated):
    # Keys in any order: args before cat are read from their text once the category is known.
    _equal_or_declined(("[" + ", ".join(json.dumps(dict(items)) for items in generated) + "]").encode())


@needs_native
@pytest.mark.parametrize("event", [GOOD, OP, LAUNCH])
def test_args_before_the_category_are_read_the_same(event):
    reordered = {"args": event["args"], **{k: v for k, v in event.items() if k != "args"}}
    broken = {"args": {**event["args"], "External id": "x"}, **{k: v for k, v in event.items() if k != "args"}}
    fast = _equal_or_declined(_chunk(json.dumps(reordered), json.dumps(broken)))
    assert fast is not None and fast["dropped"]["malformed args"] == 1


@needs_native
def test_a_trace_in_many_chunks_loads_the_same_with_threads_and_without_the_fast_path(monkeypatch):
    path = DATA / "kineto" / "h200-qwen2-0.5b-p16-n4.trace.json.gz"
    fast = load_kineto(path, workers=2, chunk_bytes=1 << 18)
    monkeypatch.setattr(native_tables, "_kineto_scan", None)
    slow = load_kineto(path, workers=1, chunk_bytes=1 << 18)
    for name in ("kernels", "launches", "ops"):
        assert_frame_equal(getattr(fast, name), getattr(slow, name))
    assert fast.meta.event_count == slow.meta.event_count
    assert fast.meta.dropped_events == slow.meta.dropped_events
