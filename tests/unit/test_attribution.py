import numpy as np
import polars as pl
import pytest

from kernelscope.analyze.attribution.attribution import attribute, attribution_coverage
from kernelscope.load.kineto import load_kineto
from tests.conftest import EAGER_GPU_TRACES, write_trace


@pytest.mark.parametrize("path", EAGER_GPU_TRACES, ids=lambda p: p.name)
def test_every_gpu_kernel_is_attributed(path):
    kernels, ops = attribute(load_kineto(path))
    assert attribution_coverage(kernels) == 1.0
    assert kernels["op"].null_count() == 0
    assert set(kernels["phase"]) == {"prefill", "decode"}
    # Interval lookup and Kineto's own External id link name the same op for every kernel.
    by_external = ops.filter(pl.col("cat") == "cpu_op").select("external_id", pl.col("op_id").alias("linked"))
    joined = kernels.join(by_external, on="external_id", how="left")
    assert (joined["op_id"] == joined["linked"]).all()


def test_decode_steps_and_layers_of_real_trace(qwen_gpu_trace):
    kernels, _ = attribute(load_kineto(qwen_gpu_trace))
    decode = kernels.filter(pl.col("phase") == "decode")
    assert sorted(decode["step"].unique().to_list()) == [0, 1, 2]  # 4 new tokens → 3 decode steps
    assert kernels.filter(pl.col("phase") == "prefill")["step"].null_count() == kernels.filter(
        pl.col("phase") == "prefill").height
    assert sorted(kernels["layer"].drop_nulls().unique().to_list()) == list(range(24))
    down = kernels.filter(pl.col("module") == "model.layers.5.mlp.down_proj")
    assert down.height > 0 and set(down["layer"]) == {5}
    assert set(down["top_op"]) == {"aten::linear"}
    # Kernels are in start order with ids 0..n-1.
    assert kernels["kernel_id"].to_list() == list(range(kernels.height))
    assert (np.diff(kernels["start_ns"].to_numpy()) >= 0).all()


def test_cpu_only_trace_uses_op_self_times(tmp_path):
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ks.phase:prefill", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "user_annotation", "name": "ks.module:model.layers.0.mlp", "pid": 1, "tid": 1,
         "ts": 5, "dur": 90},
        {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": 10, "dur": 50},
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": 20, "dur": 30},
        {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 1, "tid": 1, "ts": 25, "dur": 10},
        {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": 70, "dur": 10},
    ]
    kernels, ops = attribute(load_kineto(write_trace(tmp_path / "cpu.json", events)))
    got = dict(zip(kernels["name"], kernels["dur_ns"], strict=True))
    assert got == {"aten::linear": 20_000, "aten::addmm": 20_000, "aten::copy_": 10_000, "aten::relu": 10_000}
    assert set(kernels["kind"]) == {"cpu_op"}
    assert set(kernels["module"]) == {"model.layers.0.mlp"} and set(kernels["layer"]) == {0}
    assert kernels.filter(pl.col("name") == "aten::copy_")["top_op"].item() == "aten::linear"
    assert ops.filter(pl.col("name") == "aten::copy_")["depth"].item() == 2
    assert attribution_coverage(kernels) == 1.0


def test_trace_without_ranges_is_unknown_but_usable(tmp_path):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 10,
         "args": {"External id": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 2, "dur": 3,
         "args": {"correlation": 9, "External id": 1}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 6, "dur": 4,
         "args": {"correlation": 9, "External id": 1, "device": 0, "stream": 7}},
        # A kernel whose launch record is missing: found through its External id.
        {"ph": "X", "cat": "kernel", "name": "orphan", "pid": 0, "tid": 7, "ts": 11, "dur": 1,
         "args": {"correlation": 10, "External id": 1, "device": 0, "stream": 7}},
    ]
    kernels, _ = attribute(load_kineto(write_trace(tmp_path / "plain.json", events)))
    assert kernels["phase"].to_list() == ["unknown", "unknown"]
    assert kernels["module"].null_count() == 2
    assert kernels["op"].to_list() == ["aten::mm", "aten::mm"]
    assert kernels["launch_api"].to_list() == ["cudaLaunchKernel", None]
    assert attribution_coverage(kernels) == 0.0
