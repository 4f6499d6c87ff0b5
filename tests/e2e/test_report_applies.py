"""A report shows only what applies to its run: a CPU `profile` run and an imported GPU trace have no empty
table, no empty list, no sentence about something absent, and no GPU-only column on the CPU run; CPU ops get
categories from their names. Both languages are checked."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from tests.e2e.test_cli import kernelscope

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
def test_cpu_report_shows_only_what_applies(cpu_run, name):
    text = (cpu_run / "report" / name).read_text()
    _check_nothing_empty(text)
    for gpu_only in ("GPU busy", "GPU 忙碌", "Mean launch call", "平均启动调用", "Roofline", "屋脊线（Roofline）",
                     "| unclassified |", "| 未分类 |", "Op groups", "correlation id", "关联 id"):
        assert gpu_only not in text, gpu_only


@pytest.mark.parametrize("name", REPORTS)
def test_imported_trace_report_shows_only_what_applies(import_run, name):
    text = (import_run / "report" / name).read_text()
    _check_nothing_empty(text)


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
    "bfloat16", "float16", "bf16", "fp16", "fp32", "fp8", "tf32", "what-if", "megakernel", "NVLink", "AMD", "EPYC",
    "NVIDIA", "H200", "SXM", "H100", "RMSNorm", "SwiGLU", "compile", "ncu", "nsys", "stats", "Kineto", "e-", "Graph",
    "Hopper", "SDPA", "SiLU", "float", "bf", "fp", "tf", "FP", "BF", "INT",
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
def test_chinese_report_has_no_english_words_but_names(which, cpu_run, import_run):
    report = (cpu_run if which == "cpu" else import_run) / "report"
    text = (report / "report.zh.md").read_text()
    text = re.sub(r"(`+).+?\1", " ", text)  # code spans: names, paths, commands
    text = re.sub(r"\]\([^)]*\)", "]", text)  # figure file names
    model = json.loads((report.parent / "run.json").read_text()).get("workload") or {}
    allowed = _name_words(report) | TECHNICAL | set(re.findall(r"[A-Za-z][A-Za-z\-']+", model.get("model") or ""))
    english = {w for w in re.findall(r"[A-Za-z][A-Za-z\-']+", text) if w not in allowed}
    assert not english, sorted(english)


def test_chinese_typesetting_spaces_numbers_and_latin(cpu_run):
    text = (cpu_run / "report" / "report.zh.md").read_text()
    prose = re.sub(r"(`+).+?\1", " ", text)
    assert not re.search(r"[\u4e00-\u9fff][A-Za-z0-9]|[A-Za-z0-9%][\u4e00-\u9fff]", prose)
    assert re.search(r"共 [\d,]+ 个 CPU 算子", text)
