import math
from pathlib import Path

import polars as pl
import pytest

from kernelscope.analyze.attribution.attribution import attribute
from kernelscope.analyze.costs.kernel_costs import kernel_costs
from kernelscope.analyze.costs.roofline import class_table, cost_coverage, place_on_roofline
from kernelscope.analyze.hardware import ceilings_for, load_specs, match_spec
from kernelscope.contracts.calibration import Calibration
from kernelscope.contracts.tables import conform_kernels
from kernelscope.load.kineto import load_kineto
from kernelscope.report import figures


@pytest.mark.parametrize("name", sorted(load_specs()))
def test_hardware_data_is_sane(name):
    spec = load_specs()[name]
    assert 1e11 < spec.memory_bandwidth < 2e13 and 1e9 < spec.memory_bytes < 1e12
    assert spec.sources and spec.sm_count > 0 and 500 < spec.boost_clock_mhz < 3500
    assert all(0 < v < 2e16 for v in spec.peak.values())
    half = spec.peak.get("bf16") or spec.peak["fp16"]  # Volta has fp16 tensor cores and no bf16
    assert 20 < half / spec.memory_bandwidth < 600  # FLOP per byte: a plausible ridge for these generations
    if "fp8" in spec.peak:
        assert spec.peak["fp8"] >= half
    assert half >= spec.peak["fp32"]
    link = spec.interconnect
    assert link is not None and 16e9 <= link.host_bandwidth <= 1e12
    assert (link.link is None) == (link.link_bandwidth is None)
    assert link.link_bandwidth is None or 50e9 <= link.link_bandwidth <= 2e12


# Names as CUDA, ROCm and Kineto's deviceProperties spell them (several from the public trace corpus).
@pytest.mark.parametrize(
    ("device", "key"),
    [("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H100 PCIe", "h100-pcie"),
     ("NVIDIA H100 NVL", "h100-nvl"), ("NVIDIA H100", "h100-sxm"), ("NVIDIA GH200 480GB", "gh200"),
     ("NVIDIA H20", "h20"), ("NVIDIA H800", "h800"), ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
     ("NVIDIA A100-SXM4-40GB", "a100-40gb"), ("NVIDIA A100-PCIE-40GB", "a100-40gb"),
     ("NVIDIA A100 80GB PCIe", "a100-80gb-pcie"), ("NVIDIA A100-PG509-200", "a100-40gb"),
     ("NVIDIA A10", "a10"), ("NVIDIA L4", "l4"), ("NVIDIA L40S", "l40s"), ("Tesla V100-SXM2-32GB", "v100"),
     ("Tesla V100-SXM2-16GB", "v100"), ("Tesla V100-DGXS-32GB", "v100"), ("Tesla V100-PCIE-16GB", "v100-pcie"),
     ("NVIDIA GeForce RTX 3090", "rtx-3090"), ("NVIDIA GeForce RTX 4090", "rtx-4090"),
     ("NVIDIA GeForce RTX 5090", "rtx-5090"), ("NVIDIA GB200", "gb200"), ("NVIDIA B200", "b200"),
     ("AMD Instinct MI300X", "mi300x"), ("AMD Instinct MI300X VF", "mi300x"), ("AMD Instinct MI325X", "mi325x"),
     ("AMD Instinct MI355X", "mi355x"), ("AMD Instinct MI250X/MI250", "mi250x"), ("AMD Instinct MI250", "mi250"),
     ("AMD Instinct MI210", "mi210"), ("Tesla T4", "t4"), ("NVIDIA GeForce RTX 2080 Ti", "rtx-2080-ti")],
)
def test_device_names_match_their_entry(device, key):
    assert match_spec(device).key == key


def test_memory_tells_apart_parts_of_one_name():
    # Both GH200 parts are named "GH200"; the runtime's memory (a little under the GB figure in GiB) decides.
    assert match_spec("NVIDIA GH200 144G HBM3e", 143_771 * 2**20).key == "gh200-144gb"
    assert match_spec("NVIDIA GH200 480GB", 97_871 * 2**20).key == "gh200"
    assert match_spec("NVIDIA GH200 480GB").key == "gh200"
    # A memory that fits no candidate keeps the first match rather than guessing another part.
    assert match_spec("NVIDIA H100 80GB HBM3", 10 * 2**30).key == "h100-sxm"
    assert match_spec("AMD Radeon Graphics") is None and match_spec("") is None


def test_measured_ceilings_take_precedence():
    calibration = Calibration(device="NVIDIA H200", copy_bandwidth=4.3e12, gemm_flops={"bf16": 7.9e14, "fp8": None})
    c = ceilings_for("NVIDIA H200", calibration)
    assert c.bandwidth == 4.3e12 and c.source["bandwidth"] == "measured"
    assert c.flops["bf16"] == 7.9e14 and c.source["bf16"] == "measured"
    assert c.source["fp8"] == "datasheet" and c.flops["fp8"] == load_specs()["h200"].peak["fp8"]
    assert ceilings_for("Some CPU", None) is None


def _kernel(dur_ns, flops, nbytes, precision="bf16"):
    return {"name": "k", "dur_ns": dur_ns, "flops": flops, "bytes_moved": nbytes, "precision": precision,
            "cost_model": "gemm", "est_occupancy_pct": None, "registers_per_thread": None}


def test_classification_rule():
    c = ceilings_for("NVIDIA H200", Calibration(device="NVIDIA H200", copy_bandwidth=4e12, gemm_flops={"bf16": 8e14}))
    rows = [
        _kernel(10_000, 1e6, 30e6),        # 3.0 TB/s at intensity 0.03: 75% of the memory roof
        _kernel(1_000_000, 7e11, 1e8),     # 700 TFLOP/s at intensity 7000: 87.5% of compute
        _kernel(2_000, 1e3, 1e6),          # 0.5 TB/s for 2 µs: latency-bound
        _kernel(50_000, 1e3, 1e6),         # 20 GB/s for 50 µs: under-utilised
        _kernel(1_000, None, None),        # no cost model
    ]
    k = place_on_roofline(conform_kernels(pl.DataFrame(rows)), c)
    assert k["roofline_class"].to_list() == ["memory-bound", "compute-bound", "latency-bound", "under-utilised",
                                             "unclassified"]
    assert k["memory_roof_pct"][0] == pytest.approx(75.0)
    assert k["compute_roof_pct"][1] == pytest.approx(87.5)
    # At intensity 1/30 the roof is the bandwidth's (4e12/30 FLOP/s): 1e11 FLOP/s attained is 75% of it.
    assert k["roof_pct"][0] == pytest.approx(75.0)
    # Only the per-launch metrics stay; the intermediates (peak, achieved rates, roof) are not kept.
    assert not {"_peak", "_achieved_flops", "_achieved_bytes", "_roof_flops", "peak_flops"} & set(k.columns)
    table = class_table(k)
    assert math.isclose(table["time_pct"].sum(), 100.0)


@pytest.mark.slow
def test_real_trace_roofline_and_figures(tmp_path, qwen_gpu_trace):
    kernels, ops = attribute(load_kineto(qwen_gpu_trace))
    costed = kernel_costs(kernels, ops)
    decode = costed.filter(pl.col("phase") == "decode")
    assert cost_coverage(decode) >= 0.95
    c = ceilings_for("NVIDIA H200")
    placed = place_on_roofline(decode, c)
    gemv = placed.filter(pl.col("name").str.starts_with("nvjet") & (pl.col("module").str.ends_with("down_proj")))
    assert (gemv["arithmetic_intensity"] < 2).all()  # batch-1 decode GEMV: about one FLOP per byte
    assert set(gemv["roofline_class"]) <= {"memory-bound", "under-utilised", "latency-bound"}
    from kernelscope.analyze.costs.roofline import kernel_points
    from kernelscope.report import figure_formats

    points = kernel_points(placed, "cost_model").with_columns(pl.col("name").alias("label"))
    token = figure_formats.chosen.set(("png", "svg"))  # both formats asked for: each figure written twice
    try:
        written = figures.roofline_physical(points, c, "decode", tmp_path, "roofline")
        written += figures.roofline_normalized(points, c, "decode", tmp_path, "normalized")
        written += figures.per_kernel_rooflines(points, c, "decode", tmp_path, "top")
        written += figures.histograms(placed, "decode", tmp_path, "hist")
    finally:
        figure_formats.chosen.reset(token)
    assert len(written) == 8 and {p.suffix for p in written} == {".png", ".svg"}
    for path in written:
        assert path.stat().st_size > 5_000
    assert Path(tmp_path / "roofline.png").read_bytes()[:4] == b"\x89PNG"
