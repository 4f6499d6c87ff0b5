"""Words that fit the run: a CPU run gets no GPU conclusions, kernels that reach neither roof are called
under-utilised with the rule beside the table, the what-if keeps the run as measured apart from hardware and design
options, the text explains only columns its tables have, numbers carry units, an AMD GPU has no compute capability,
the closing lines of an import fit the file (nsys summaries, one kernel, ranks, a gap launched before it began),
and a Chinese report whose figures are English says so. Real runs and traces; expected values from the files."""

from __future__ import annotations

import csv
import gzip
import json
import re
import shutil
from pathlib import Path

import polars as pl
import pytest

from kernelscope.cli import main
from tests.e2e.test_cli import kernelscope

DATA = Path(__file__).resolve().parents[1] / "data"
RUNS, PUBLIC = DATA / "runs", DATA / "public"
H200 = RUNS / "h200-qwen2-1.5b-slim"


@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("cpu-words")
    runs = []
    for batch in (1, 2):
        out = root / f"b{batch}"
        result = kernelscope("profile", "--batch-size", str(batch), "--prompt-len", "16", "--new-tokens", "6",
                             "--repeats", "2", "--warmup", "0", "--figure-formats", "none", "--out", str(out))
        assert result.returncode == 0, result.stderr
        runs.append(out)
    return runs


@pytest.mark.slow
def test_a_cpu_run_gets_no_gpu_conclusions(cpu_runs, tmp_path):
    run = cpu_runs[0]
    for name in ("report.md", "report.zh.md"):
        text = (run / "report" / name).read_text()
        assert "tensor core" not in text.lower() and "Tensor Core" not in text and "GPU busy" not in text
        assert "GPU 忙碌" not in text
    # The accelerator targets: the measured latency, and only goals faster than it.
    rows = list(csv.DictReader((run / "report" / "tables" / "accelerator_requirements.csv").open()))
    timings = json.loads((run / "run.json").read_text())["timings"]["plain"]
    for phase, measured in (("decode", timings["tpot_ms"]), ("prefill", timings["ttft_ms"])):
        goals = [float(r["target_ms"]) for r in rows if r["phase"] == phase]
        assert goals and all(goal <= measured + 1e-9 for goal in goals)
    out = tmp_path / "cmp"
    assert kernelscope("compare", *map(str, cpu_runs), "--out", str(out), "--figure-formats", "none").returncode == 0
    text = (out / "compare.md").read_text()
    assert "GPU busy" not in text and "| CPU busy (b1) |" in text.replace("CPU busy (b1) | CPU busy (b2)",
                                                                          "CPU busy (b1) |")


@pytest.mark.slow
def test_kernels_reaching_neither_roof_are_under_utilised_with_the_rule_beside(tmp_path):
    run = tmp_path / "h200"
    shutil.copytree(H200, run)
    assert kernelscope("report", str(run), "--figure-formats", "none").returncode == 0
    text = (run / "report" / "report.md").read_text()
    section = text.split("## Kernel classification")[1].split("\n## ")[0]
    assert "under-utilised otherwise: neither memory nor compute holds it back" in section
    assert "| under-utilised |" in section and "| balanced |" not in section.split("Measured classes")[0]
    classes = pl.read_csv(run / "report" / "tables" / "roofline_classes_decode.csv")
    assert "balanced" not in classes["roofline_class"].to_list()
    assert "Median intensity (FLOP/B)" in section
    assert "利用不足" in (run / "report" / "report.zh.md").read_text()


@pytest.mark.slow
def test_the_whatif_keeps_the_run_as_measured_apart(tmp_path):
    out = tmp_path / "wi"
    result = kernelscope("whatif", str(H200), "--hw", "h100-sxm", "--set", "fuse=yes", "--out", str(out),
                         "--figure-formats", "none", "--lang", "en")
    assert result.returncode == 0, result.stderr
    text = (out / "whatif.md").read_text()
    kernels = pl.read_parquet(H200 / "kernels.parquet").filter(pl.col("phase") == "decode")
    measured = kernels["dur_ns"].sum() / kernels["step"].n_unique()
    rows = [line for line in text.split("## Summary")[1].split("\n- Decode")[0].splitlines() if line.startswith("| ")]
    assert rows[2].startswith("| as is: measured on NVIDIA H200 | ") and f"{measured / 1e6:.3f} ms | 1.00× |" in rows[2]
    assert rows[3].startswith("| NVIDIA H100 80GB HBM3 hardware alone |")
    assert rows[4].startswith("| the design options alone, on NVIDIA H200 |")
    assert rows[5].startswith("| NVIDIA H100 80GB HBM3 with the design options |")
    # The fused column says what fusion removed: with the carried time it makes up what the kind of work measured.
    groups = pl.read_csv(out / "tables" / "groups.csv").filter(pl.col("projected_per_step_ns")
                                                                == pl.col("carried_per_step_ns"))
    assert groups.height and (groups["fused_per_step_ns"] > 0).all()
    assert ((groups["fused_per_step_ns"] + groups["carried_per_step_ns"] - groups["measured_per_step_ns"]).abs()
            < 1e-6 * groups["measured_per_step_ns"]).all()
    assert "| Fused away (measured) |" in text
    # int8 measured far below the H200's datasheet (another path than its tensor cores): the datasheet, said so.
    int8 = next(line for line in text.splitlines() if line.startswith("| int8 |"))
    assert "127 TFLOP/s" not in int8 and "the measured GEMM took another, slower path" in int8
    # Without a design option: no fused column, and no sentence about one.
    plain = tmp_path / "plain"
    assert kernelscope("whatif", str(H200), "--out", str(plain), "--figure-formats", "none",
                       "--lang", "en").returncode == 0
    text = (plain / "whatif.md").read_text()
    assert "Fused" not in text and "fused away" not in text
    assert len([line for line in text.split("## Summary")[1].split("\n- Decode")[0].splitlines()
                if line.startswith("| as is")]) == 1


@pytest.mark.slow
def test_a_whatif_that_carries_almost_everything_says_so(tmp_path):
    run = tmp_path / "vllm"
    trace = PUBLIC / "tracelens" / "inference__vllm_decode_full__graph_execution.json.gz"
    assert kernelscope("import", str(trace), "--out", str(run), "--no-report").returncode == 0
    out = tmp_path / "wi"
    result = subprocess_cli("whatif", str(run), "--out", str(out), "--figure-formats", "none", "--lang", "en")
    assert result.returncode == 0, result.stderr
    carried = next(r for r in csv.DictReader((out / "tables" / "calibration.csv").open()) if r["phase"] == "decode")
    assert float(carried["carried_pct"]) > 90
    assert (f"note: the model carries {float(carried['carried_pct']):.1f}% of decode's device time at its measured "
            "duration") in result.stdout
    assert result.stdout.splitlines()[-1] == str(out.resolve())


def subprocess_cli(*args: str):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "kernelscope", *args], capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_an_old_run_is_not_told_of_columns_it_lacks(tmp_path):
    run = tmp_path / "old"
    shutil.copytree(RUNS / "h100-qwen2-1.5b-b1-slim", run)
    kernels = pl.read_parquet(run / "kernels.parquet")  # written before launch calls were kept
    assert "launch_api" not in kernels.columns or kernels["launch_api"].is_null().all()
    assert kernelscope("report", str(run), "--figure-formats", "none").returncode == 0
    section = (run / "report" / "report.md").read_text().split("### Device time by phase")[1].split("\n### ")[0]
    header = next(line for line in section.splitlines() if line.startswith("| Phase"))
    assert "launch" not in header.lower()
    assert "median and mean launch call" not in section and "written before launch calls were kept" in section


@pytest.mark.slow
def test_numbers_carry_units_and_an_amd_gpu_has_no_compute_capability(cpu_runs, tmp_path):
    text = (cpu_runs[0] / "report" / "report.md").read_text()
    assert "0.00 GB" not in text and re.search(r"Parameters \| [\d,]+ \(2\.\d MB in float32\)", text)
    out = tmp_path / "mi300"
    trace = PUBLIC / "tracelens" / "traces__mi300__gaunernst_bert-small-uncased__1016001.json.gz"
    with gzip.open(trace, "rt") as f:
        props = json.load(f)["deviceProperties"][0]
    assert (props["computeMajor"], props["computeMinor"]) == (9, 4)
    assert kernelscope("import", str(trace), "--out", str(out), "--figure-formats", "none").returncode == 0
    text = (out / "report" / "report.md").read_text()
    assert "Compute capability" not in text and "| Architecture (ROCm) | gfx94x |" in text


def test_the_closing_lines_fit_the_file(tmp_path, capsys):
    # nsys kernel summaries: phases from their file names; no modules or ops, and advice for nsys.
    assert main(["import", str(DATA / "nsys" / "prefill.csv"), str(DATA / "nsys" / "decode.csv"),
                 "--out", str(tmp_path / "nsys"), "--no-report"]) == 0
    out = capsys.readouterr().out
    assert "100.0% of the device time has a phase, 0.0% a module" in out and "has a phase and a module" not in out
    assert ", 2 summary files" in out and "prof.step()" not in out
    # One kernel: "top kernel", never "top 1 kernels".
    assert main(["import", str(PUBLIC / "hta" / "data__triton_example__triton_example.json.gz"),
                 "--out", str(tmp_path / "one"), "--no-report"]) == 0
    out = capsys.readouterr().out
    assert "top kernel by total time:" in out and "top 1 kernels" not in out
    # Two ranks say so.
    ranks = sorted((DATA / "multi_gpu").glob("deepseek_v3_ep2_rank*.json.gz"))
    assert main(["import", *map(str, ranks), "--out", str(tmp_path / "ranks"), "--no-report"]) == 0
    assert ", 2 ranks" in capsys.readouterr().out.splitlines()[0]
    # The largest gap's closing kernel was launched before the gap began: no "0 ns into it".
    sampled = PUBLIC / "hta" / "data__trace_filter__sampled_rank-0.json.gz"
    assert main(["import", str(sampled), "--out", str(tmp_path / "gap"), "--no-report"]) == 0
    idle = next(line for line in capsys.readouterr().out.splitlines() if "GPU idle between kernels" in line)
    assert "0 ns into it" not in idle and "had been called before the gap began" in idle


@pytest.mark.slow
def test_a_chinese_report_with_english_figures_says_so(tmp_path, monkeypatch):
    from kernelscope.report import figure_jobs, figures

    monkeypatch.setattr(figures, "cjk_font", lambda families: None)  # a machine without a CJK font
    monkeypatch.setattr(figure_jobs, "default_helpers", lambda: 0)  # figures drawn in this process
    run = tmp_path / "run"
    shutil.copytree(RUNS / "h200-qwen2-0.5b-ncu", run)
    assert main(["-q", "report", str(run), "--lang", "en,zh"]) == 0
    zh = (run / "report" / "report.zh.md").read_text()
    assert "本报告中的图为英文" in zh and "![" in zh and ".zh.png" not in zh
    assert "figures of this report are in English" not in (run / "report" / "report.md").read_text()
