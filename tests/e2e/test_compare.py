"""`kernelscope compare` as a user runs it: two CPU runs of different batch sizes made here, and two real
device runs of one workload on an H200 and an H100 (committed run directories)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import polars as pl
import pytest

from tests.e2e.test_cli import assert_page_less_its_figures, kernelscope

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs"
H200, H100 = RUNS / "h200-qwen2-0.5b-ncu", RUNS / "h100-qwen2-0.5b-ncu"
TABLES = ["setup", "timings", "phases", "layers", "matched", "categories", "libraries", "changes", "notes"]


@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory) -> list[Path]:
    base = tmp_path_factory.mktemp("cpu-runs")
    paths = []
    for batch in (1, 2):
        out = base / f"b{batch}"
        result = kernelscope("profile", "--batch-size", str(batch), "--prompt-len", "16", "--new-tokens", "4",
                             "--repeats", "1", "--warmup", "0", "--no-report", "--out", str(out))
        assert result.returncode == 0, result.stderr
        paths.append(out)
    return paths


def _complete(out: Path, labels: list[str], phases: list[str]) -> str:
    """Checks every file of a comparison and returns the English Markdown."""
    for name in ["compare.md", "compare.zh.md", "compare.html", "compare.zh.html", "compare.json",
                 *(f"tables/{t}.csv" for t in TABLES), *(f"figures/compare_{p}.png" for p in phases)]:
        assert (out / name).is_file(), name
    text = (out / "compare.md").read_text(encoding="utf-8")
    zh = (out / "compare.zh.md").read_text(encoding="utf-8")
    for phase in phases:
        assert f"## {phase.capitalize()}" in text
    for heading in ["## Headline", "## Timings", "## Device time by phase", "### What changed most",
                    "### Kernels matched across runs", "### Layer → module → kernel", "### Kernel mix by category"]:
        assert heading in text, heading
    assert "## 要点" in zh and "### 跨运行匹配的 kernel" in zh
    for doc in (text, zh):
        assert not re.search(r"\bNone\b|\bnan\b|\{\{|\}\}|<built-in|<function", doc)
        for label in labels:
            assert f"**{label}**" in doc
    page = (out / "compare.html").read_text(encoding="utf-8")
    assert "<table>" in page and "data:image/png;base64," in page
    return text


@pytest.mark.slow
def test_two_cpu_runs_of_different_batch_sizes(cpu_runs, tmp_path):
    out = tmp_path / "cmp"
    result = kernelscope("compare", *map(str, cpu_runs), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == str(out.resolve())
    text = _complete(out, ["b1", "b2"], ["prefill", "decode"])  # labels from what differs: the batch size
    key = json.loads((out / "compare.json").read_text())
    assert key["baseline"] == "b1" and "batch_size_differs" in key["notes"]
    summaries = [json.loads((p / "summary.json").read_text()) for p in cpu_runs]
    decode = [s["phases"]["decode"]["cpu_time_per_step_us"] for s in summaries]  # CPU runs: CPU-op time
    assert key["phases"]["decode"]["device_time_per_step_us"]["b2"] == pytest.approx(decode[1])
    assert key["phases"]["decode"]["ratio"]["b2"] == pytest.approx(decode[1] / decode[0])
    assert f"spends {decode[1] / decode[0]:.2f}× the mean CPU op time per step of **b1**" in text
    # Layers compare per layer per step; every decoder-layer module of the tiny model is in both runs.
    layers = pl.read_csv(out / "tables" / "layers.csv")
    inside = layers.filter((pl.col("phase") == "decode") & (pl.col("layer_type") != "outside layers"))
    assert inside.height > 0
    assert inside["per_layer_step_ns[b1]"].min() >= 0 and inside["per_layer_step_ns[b2]"].null_count() == 0


def test_h200_and_h100_runs_of_one_workload(tmp_path):
    out = tmp_path / "gpus"
    result = kernelscope("compare", str(H200), str(H100), "--out", str(out), "--top", "10")
    assert result.returncode == 0, result.stderr
    text = _complete(out, ["h200", "h100"], ["prefill", "decode"])
    # Each run's launches as the report writes counts (thousands separated), read from its summary.
    for label, run in (("h200", H200), ("h100", H100)):
        launches = sum(p["kernel_count"] for p in json.loads((run / "summary.json").read_text())["phases"].values())
        assert f"; {launches:,} kernel launches" in text, label
    assert "| Device | NVIDIA H200 | NVIDIA H100 80GB HBM3 | yes |" in text
    matched = pl.read_csv(out / "tables" / "matched.csv")
    shown = text.split("### Kernels matched across runs")[1].split("###")[0]
    assert shown.count("\n| `") == 10 and matched.filter(pl.col("phase") == "prefill").height > 10
    changes = pl.read_csv(out / "tables" / "changes.csv")
    assert set(changes["run"]) == {"h100"} and changes.height > 0


@pytest.mark.slow
def test_labels_and_languages(tmp_path):
    out = tmp_path / "labelled"
    result = kernelscope("compare", str(H200), str(H100), "--labels", "before,after", "--lang", "en",
                         "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert (out / "compare.md").is_file() and not (out / "compare.zh.md").exists()
    header = pl.read_csv(out / "tables" / "phases.csv").columns
    assert "device_time_per_step_ns[after]" in header and "ratio[after/before]" in header


@pytest.mark.parametrize("args, message", [
    ([str(H200)], "at least two run directories"),
    ([str(H200), "/nonexistent/run"], "/nonexistent/run: no such run directory"),
    ([str(H200), str(H100), "--labels", "a"], "--labels: 1 label(s) for 2 runs"),
    ([str(H200), str(H100), "--labels", "a,a"], "--labels: labels must differ"),
    ([str(H200), str(H100), "--labels", "a/b,c"], "contains one of"),
])
@pytest.mark.slow
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path):
    out = tmp_path / "never"
    result = kernelscope("compare", *args, "--out", str(out))
    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr
    assert not out.exists() and not list(tmp_path.glob(".never*"))


def test_existing_output_is_not_overwritten(tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    result = kernelscope("compare", str(H200), str(H100), "--out", str(out))
    assert result.returncode == 2 and "already exists" in result.stderr
    assert (out / "keep.txt").read_text() == "mine" and len(list(out.iterdir())) == 1


@pytest.mark.slow
def test_comparison_page_in_headless_chromium(tmp_path):
    from tests.e2e.test_report import _browser, open_page

    chromium, playwright = _browser()
    out = tmp_path / "page"
    assert kernelscope("compare", str(H200), str(H100), "--out", str(out)).returncode == 0
    page_path = out / "compare.zh.html"
    with playwright.sync_playwright() as p:
        browser, page, errors = open_page(p, chromium, page_path)
        sizes = page.eval_on_selector_all("img", "els => els.map(e => [e.naturalWidth, e.naturalHeight])")
        tables = page.eval_on_selector_all("table", "els => els.length")
        toc = page.eval_on_selector_all("nav.toc a", "els => els.length")
        browser.close()
    assert errors == []
    assert len(sizes) == 2 and all(w > 0 and h > 0 for w, h in sizes)
    assert tables >= 13 and toc >= 10


@pytest.mark.slow
def test_traces_without_phase_markers_are_compared_whole(tmp_path):
    """Two public traces that mark no phase (a gpu-only MI210 trace, a Kineto sample on an H100): each whole trace
    is the one phase compared, with its kinds of work side by side, instead of an empty comparison. The totals are
    the traces' own device time, summed from the files."""
    public = Path(__file__).resolve().parents[1] / "data" / "public"
    traces = {"h100": public / "kineto" / "traces__before_fix_trace.json",
              "mi210": public / "tracelens" / "mi210__gpu_only_trace__gpu_only_trace.json.gz"}
    runs = []
    for label, trace in traces.items():
        out = tmp_path / label
        assert kernelscope("import", str(trace), "--no-report", "--out", str(out)).returncode == 0
        runs.append(str(out))
    result = kernelscope("compare", *runs, "--labels", "h100,mi210", "--out", str(tmp_path / "cmp"))
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "cmp" / "compare.md").read_text()
    assert "No run marks its phases" in text and "## Unknown" in text and "outside any phase range" not in text
    headline = text.split("## Headline", 1)[1].split("\n## ", 1)[0]
    # (mi210's trace holds more device time: its change is positive, and printed as it is, not escaped)
    assert "**mi210** spends" in headline and "+" in headline and "\\+" not in headline
    phases = pl.read_csv(tmp_path / "cmp" / "tables" / "phases.csv")
    for label, trace in traces.items():
        opener = gzip.open if trace.suffix == ".gz" else open
        with opener(trace, "rt") as f:
            events = json.load(f)["traceEvents"]
        total_us = sum(e["dur"] for e in events
                       if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
        assert abs(phases[f"device_time_ns[{label}]"][0] - total_us * 1000) <= len(events)  # µs → ns rounding
    categories = pl.read_csv(tmp_path / "cmp" / "tables" / "categories.csv")
    assert categories["phase"].unique().to_list() == ["unknown"] and categories.height > 1


@pytest.mark.slow
def test_a_comparison_without_figures_is_the_comparison_less_its_figures(tmp_path):
    drawn, bare = tmp_path / "drawn", tmp_path / "bare"
    for out, extra in ((drawn, []), (bare, ["--figure-formats", "none"])):
        result = kernelscope("compare", str(H200), str(H100), "--lang", "en", "--out", str(out), *extra)
        assert result.returncode == 0, result.stderr
    assert_page_less_its_figures(drawn, bare, "compare.md")
