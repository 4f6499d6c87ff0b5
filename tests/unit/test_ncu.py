"""Nsight Compute exports captured on the H200: parsing both CSV layouts, units, the join to a run's kernels and
the measured class tables."""

import csv
import io
import json
import shutil
import sys
from pathlib import Path

import polars as pl
import pytest

from kernelscope.analyze.costs.ncu_measurements import (
    base_function_name,
    join_measurements,
    measured_by_kernel,
    measured_class_table,
)
from kernelscope.cli import main
from kernelscope.errors import UserError
from kernelscope.load import rundir
from kernelscope.load.ncu import normalize, parse_number, read_ncu_csv, read_ncu_directory

NCU = Path(__file__).parents[1] / "data" / "ncu"
RAW = NCU / "h200-qwen2-0.5b-decode.raw.csv"
DETAILS = NCU / "h200-qwen2-0.5b-decode.details.csv"
RUN = Path(__file__).parents[1] / "data" / "runs" / "h200-qwen2-0.5b-ncu"


def test_units_and_numbers():
    assert parse_number("1,234.5") == 1234.5 and parse_number("n/a") is None and parse_number("-") is None
    assert normalize(3.07, "us") == (3070.0, "ns") and normalize(2.0, "usecond") == (2000.0, "ns")
    assert normalize(11.42, "Gbyte/s") == (11.42e9, "byte/second")
    assert normalize(35.07, "Kbyte") == (35070.0, "byte") and normalize(12.0, "%") == (12.0, "%")


def test_raw_and_details_pages_agree():
    raw, details = read_ncu_csv(RAW), read_ncu_csv(DETAILS)
    assert raw.launches.height == details.launches.height == 6
    a, b = raw.launches.sort("launch"), details.launches.sort("launch")
    assert a["kernel_name"].to_list() == b["kernel_name"].to_list()
    for column, tolerance in [("duration_us", 0.01), ("dram_bytes", 0.01), ("l2_hit_rate_pct", 0.01),
                              ("achieved_occupancy_pct", 0.01), ("memory_throughput_bps", 0.01),
                              ("mem_busy_pct", 0.02), ("max_bandwidth_pct", 0.02)]:
        for x, y in zip(a[column], b[column], strict=True):
            assert x == pytest.approx(y, rel=tolerance, abs=0.011), column  # details round to 2 decimals
    assert (a["grid_x"] >= 1).all() and (a["block_x"] >= 32).all()
    assert raw.metrics.height > 6 * 100  # every collected metric, in the long table


def test_gemv_measurements_are_plausible():
    launches = read_ncu_csv(NCU / "h200-qwen2-1.5b-decode-top20.raw.csv").launches
    lm_head = launches.filter(pl.col("kernel_name").str.starts_with("nvjet_sm90_tst_384x8"))
    # The LM head reads its 151936 × 1536 bf16 weight (467 MB) per token: DRAM bytes say the same.
    assert lm_head["dram_bytes"].mean() == pytest.approx(151936 * 1536 * 2, rel=0.03)
    assert (lm_head["dram_throughput_pct"] > 60).all()
    assert (lm_head["flops_tensor"] > 0).all() and (lm_head["flops"] >= lm_head["flops_tensor"]).all()


def test_base_function_name_is_the_same_in_both_spellings():
    kineto = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
              "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)")
    nsight = ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<c10::BFloat16>, "
              "std::array<char *, (unsigned long)3>>(int, T2, T3)")
    assert base_function_name(kineto) == base_function_name(nsight) == "vectorized_elementwise_kernel"
    assert base_function_name("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT") == "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"


def test_join_to_the_run_matches_every_profiled_launch():
    profile = rundir.read_run(RUN)
    launches = read_ncu_csv(RAW).launches
    joined = join_measurements(profile.kernels, launches, "decode")
    assert joined["name"].null_count() == 0
    assert set(profile.info.ncu.kernels) <= set(joined["name"])
    for row in joined.iter_rows(named=True):
        assert base_function_name(row["name"]) == base_function_name(row["kernel_name"])
        assert row["phase"] == "decode" and row["step"] == 0
    stored = pl.read_parquet(RUN / "ncu.parquet")
    assert sorted(joined["kernel_id"].to_list()) == sorted(stored["kernel_id"].to_list())


def test_class_means_are_means_of_the_kernels():
    by_kernel = measured_by_kernel(read_ncu_csv(RAW).launches.with_columns(pl.col("kernel_name").alias("name")),
                                   None, 5000)
    table = measured_class_table(by_kernel)
    overall = table.filter(pl.col("measured_class") == "overall").row(0, named=True)
    for column in ["sm_throughput_pct", "dram_throughput_pct", "l2_hit_rate_pct", "duration_us"]:
        assert overall[column] == pytest.approx(by_kernel[column].mean())
    for row in table.filter(pl.col("measured_class") != "overall").iter_rows(named=True):
        members = by_kernel.filter(pl.col("measured_class") == row["measured_class"])
        assert row["kernels"] == members.height
        assert row["dram_throughput_pct"] == pytest.approx(members["dram_throughput_pct"].mean())
    assert table.filter(pl.col("measured_class") != "overall")["kernels"].sum() == by_kernel.height


def test_directory_of_per_kernel_details(tmp_path):
    # The layout of one sub-directory per kernel, made from the real details export, one kernel each.
    rows = list(csv.reader(DETAILS.read_text().splitlines()[DETAILS.read_text().splitlines().index(
        next(line for line in DETAILS.read_text().splitlines() if line.startswith('"ID"'))):]))
    header, body = rows[0], rows[1:]
    for launch in sorted({r[0] for r in body}):
        sub = tmp_path / f"kernel_{launch}"
        sub.mkdir()
        with (sub / "ncu.details.csv").open("w", newline="") as f:
            writer = csv.writer(f, quoting=csv.QUOTE_ALL)
            writer.writerow(header)
            writer.writerows(r for r in body if r[0] == launch)
    tables = read_ncu_directory(tmp_path)
    single = read_ncu_csv(DETAILS).launches.sort("launch")
    assert tables.launches.height == single.height
    assert sorted(tables.launches["duration_us"].to_list()) == sorted(single["duration_us"].to_list())
    assert tables.launches["launch"].n_unique() == single.height


@pytest.mark.parametrize(
    ("content", "message"),
    [("hello\nworld\n", "not an Nsight Compute CSV"), ('"ID","Process ID"\n"0","1"\n', "lacks column"),
     ('"ID","Kernel Name","Metric Name","Metric Value"\n', "lacks column")],
)
def test_bad_ncu_files(tmp_path, content, message):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(UserError, match=message):
        read_ncu_csv(path)


@pytest.mark.slow
def test_report_of_the_real_run_shows_measurements(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    from kernelscope.pipeline import rerender

    rerender(run, 20)
    text = (run / "report" / "report.md").read_text()
    assert "Measured classes" in text and "memory-bound" in text
    assert "Analytic cost models against the measurements" in text
    table = pl.read_csv(run / "report" / "tables" / "ncu_vs_analytic.csv")
    gemv = table.filter(pl.col("name").str.starts_with("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"))
    assert gemv["bytes_ratio"][0] == pytest.approx(1.0, abs=0.1)  # analytic bytes ≈ measured DRAM bytes


def _fake_ncu(tmp_path, output: str, code: int) -> str:
    script = tmp_path / "ncu"
    script.write_text(f"#!/bin/sh\necho '{output}'\nexit {code}\n")
    script.chmod(0o755)
    return str(script)


@pytest.mark.parametrize(
    ("output", "code", "message"),
    [("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission", 1, "ERR_NVGPUCTRPERM"),
     ("==ERROR== Failed to initialize the profiler: LibraryNotLoaded", 1, "LibraryNotLoaded"),
     ("==ERROR== something else broke", 3, r"ncu failed \(exit 3\)")],
)
def test_ncu_failures_become_one_line_errors(tmp_path, output, code, message):
    from kernelscope.capture import nsight_compute as nc

    with pytest.raises(UserError, match=message) as err:
        nc.available_metrics(_fake_ncu(tmp_path, output, code))
    assert "\n" not in str(err.value)


def test_missing_ncu(monkeypatch):
    from kernelscope.capture import nsight_compute as nc

    monkeypatch.setattr(nc.shutil, "which", lambda name: None)
    monkeypatch.setattr(nc.glob, "glob", lambda pattern: [])
    monkeypatch.setattr(nc.os, "access", lambda path, mode: False)
    with pytest.raises(UserError, match="ncu .* not found"):
        nc.find_ncu()


def test_metric_choice_keeps_only_what_the_device_has():
    from kernelscope.capture import nsight_compute as nc

    available = {"dram__bytes_read", "sm__ops_path_tensor_src_bf16_dst_fp32",
                 "sm__ops_path_tensor_src_bf16_dst_fp32_sparsity_on", "sm__ops_path_tensor_op_hmma_src_fp16"}
    chosen = nc.choose_metrics(available)
    assert chosen == ["dram__bytes_read.sum", "sm__ops_path_tensor_src_bf16_dst_fp32.sum"]


# Every kernel of the committed runs that Nsight Compute measured, in both spellings: the trace's (`name`) and
# Nsight Compute's (`kernel_name`, namespaces and casts stripped). The `kernels` command must say the same of both.
_RUNS = Path(__file__).resolve().parents[1] / "data" / "runs"


def _spelling_pairs() -> list[tuple[str, str]]:
    pairs: set[tuple[str, str]] = set()
    for path in sorted(_RUNS.glob("*/ncu.parquet")):
        table = pl.read_parquet(path, columns=["name", "kernel_name"]).drop_nulls()
        pairs |= set(table.unique().iter_rows())
    return sorted(pairs)


def test_kernels_command_answers_alike_for_both_spellings(capsys):
    pairs = _spelling_pairs()
    assert len(pairs) >= 20  # the committed runs measure dozens of kernels
    names = [n for pair in pairs for n in pair]
    stdin, sys.stdin = sys.stdin, io.StringIO("\n".join(names) + "\n")
    try:
        assert main(["kernels", "--json"]) == 0
    finally:
        sys.stdin = stdin
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [a["name"] for a in answers] == names
    for (trace_name, ncu_name), trace, ncu in zip(pairs, answers[0::2], answers[1::2], strict=True):
        # The friendly name carries the precision and the tile: the same words for both spellings.
        fields = ("library", "category", "friendly_name")
        assert [trace[f] for f in fields] == [ncu[f] for f in fields], (trace_name, ncu_name)
        assert trace["library"] != "unknown", trace_name
