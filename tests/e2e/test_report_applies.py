"""A report shows only what applies to its run: a CPU `profile` run and an imported GPU trace have no empty
table, no empty list, no sentence about something absent, and no GPU-only column on the CPU run; CPU ops get
categories from their names. Both languages are checked."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.e2e.test_cli import CALIBRATION_DIR, kernelscope

REPORTS = ("report.md", "report.zh.md")
# Sentences that talk about what a run lacks, in either language.
ABSENCE = ["Not available", "not available", "不可用", "tables above", "上方分类表", "no hardware spec",
           "has no Python frames", "没有 Python 栈帧", "carries no unprofiled timings", "Not measured"]


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("applies") / "cpu"
    result = kernelscope("profile", "--out", str(out), "--prompt-len", "32", "--new-tokens", "8")
    assert result.returncode == 0, result.stderr
    return out


@pytest.fixture(scope="module")
def import_run(tmp_path_factory, qwen_gpu_trace) -> Path:
    out = tmp_path_factory.mktemp("applies") / "import"
    result = kernelscope("import", str(qwen_gpu_trace), "--out", str(out))
    assert result.returncode == 0, result.stderr
    return out


def _tables(text: str) -> list[list[str]]:
    """Every Markdown table as its lines."""
    tables, current = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    return tables + ([current] if current else [])


def _check_nothing_empty(text: str) -> None:
    for table in _tables(text):
        assert len(table) >= 3, f"table without rows: {table[0]}"
    blocks = [b.strip() for b in re.split(r"\n\s*\n", text) if b.strip()]
    for block, following in zip(blocks, blocks[1:] + [""], strict=True):
        # A sentence that announces something (ends with a colon) is followed by it: a table, a list or a figure.
        if block.endswith((":", "：")) and not block.startswith(("|", "- ", "#")):
            assert following.startswith(("|", "- ", "![", "**")), f"announced but absent after: {block[-80:]}"
    for needle in ABSENCE:
        assert needle not in text, needle


@pytest.mark.parametrize("name", REPORTS)
@pytest.mark.slow
def test_cpu_report_shows_only_what_applies(cpu_run, name):
    text = (cpu_run / "report" / name).read_text()
    _check_nothing_empty(text)
    for gpu_only in ("GPU busy", "GPU 忙碌", "Mean launch call", "平均启动调用", "Roofline", "屋脊线（Roofline）",
                     "| unclassified |", "| 未分类 |", "Op groups", "correlation id", "关联 id"):
        assert gpu_only not in text, gpu_only


@pytest.mark.parametrize("name", REPORTS)
@pytest.mark.slow
def test_imported_trace_report_shows_only_what_applies(import_run, name):
    text = (import_run / "report" / name).read_text()
    _check_nothing_empty(text)


@pytest.mark.slow
def test_cpu_ops_have_categories_from_their_names(cpu_run):
    kernels = pl.read_parquet(cpu_run / "kernels.parquet").filter(pl.col("phase") == "decode")
    mix = {r["category"]: r for r in _csv_rows(cpu_run / "report" / "tables" / "categories_decode.csv")}
    # Counted here from the op names alone: the matrix products of the tiny model's linear layers.
    gemm_ops = {"aten::mm", "aten::addmm", "aten::matmul", "aten::linear", "aten::bmm"}
    gemm_calls = kernels.filter(pl.col("name").is_in(gemm_ops)).height
    assert gemm_calls > 0 and int(mix["GEMM"]["launches"]) == gemm_calls
    attention = kernels.filter(pl.col("name").str.contains("scaled_dot_product"))
    assert int(mix["attention"]["launches"]) == attention.height > 0
    other = float(mix["other"]["time_pct"]) if "other" in mix else 0.0
    assert other < 5.0  # nearly every op of a decoder has a category
    text = (cpu_run / "report" / "report.md").read_text()
    assert re.search(r"\| GEMM \| aten::mm \|", text)
    zh = (cpu_run / "report" / "report.zh.md").read_text()
    assert "GEMM 矩阵乘" in zh and "CPU 上的矩阵乘法" in zh


def _csv_rows(path: Path) -> list[dict[str, str]]:
    return pl.read_csv(path, infer_schema=False).to_dicts()


# Words a Chinese report may keep in Latin letters besides names: units, acronyms and the tools' own names.
TECHNICAL = {
    "ns", "µs", "ms", "s", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "FLOP", "FLOPs", "MFLOP", "GFLOP", "TFLOP",
    "kFLOP", "B", "CPU", "GPU", "NPU", "SM", "SMs", "DRAM", "SRAM", "L1", "L2", "KV", "TTFT", "TPOT", "GEMM", "GEMV",
    "MoE", "softmax", "top-k", "split-K", "Split-K", "Tensor", "Core", "token", "tokens", "warp", "rank", "epilogue",
    "kernelscope", "torch", "profiler", "transformers", "python", "triton", "Triton", "PyTorch", "ATen", "CUDA",
    "CUPTI", "Nsight", "Compute", "Systems", "Perfetto", "JSON", "CSV", "EOS", "API", "hf", "engine", "True", "False",
    "Roofline", "NVTX", "id", "nn", "Module", "Python", "with_modules", "with_stack", "cuda", "cpu", "float32",
    "bfloat16", "float16", "bf16", "fp16", "fp32", "fp8", "tf32", "what-if", "megakernel", "NVLink", "AMD",
    "NVIDIA", "H200", "SXM", "H100", "RMSNorm", "SwiGLU", "compile", "ncu", "nsys", "stats", "Kineto", "e-", "Graph",
    "Hopper", "PDL", "SDPA", "SiLU", "float", "bf", "fp", "tf", "FP", "BF", "INT",
}


def _name_words(report: Path) -> set[str]:
    """Words of the kernel, op, library, module and layer-type names this run's tables hold (read from the CSV
    tables, not from the report)."""
    words: set[str] = set()
    for csv in report.glob("tables/*.csv"):
        frame = pl.read_csv(csv, infer_schema=False)
        for column in ("name", "label", "library", "layer_type", "layer_module", "module", "op", "kernels", "top_kernel"):
            if column in frame.columns:
                for value in frame[column].drop_nulls().to_list():
                    words |= set(re.findall(r"[A-Za-z][A-Za-z\-']+", value))
    return words


@pytest.mark.parametrize("which", ["cpu", "import"])
@pytest.mark.slow
def test_chinese_report_has_no_english_words_but_names(which, request):
    report = request.getfixturevalue(f"{which}_run") / "report"  # the import's run only where it is asked for
    text = (report / "report.zh.md").read_text()
    text = re.sub(r"(`+).+?\1", " ", text)  # code spans: names, paths, commands
    text = re.sub(r"\]\([^)]*\)", "]", text)  # figure file names
    info = json.loads((report.parent / "run.json").read_text())
    # Names the run itself holds (the model, the GPU, the host's CPU: "Intel Xeon Processor" on one machine,
    # "AMD EPYC" on another) are names, not English words.
    hardware = info.get("hardware") or {}
    names = " ".join(str(v or "") for v in ((info.get("workload") or {}).get("model"), hardware.get("name"),
                                             hardware.get("cpu")))
    allowed = _name_words(report) | TECHNICAL | set(re.findall(r"[A-Za-z][A-Za-z\-']+", names))
    english = {w for w in re.findall(r"[A-Za-z][A-Za-z\-']+", text) if w not in allowed}
    assert not english, sorted(english)


@pytest.mark.slow
def test_chinese_typesetting_spaces_numbers_and_latin(cpu_run):
    text = (cpu_run / "report" / "report.zh.md").read_text()
    prose = re.sub(r"(`+).+?\1", " ", text)
    assert not re.search(r"[\u4e00-\u9fff][A-Za-z0-9]|[A-Za-z0-9%][\u4e00-\u9fff]", prose)
    assert re.search(r"共 [\d,]+ 个 CPU 算子", text)


def _run_plain(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """kernelscope without -q, in `cwd`, with stderr not a terminal (no progress)."""
    env = dict(os.environ, KERNELSCOPE_CALIBRATION_DIR=str(CALIBRATION_DIR))
    return subprocess.run([sys.executable, "-m", "kernelscope", *args], capture_output=True, text=True,
                          timeout=600, env=env, cwd=cwd)


@pytest.mark.slow
def test_import_ends_with_a_summary_and_an_absolute_path(tmp_path, qwen_gpu_trace):
    result = _run_plain(tmp_path, "import", str(qwen_gpu_trace.resolve()), "--out", "relative-run")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    run = (tmp_path / "relative-run").resolve()
    assert lines[-1] == str(run)  # absolute, though --out was relative
    text = "\n".join(lines[:-1])
    kernels = pl.read_parquet(run / "kernels.parquet")
    # Computed here from the run's kernels: the phases' device time and the largest kernel by total time.
    for phase, group in kernels.group_by("phase"):
        total_ms = group["dur_ns"].sum() / 1e6
        steps = group["step"].n_unique() if phase[0] == "decode" else 1
        assert f"{phase[0]}: {total_ms:.3f} ms of device time" in text
        assert re.search(rf"^  {phase[0]}: .*, {steps} steps?(,|$)", text, re.M)
        assert (f"{steps} step" if steps == 1 else f"{steps} steps") in text
    top = kernels.group_by("name").agg(pl.col("dur_ns").sum()).sort("dur_ns", descending=True).row(0, named=True)
    assert f"{100 * top['dur_ns'] / kernels['dur_ns'].sum():5.1f}%" in text
    assert f"report: {run / 'report' / 'report.html'}" in text
    assert "top 5 kernels by total time:" in text and "attribution: 100.0%" in text


@pytest.mark.slow
def test_profile_ends_with_latency_bandwidth_and_time_per_phase(cpu_run):
    # The closing lines are made from the run directory; here they are read back for the fixture's CPU run.
    from kernelscope.commands.run_summary import terminal_summary

    text = terminal_summary(cpu_run)
    info = json.loads((cpu_run / "run.json").read_text())
    plain = info["timings"]["plain"]
    assert f"TTFT {plain['ttft_ms']:,.1f} ms" in text and f"{plain['tokens_per_s']:,.1f} tokens/s" in text
    kernels = pl.read_parquet(cpu_run / "kernels.parquet")
    decode = kernels.filter(pl.col("phase") == "decode")
    steps = decode["step"].n_unique()
    per_step = decode["bytes_moved"].sum() / steps
    rate = per_step / (plain["tpot_ms"] / 1e3)
    number, prefix = re.search(r"decode achieved ([\d,.]+) ([kMGT])B/s", text).groups()
    scale = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[prefix]
    shown = float(number.replace(",", "")) * scale
    # Equal to the rate within the digits shown (half a unit of the last one): "1.2 GB/s" stands for 1.15-1.25.
    decimals = len(number.split(".")[1]) if "." in number else 0
    assert abs(shown - rate) <= 0.5 * 10 ** -decimals * scale * (1 + 1e-9)
    assert "1 step\n" in text.replace("1 step,", "1 step\n") and "1 steps" not in text
    assert "top 5 CPU ops by total time:" in text and "aten::" in text


@pytest.mark.parametrize("hw", ["NVIDIA H200 = fast chip", "h100 sxm"])
def test_whatif_folders_have_no_equals_or_spaces(hw):
    from kernelscope.commands.whatif import _slug

    name = _slug(hw, "bandwidth=8e12, sram_bytes=1e9")
    assert not re.search(r"[=\s/]", name) and name
