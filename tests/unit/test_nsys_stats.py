"""nsys stats kernel summaries: parsing every accepted layout, clear errors for bad input, and kernel statistics of
summary rows (one row standing for `instances` launches) next to single launches."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from kernelscope.analyze.kernel_stats import STAT_COLUMNS, kernel_summary
from kernelscope.analyze.launch_counts import launch_count
from kernelscope.analyze.structure.phases import phase_table, step_table
from kernelscope.analyze.summary import summarize
from kernelscope.commands.importers.nsys_stats import phase_from_file_name, summary_kernels
from kernelscope.contracts.run import Run
from kernelscope.contracts.run_info import RunInfo
from kernelscope.contracts.tables import conform_kernels
from kernelscope.errors import UserError
from kernelscope.load.nsys_stats import is_nsys_stats, read_nsys_stats
from kernelscope.load.rundir import read_run

DATA = Path(__file__).parents[1] / "data"
FA3 = ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90"
       "<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1>>, cutlass::bfloat16_t, float, cutlass::arch::Sm90>>>>"
       "(T1::Params)")
RMS = "void vllm::rms_norm_kernel<c10::BFloat16, 8, 4>(c10::BFloat16 *, const c10::BFloat16 *, const c10::BFloat16 *, float, int, int)"

KERN_SUM_CSV = f'''Generating SQLite file profile.sqlite from profile.nsys-rep
Processing [profile.sqlite] with [/opt/nvidia/nsight-systems/2024.5.1/host-linux-x64/reports/cuda_gpu_kern_sum.py]...
"Time (%)","Total Time (ns)","Instances","Avg (ns)","Med (ns)","Min (ns)","Max (ns)","StdDev (ns)","Name"
71.4,5000000,400,12500.0,12400.0,11800,15100,610.5,nvjet_tst_128x64_64x8_1x2_h_bz_TNT
21.4,1500000,200,7500.0,7488.0,7104,8321,201.9,"{FA3}"
7.1,500000,250,2000.0,1984.0,1856,2720,75.2,"{RMS}"

Processing [profile.sqlite] with [cuda_gpu_mem_time_sum.py]...
"Time (%)","Total Time (ns)","Count","Avg (ns)","Med (ns)","Min (ns)","Max (ns)","StdDev (ns)","Operation"
100.0,40000,10,4000.0,4000.0,3900,4100,50.0,"[CUDA memcpy Host-to-Device]"
'''

NVTX_KERN_SUM_CSV = '''"NVTX Range","Style","PID","TID","NVTX Inst","Kern Inst","Total Time (ns)","Avg (ns)","Med (ns)","Min (ns)","Max (ns)","StdDev (ns)","Kernel Name"
":ks.phase:decode:0","PushPop",4242,4242,1,2,20000,10000.0,10000.0,9000,11000,1414.2,"nvjet_tst_64x8_64x16_4x1_v_bz_splitK_TNT"
":ks.phase:decode:0","PushPop",4242,4242,1,1,3000,3000.0,3000.0,3000,3000,0.0,"triton_poi_fused_mul_silu_1"
":ks.phase:decode:1","PushPop",4242,4242,1,2,22000,11000.0,11000.0,10000,12000,1414.2,"nvjet_tst_64x8_64x16_4x1_v_bz_splitK_TNT"
"llm:ks.phase:prefill","PushPop",4242,4242,1,1,90000,90000.0,90000.0,90000,90000,0.0,"nvjet_tst_256x128_64x4_1x2_h_bz_coopA_TNT"
":ks.module:model.layers.0.mlp","PushPop",4242,4242,2,2,23000,11500.0,11500.0,10000,13000,2121.3,"nvjet_tst_64x8_64x16_4x1_v_bz_splitK_TNT"
"","",4242,4242,0,3,1500,500.0,500.0,400,600,100.0,"void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char *, 1>>(int, at::native::FillFunctor<float>, std::array<char *, 1>)"
'''

TSV_HUMAN = (
    "Time\tTotal Time\tInstances\tAvg\tMed\tMin\tMax\tStdDev\tName\n"
    "60.0%\t1.200 s\t300\t4.000 ms\t3.950 ms\t1.250 ms\t9.875 ms\t1.125 ms\tnvjet_tst_320x128_64x3_1x2_h_bz_coopB_TNT\n"
    "25.0%\t500.000 ms\t20000\t25.000 μs\t24.500 μs\t18.250 μs\t61.125 μs\t3.375 μs\ttriton_red_fused_add_mean_pow_rsqrt_2\n"
    "15.0%\t300.000 ms\t60000\t5.000 µs\t4.875 µs\t875 ns\t9.500 µs\t625 ns\tvoid at::native::elementwise_kernel<128, 2>(int)\n"
)

REDUCED_TSV = (
    "Some notes copied with the table.\n\n"
    "Time\tTotal Time\tInstances\t    Name\n"
    "80.0%\t  8.000 ms\t  64\t    nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNN\n"
    "20.0%\t  2.000 ms\t  128\t    triton_poi_fused_cat_3\n"
)

TABLE = """[5/8] Executing 'cuda_gpu_kern_sum' stats report

 Time (%)  Total Time (ns)  Instances  Avg (ns)   Med (ns)   Min (ns)  Max (ns)  StdDev (ns)                Name
 --------  ---------------  ---------  ---------  ---------  --------  --------  -----------  --------------------------------
     75.0        6,000,000      1,000    6,000.0    5,950.0     5,100     8,200        410.0  void gemv2T_kernel_val<int, int, 128>(float)
     25.0        2,000,000         40   50,000.0   50,000.0    49,000    51,000        800.0  triton_per_fused_softmax_0

[6/8] Executing 'cuda_gpu_mem_time_sum' stats report
"""

GB_SUM_CSV = '''"Time (%)","Total Time (ns)","Instances","Avg (ns)","Med (ns)","Min (ns)","Max (ns)","StdDev (ns)","GridXYZ","BlockXYZ","Name"
60.0,600000,100,6000.0,6000.0,5000,7000,500.0,"  66    1    1","  384    1    1","nvjet_tst_64x8_64x16_4x1_v_bz_splitK_TNT"
40.0,400000,50,8000.0,8000.0,7500,9500,300.0,"  132    1    1","  384    1    1","nvjet_tst_64x8_64x16_4x1_v_bz_splitK_TNT"
'''


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_csv_with_exact_columns_preamble_and_quoted_names(tmp_path):
    path = write(tmp_path, "kern_sum.csv", KERN_SUM_CSV)
    assert is_nsys_stats(path)
    df = read_nsys_stats(path)
    assert df.columns == ["name", "total_ns", "instances", "avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns",
                          "time_pct", "nvtx_range"]
    assert df["name"].to_list() == ["nvjet_tst_128x64_64x8_1x2_h_bz_TNT", FA3, RMS]  # the memcpy table is not read
    assert df["total_ns"].to_list() == [5_000_000, 1_500_000, 500_000]
    assert df["instances"].to_list() == [400, 200, 250]
    assert df["avg_ns"].to_list() == [12500.0, 7500.0, 2000.0]
    assert df["med_ns"].to_list() == [12400.0, 7488.0, 1984.0]
    assert df["min_ns"].to_list() == [11800.0, 7104.0, 1856.0]
    assert df["max_ns"].to_list() == [15100.0, 8321.0, 2720.0]
    assert df["stddev_ns"].to_list() == [610.5, 201.9, 75.2]
    assert df["time_pct"].to_list() == [71.4, 21.4, 7.1]
    assert df["nvtx_range"].null_count() == 3
    assert df.schema["total_ns"] == pl.Int64 and df.schema["instances"] == pl.Int64


def test_thousands_separators_in_quoted_csv_fields(tmp_path):
    text = ('"Time (%)","Total Time (ns)","Instances","Avg (ns)","Med (ns)","Min (ns)","Max (ns)","StdDev (ns)","Name"\n'
            '100.0,"3,150,000","1,050","3,000.0","2,990.0","2,100","4,800","312.5",triton_poi_fused_add_4\n')
    df = read_nsys_stats(write(tmp_path, "sep.csv", text))
    row = df.row(0, named=True)
    assert (row["total_ns"], row["instances"], row["avg_ns"], row["med_ns"], row["min_ns"], row["max_ns"],
            row["stddev_ns"]) == (3_150_000, 1050, 3000.0, 2990.0, 2100.0, 4800.0, 312.5)


def test_nvtx_projected_summary(tmp_path):
    df = read_nsys_stats(write(tmp_path, "nvtx_kern_sum.csv", NVTX_KERN_SUM_CSV))
    assert df.height == 6
    assert df["instances"].to_list() == [2, 1, 2, 1, 2, 3]  # Kern Inst, not NVTX Inst
    assert df["nvtx_range"].to_list()[:2] == [":ks.phase:decode:0", ":ks.phase:decode:0"]
    assert df["nvtx_range"][5] is None
    assert df["time_pct"].null_count() == 6  # this report has no Time column
    assert df["pid"].to_list() == [4242] * 6 and df["tid"].to_list() == [4242] * 6


def test_tab_separated_table_with_human_units(tmp_path):
    df = read_nsys_stats(write(tmp_path, "copied.txt", TSV_HUMAN))
    assert df["total_ns"].to_list() == [1_200_000_000, 500_000_000, 300_000_000]
    assert df["instances"].to_list() == [300, 20000, 60000]
    assert df["avg_ns"].to_list() == [4_000_000.0, 25_000.0, 5_000.0]  # ms, μs (Greek mu), µs (micro sign)
    assert df["med_ns"].to_list() == [3_950_000.0, 24_500.0, 4_875.0]
    assert df["min_ns"].to_list() == [1_250_000.0, 18_250.0, 875.0]
    assert df["max_ns"].to_list() == [9_875_000.0, 61_125.0, 9_500.0]
    assert df["stddev_ns"].to_list() == [1_125_000.0, 3_375.0, 625.0]
    assert df["time_pct"].to_list() == [60.0, 25.0, 15.0]


def test_reduced_four_column_header_with_padding(tmp_path):
    df = read_nsys_stats(write(tmp_path, "reduced.tsv", REDUCED_TSV))
    assert df["name"].to_list() == ["nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNN", "triton_poi_fused_cat_3"]
    assert df["total_ns"].to_list() == [8_000_000, 2_000_000]
    assert df["instances"].to_list() == [64, 128]
    for column in ("avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns"):
        assert df[column].null_count() == 2


def test_fixed_width_table_output(tmp_path):
    df = read_nsys_stats(write(tmp_path, "stats.txt", TABLE))
    assert df["name"].to_list() == ["void gemv2T_kernel_val<int, int, 128>(float)", "triton_per_fused_softmax_0"]
    assert df["total_ns"].to_list() == [6_000_000, 2_000_000]
    assert df["instances"].to_list() == [1000, 40]
    assert df["med_ns"].to_list() == [5950.0, 50000.0]


def test_grid_and_block_columns_are_kept(tmp_path):
    df = read_nsys_stats(write(tmp_path, "gb.csv", GB_SUM_CSV))
    assert df["grid_x"].to_list() == [66, 132] and df["block_x"].to_list() == [384, 384]
    assert df["grid_y"].to_list() == [1, 1] and df["block_z"].to_list() == [1, 1]


def test_time_unit_in_the_header(tmp_path):
    text = ('"Time (%)","Total Time (us)","Instances","Avg (us)","Med (us)","Min (us)","Max (us)","StdDev (us)","Name"\n'
            "100.0,1500.5,3,500.167,500.0,499.5,501.0,0.764,k\n")
    row = read_nsys_stats(write(tmp_path, "us.csv", text)).row(0, named=True)
    assert row["total_ns"] == 1_500_500 and row["min_ns"] == 499_500.0 and row["stddev_ns"] == 764.0


def test_sniffing(tmp_path):
    assert is_nsys_stats(write(tmp_path, "a.csv", KERN_SUM_CSV))
    assert is_nsys_stats(write(tmp_path, "b.txt", REDUCED_TSV))
    assert not is_nsys_stats(write(tmp_path, "ncu.csv", '"ID","Process ID","Kernel Name","Metric Name"\n"0","1","k","x"\n'))
    assert not is_nsys_stats(write(tmp_path, "t.json", '{"traceEvents": []}'))
    # the CUDA API summary has Name but counts calls, not kernel instances
    assert not is_nsys_stats(write(tmp_path, "api.csv", '"Time (%)","Total Time (ns)","Num Calls","Avg (ns)","Name"\n'
                                                        "100.0,10,1,10.0,cudaLaunchKernel\n"))
    assert not is_nsys_stats(tmp_path / "missing.csv")
    assert not is_nsys_stats(tmp_path)


@pytest.mark.parametrize(("text", "problem"), [
    (None, "no such file"),
    ("", "empty file"),
    ("\n  \n", "empty file"),
    ("just some words\nand more\n", "no nsys stats kernel summary header"),
    ('"Time (%)","Total Time (ns)","Instances","Style","Range"\n1,2,3,PushPop,r\n', "line 1: missing column(s) Name"),
    ('"Time (%)","Avg (ns)","Instances","Name"\n1,2,3,k\n', "missing column(s) Total Time"),
    ('"Total Time (ns)","Instances","Name"\n', "line 1: the header is followed by no kernel rows"),
    ('"Total Time (ns)","Instances","Name"\n100,1,a\n12x,3,b\n', "line 3: cannot read Total Time (ns) value '12x'"),
    ("Time\tTotal Time\tInstances\tName\n5%\t1.5 ks\t3\tk\n", "line 2: cannot read Total Time value '1.5 ks'"),
    ('"Total Time (ns)","Instances","Name"\n100,2.5,a\n', "line 2: cannot read Instances value '2.5'"),
    ('"Total Time (ns)","Instances","Name"\n100,0,a\n', "line 2: cannot read Instances value '0'"),
    ('"Total Time (ns)","Instances","Name"\n100,2,\n', "line 2: empty kernel name"),
    ('"Total Time (ns)","Instances","Name"\n100,2,void f<int, int>(int)\n', "line 2: 4 fields, but the header has 3"),
    ('"Time (%)","Total Time (ns)","Instances","Name"\n5 ms,100,2,k\n', "line 2: cannot read Time (%) value '5 ms'"),
])
def test_bad_input_is_one_clear_error(tmp_path, text, problem):
    path = tmp_path / "stats.csv"
    if text is not None:
        path.write_text(text, encoding="utf-8")
    with pytest.raises(UserError) as error:
        read_nsys_stats(path)
    message = str(error.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    assert problem in message


def test_not_utf8_is_a_clear_error(tmp_path):
    path = tmp_path / "stats.csv"
    path.write_bytes(b'"Total Time (ns)","Instances","Name"\n100,1,\xff\xfe\n')
    with pytest.raises(UserError, match="not UTF-8 text"):
        read_nsys_stats(path)


def _summary_kernels(table: pl.DataFrame, phase: str = "decode") -> pl.DataFrame:
    return conform_kernels(table.select(
        "name", pl.lit("kernel").alias("kind"), pl.col("total_ns").alias("dur_ns"), "instances",
        "min_ns", "max_ns", "med_ns", "stddev_ns", pl.lit(phase).alias("phase"),
        pl.lit(None, dtype=pl.Int64).alias("step"), pl.lit(None, dtype=pl.Int64).alias("start_ns"),
    ))


def test_kernel_summary_of_summary_rows_reproduces_the_input(tmp_path):
    table = read_nsys_stats(write(tmp_path, "kern_sum.csv", KERN_SUM_CSV))
    stats = kernel_summary(_summary_kernels(table))
    assert stats["name"].to_list() == table["name"].to_list()
    for column in ("total_ns", "instances", "avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns"):
        assert stats[column].to_list() == table[column].to_list(), column
    assert stats["time_pct"].round(1).to_list() == table["time_pct"].to_list()


def test_kernel_summary_of_a_reduced_table_leaves_unknown_statistics_null(tmp_path):
    stats = kernel_summary(_summary_kernels(read_nsys_stats(write(tmp_path, "r.tsv", REDUCED_TSV))))
    assert stats["avg_ns"].to_list() == [125_000.0, 15_625.0]  # total / instances
    for column in ("med_ns", "min_ns", "max_ns", "stddev_ns"):
        assert stats[column].null_count() == 2, column


def test_kernel_summary_pools_several_summary_rows_and_single_launches():
    rng = np.random.default_rng(7)
    groups = [rng.integers(5_000, 9_000, size=n).astype(float) for n in (40, 25, 1)]
    rows = [
        {"name": "nvjet_tst_64x8_64x16_4x1_v_bz_splitK_TNT", "kind": "kernel", "dur_ns": int(g.sum()),
         "instances": len(g), "min_ns": g.min(), "max_ns": g.max(), "med_ns": float(np.median(g)),
         "stddev_ns": float(g.std(ddof=1)) if len(g) > 1 else 0.0}
        for g in groups[:2]
    ]
    single = {"name": rows[0]["name"], "kind": "kernel", "dur_ns": int(groups[2][0]), "instances": None,
              "min_ns": None, "max_ns": None, "med_ns": None, "stddev_ns": None}
    kernels = pl.DataFrame([*rows, single])
    everything = np.concatenate(groups)
    stat = kernel_summary(kernels).row(0, named=True)
    assert stat["instances"] == 66 and stat["total_ns"] == int(everything.sum())
    assert stat["avg_ns"] == pytest.approx(everything.mean())
    assert stat["min_ns"] == everything.min() and stat["max_ns"] == everything.max()
    assert stat["stddev_ns"] == pytest.approx(everything.std(ddof=1), rel=1e-12)
    assert stat["med_ns"] is None  # a median cannot be combined from medians


def test_kineto_run_gives_the_same_kernel_summary_as_counting_rows():
    """Before `instances` existed, kernel_summary counted rows; on a trace-based run nothing changes."""
    kernels = read_run(DATA / "runs" / "h200-qwen2-0.5b-ncu").kernels
    assert kernels["instances"].to_list() == [1] * kernels.height  # added on read for runs without the column
    for by in (None, ["phase"]):
        keys = [*(by or []), "name"]
        old = kernels.group_by(keys).agg(
            pl.col("dur_ns").sum().alias("total_ns"), pl.len().cast(pl.Int64).alias("instances"),
            pl.col("dur_ns").mean().alias("avg_ns"), pl.col("dur_ns").median().alias("med_ns"),
            pl.col("dur_ns").min().cast(pl.Float64).alias("min_ns"),
            pl.col("dur_ns").max().cast(pl.Float64).alias("max_ns"),
            pl.col("dur_ns").std(ddof=1).fill_null(0.0).alias("stddev_ns"),
        )
        new = kernel_summary(kernels, by)
        joined = old.join(new, on=keys, suffix="_new")
        assert joined.height == old.height == new.height
        for column in STAT_COLUMNS[1:]:
            assert joined[column].to_list() == joined[f"{column}_new"].to_list(), column


def test_instances_default_to_one():
    k = pl.DataFrame({"name": ["a", "a", "b"], "dur_ns": [1, 2, 3], "instances": [None, 4, None]})
    assert conform_kernels(k)["instances"].to_list() == [1, 4, 1]
    assert conform_kernels(k.drop("instances"))["instances"].to_list() == [1, 1, 1]
    assert conform_kernels(k).select(launch_count()).item() == 6


def test_phases_of_summary_rows_claim_no_steps(tmp_path):
    kernels = _summary_kernels(read_nsys_stats(write(tmp_path, "kern_sum.csv", KERN_SUM_CSV)))
    row = phase_table(kernels).row(0, named=True)
    assert row["kernel_count"] == 850 and row["device_time_ns"] == 7_000_000
    for column in ("steps", "device_time_per_step_ns", "kernels_per_step", "span_ns", "busy_pct", "mean_gap_ns",
                   "mean_launch_ns", "median_launch_ns"):
        assert row[column] is None, column
    assert step_table(kernels).height == 0
    summary = summarize(Run(kernels=kernels, ops=pl.DataFrame(),
                            info=RunInfo(source="import", schema_version=1)))
    assert summary.kernel_count == 850 and summary.kernel_rows == 3
    assert summary.phases["decode"].steps is None
    assert summary.phases["decode"].device_time_per_step_us is None
    assert math.isclose(summary.device_time_us, 7000.0)


def test_phases_and_steps_from_kernelscope_nvtx_ranges(tmp_path):
    kernels, meta = summary_kernels(write(tmp_path, "run_nvtx_kern_sum.csv", NVTX_KERN_SUM_CSV))
    assert meta.report == "nvtx_kern_sum" and meta.phase_from == "nvtx"
    # module-range rows are dropped (their kernels are counted under the phase range); rows outside every range stay
    assert kernels.height == 5
    assert kernels["phase"].to_list() == ["decode", "decode", "decode", "prefill", "unknown"]
    assert kernels["step"].to_list() == [0, 0, 1, None, None]
    assert int(kernels["instances"].sum()) == 9 and int(kernels["dur_ns"].sum()) == 136_500
    phases = {row["phase"]: row for row in phase_table(kernels).iter_rows(named=True)}
    assert phases["decode"]["steps"] == 2 and phases["decode"]["kernels_per_step"] == 2.5
    assert phases["decode"]["device_time_per_step_ns"] == 22_500
    assert step_table(kernels)["kernel_count"].to_list() == [3, 2]


def test_nested_foreign_nvtx_ranges_are_refused(tmp_path):
    text = ('"NVTX Range","Style","PID","TID","NVTX Inst","Kern Inst","Total Time (ns)","Avg (ns)","Med (ns)",'
            '"Min (ns)","Max (ns)","StdDev (ns)","Kernel Name"\n'
            '":forward","PushPop",1,1,4,8,800,100.0,100.0,90,110,5.0,"nvjet_tst_64x8_64x16_4x1_v_bz_TNT"\n'
            '":attention","PushPop",1,1,4,4,400,100.0,100.0,90,110,5.0,"nvjet_tst_64x8_64x16_4x1_v_bz_TNT"\n')
    path = write(tmp_path, "decode_nvtx.csv", text)
    with pytest.raises(UserError, match="listed under 2 NVTX ranges"):
        summary_kernels(path)
    flat = write(tmp_path, "decode_flat.csv", text.replace("nvjet_tst_64x8_64x16_4x1_v_bz_TNT\"\n", "x\"\n", 1))
    kernels, meta = summary_kernels(flat)
    assert kernels["phase"].to_list() == ["decode", "decode"] and meta.phase_from == "file name"


@pytest.mark.parametrize(("name", "phase"), [
    ("prefill.csv", "prefill"), ("sglang_extend_kern_sum.csv", "prefill"), ("Decode-rank0.txt", "decode"),
    ("kern_sum.csv", "unknown"), ("prefill_and_decode.csv", "unknown"),
])
def test_phase_from_file_name(name, phase):
    assert phase_from_file_name(Path(name)) == phase
