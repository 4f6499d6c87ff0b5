"""The critical path of every step (docs/critical-path.md) on every committed trace: its segments tile the step and
their lengths add up to the step's wall time as the file itself gives it (tests/step_reference.py, plain json, no
kernelscope code), within 1% for at least 99% of the steps; the walk follows real dependencies; across ranks the
path goes through collectives."""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path

import polars as pl
import pytest

from kernelscope.analyze.attribution.graph_replays import attribute_graph_replays
from kernelscope.analyze.costs.kernel_costs import with_costs_and_names
from kernelscope.analyze.paths.critical_path import CriticalPath
from kernelscope.analyze.paths.path_tables import run_critical_paths
from kernelscope.analyze.ranks.ranks import combine_calls, combine_ranks, rank_clock_offsets, trace_ranks
from kernelscope.commands.importers.rank_files import read_rank
from kernelscope.contracts.run import Run
from kernelscope.contracts.run_info import RunInfo
from tests.step_reference import step_walls

DATA = Path(__file__).resolve().parents[1] / "data"
PUBLIC = DATA / "public"

# Every committed trace (a run of several ranks: its files together), with the family of step markers its steps
# come from (step_reference.py); a family is what the file holds, the walls are computed from the file.
TRACES: list[tuple[tuple[str, ...], str]] = [
    *[((f"kineto/{name}",), "ks") for name in (
        "cuda_graph_replay.json.gz", "h100-qwen2-0.5b-p16-n4.trace.json.gz", "h200-deepseek-v3-p16-n3.trace.json.gz",
        "h200-llama-3-8b-p16-n3.trace.json.gz", "h200-qwen2-0.5b-p16-n4.shapeless.trace.json.gz",
        "h200-qwen2-0.5b-p16-n4.trace.json.gz", "h200-qwen2-1.5b-b8-p16-n3.trace.json.gz",
        "h200-qwen2-4l-b4-p128-n3.trace.json.gz", "h200-qwen3moe-2l-b4-p128-n3.trace.json.gz",
        "h200-engine-qwen2-0.5b-pdl.trace.json.gz")],
    (("multi_gpu/deepseek_v3_ep2_rank0.json.gz", "multi_gpu/deepseek_v3_ep2_rank1.json.gz"), "ks"),
    (("foreign/captured/tp2_rank0.json.gz", "foreign/captured/tp2_rank1.json.gz"), "forwards"),
    (("foreign/captured/graph_replay.json.gz",), "forwards"),
    (("foreign/captured/hf_generate_stack.json.gz",), "forwards"),
    (("foreign/captured/hf_generate_plain.json.gz",), "lookups"),
    (("foreign/captured/hf_generate_compiled.json.gz",), "lookups"),
    (("foreign/captured/own_loop_profiler_steps.json.gz",), "profiler_step"),
    (("foreign/captured/graph_capture.json.gz",), "run"),
    (("foreign/captured/spin_on_path_interleaved.json.gz",), "ks"),
    (("foreign/captured/spin_side_stream_interleaved.json.gz",), "ks"),
    (("foreign/captured/hf_decode_spins_interleaved.json.gz",), "ks"),
    (("foreign/trimmed/vllm_decode_full__graph_capture_rank_0.json.gz",), "forwards"),
    (("foreign/trimmed/vllm_prefilldecode_piecewise__graph_capture_rank_0.json.gz",), "forwards"),
    (("public/hta/data__trace_filter__sampled_rank-0.json.gz", "public/hta/data__trace_filter__sampled_rank-1.json.gz"),
     "profiler_step"),
    (tuple(sorted(f"public/param/{p.name}" for p in (DATA / "public" / "param").glob("dlrm_kineto__*"))),
     "profiler_step"),
    *[((f"public/hta/{name}",), "profiler_step") for name in (
        "critical_path__cuda_event_sync__event_sync_trace.json.gz",
        "data__amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz", "data__rank_non_gpu__rank_non_gpu.json.gz")],
    *[((f"public/hta/{name}",), "run") for name in (
        "data__cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", "data__triton_example__triton_example.json.gz",
        "data__mtia_inference_trace__mtia_inference_rank_0.json.gz",
        "execution_trace__benchmark_simple_add_trace.json.gz")],
    (("public/kineto/resnet50_num_workers_0__worker0.pt.trace.json.gz",), "run"),
    (("public/kineto/traces__before_fix_trace.json",), "run"),
    (("public/tokenomics/llama_trace_4layers0_with_annotations.json.gz",), "run"),
    (("public/tokenomics/traces__llama_trace_4layers0_dim_1024.json.gz",), "run"),
    *[((f"public/tracelens/{name}",), "execute") for name in (
        "inference__sglang_decode__sglang_Qwen3-8B_decode.json.gz",
        "inference__sglang_prefilldecode__sglang_Qwen3-8B_prefilldecode.json.gz",
        "inference__vllm_decode_full__graph_execution.json.gz",
        "inference__vllm_prefilldecode_piecewise__graph_execution.json.gz", "traces__b200__eager_trace.json.gz")],
    *[((f"public/tracelens/{name}",), "profiler_step") for name in (
        "traces__h100__gaunernst_bert-small-uncased__1016001.json.gz",
        "traces__mi300__gaunernst_bert-small-uncased__1016001.json.gz",
        "traces__mi300__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")],
    (("public/tracelens/traces__torch_compile_triton__trace.json.gz",), "lookups"),
    (("public/tracelens/mi210__gpu_only_trace__gpu_only_trace.json.gz",), "run"),
    (("public/tracelens/sglang_decode__capture_traces__bs_32_rank0.json.gz",), "run"),
]
# rocprofv3's own JSON: no step marker for the reference to cut by (kernelscope infers its training steps from the
# kernels' regularities); its steps tile the run, checked as a whole below.
ROCPROF = "public/tracelens/rocprof__908_results.json.gz"
# Committed files with no timeline of device work or CPU ops to follow (CUPTI range-profiler mode).
NO_TIMELINE = {"public/hta/data__cupti_profiler__benchmark_result_924719_1679055439_trace.json.gz"}


@cache
def critical_path_of(files: tuple[str, ...]) -> CriticalPath:
    """The run kernelscope makes of `files` (one per rank), its critical paths."""
    ranks = [read_rank(str(DATA / f), workers=1) for f in files]
    metas = [r.meta for r in ranks]
    offsets = rank_clock_offsets([m.origin_us for m in metas], [m.base_time_ns for m in metas])
    numbers = trace_ranks([m.distributed_info for m in metas])
    kernels, ops = combine_ranks([(r.kernels, r.ops) for r in ranks], offsets, numbers)
    kernels, _ = attribute_graph_replays(kernels)
    calls = combine_calls([r.calls for r in ranks], offsets, numbers)
    run = with_costs_and_names(Run(info=RunInfo(source="import", schema_version=1), kernels=kernels, ops=ops,
                                   calls=calls))
    path = run_critical_paths(run)
    assert path is not None
    return path


def test_every_committed_trace_is_checked():
    checked = {f for files, _ in TRACES for f in files} | NO_TIMELINE | {ROCPROF}
    committed = {str(p.relative_to(DATA)) for d in ("kineto", "multi_gpu", "foreign", "public")
                 for p in (DATA / d).rglob("*.json*")}
    assert committed == checked


@pytest.mark.parametrize("files, family", TRACES, ids=lambda v: v[0].split("/")[-1][:48] if isinstance(v, tuple)
                         else v)
@pytest.mark.slow
def test_each_steps_path_adds_up_to_its_wall_time_in_the_file(files, family):
    walls = step_walls([DATA / f for f in files], family)
    path = critical_path_of(files)
    steps = path.steps.sort("end_ns", "start_ns")
    if family == "run" and steps.height > 1:
        # No marker in the file, but kernelscope found steps in its regularities (training steps, or passes, from
        # the repeats of the kernel sequence): the file cannot cut them, so their paths are checked together,
        # against the whole file's span.
        assert len(walls) == 1 and steps["path_ns"].sum() == pytest.approx(walls[0], rel=0.01)
    else:
        assert steps.height == len(walls) > 0
        within = [abs(p - w) <= 0.01 * w for p, w in zip(steps["path_ns"].to_list(), walls, strict=True)]
        assert sum(within) >= 0.99 * len(walls), list(zip(steps["path_ns"].to_list(), walls, strict=True))
    # The segments tile each step: in time order, from its start, each where the one before ended, to its end.
    windows = {(r["phase"], r["generation"], r["step"]): (r["start_ns"], r["end_ns"]) for r in steps.iter_rows(named=True)}
    for key, rows in path.segments.group_by("phase", "generation", "step", maintain_order=True):
        ends = (rows["start_ns"] + rows["dur_ns"]).to_list()
        assert rows["start_ns"].to_list()[1:] == ends[:-1]
        assert (rows["start_ns"][0], ends[-1]) == windows[key]
        assert (rows["dur_ns"] > 0).all()


def test_device_segments_lie_inside_their_kernels():
    """Every segment of work on the device is part of the kernel it names, as the trace timed it."""
    files = ("multi_gpu/deepseek_v3_ep2_rank0.json.gz", "multi_gpu/deepseek_v3_ep2_rank1.json.gz")
    path = critical_path_of(files)
    devices = path.graph.devices.select("kernel_id", "name", pl.Series("s", path.graph.start[:path.graph.n_device]),
                                        pl.Series("e", path.graph.end[:path.graph.n_device]))
    body = path.segments.filter(pl.col("class").is_in(["compute", "communication"])).join(devices, on="kernel_id")
    assert body.height and body.height == path.segments.filter(pl.col("class").is_in(["compute", "communication"])).height
    assert (body["name"] == body["name_right"]).all()
    assert ((body["start_ns"] >= body["s"]) & (body["start_ns"] + body["dur_ns"] <= body["e"])).all()


@pytest.mark.slow
def test_the_steps_of_a_rocprofv3_recording_tile_its_kernels_span():
    """A rocprofv3 JSON output (kernel dispatches only): the inferred steps' paths add up to the span of the
    dispatches the file holds, first start to last end, read with json alone."""
    document = json.loads(gzip.decompress((DATA / ROCPROF).read_bytes()))
    dispatches = [d for tool in document["rocprofiler-sdk-tool"] for d in tool["buffer_records"]["kernel_dispatch"]]
    span = max(d["end_timestamp"] for d in dispatches) - min(d["start_timestamp"] for d in dispatches)
    path = critical_path_of((ROCPROF,))
    assert path.steps.height > 1
    assert path.steps["path_ns"].sum() == pytest.approx(span, rel=0.01)
