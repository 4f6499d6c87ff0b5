"""End-to-end runs of the command line, as a user runs it."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import write_trace

ROOT = Path(__file__).resolve().parents[2]


# A folder that does not exist: no measured ceilings (the loader skips a missing folder), nothing left in /tmp.
CALIBRATION_DIR = Path(tempfile.gettempdir()) / "kernelscope-test-no-calibration"


def kernelscope(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    # Measured ceilings of the machine running the tests must not leak into the reports under test.
    env = dict(os.environ, KERNELSCOPE_CALIBRATION_DIR=str(CALIBRATION_DIR))
    return subprocess.run([sys.executable, "-m", "kernelscope", "-q", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=600, env=env)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "tiny"
    result = kernelscope("profile", "--out", str(out))  # the CPU default: tiny, prompt 128, 64 new tokens
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == str(out.resolve())
    return out


@pytest.mark.slow
def test_profile_writes_a_complete_run_directory(tiny_run):
    for name in ["run.json", "summary.json", "kernels.parquet", "ops.parquet", "trace.json.gz",
                 "report/report.md", "report/tables/kernels_decode.csv", "report/tables/layer_breakdown_decode.csv"]:
        assert (tiny_run / name).is_file(), name
    summary = json.loads((tiny_run / "summary.json").read_text())
    kernels = pl.read_parquet(tiny_run / "kernels.parquet")
    assert summary["kernel_count"] == kernels.height > 0
    # A CPU run: its CPU ops' self time, kept apart from device time (there is none).
    assert summary["kind"] == "cpu" and (kernels["kind"] == "cpu_op").all()
    assert summary["cpu_time_us"] == pytest.approx(kernels["dur_ns"].sum() / 1e3)
    assert summary["device_time_us"] == 0.0
    assert summary["phases"]["decode"]["device_time_us"] is None and summary["phases"]["decode"]["cpu_time_us"] > 0
    assert summary["attribution_coverage"] >= 0.995
    assert set(summary["phases"]) == {"prefill", "decode"}
    assert summary["phases"]["decode"]["steps"] == 63
    assert sum(p["kernel_count"] for p in summary["phases"].values()) == kernels.height
    for key in ("ttft_ms", "tpot_ms", "tokens_per_s", "e2e_ms"):
        assert summary["timings"][key] > 0
    run = json.loads((tiny_run / "run.json").read_text())
    assert run["schema_version"] == 1 and run["workload"]["model"] == "tiny"
    assert run["timings"]["tokens_match"] and run["timings"]["profiled_tokens_match"]
    assert run["model"]["layer_types"] == {"0": "Qwen2DecoderLayer", "1": "Qwen2DecoderLayer"}


@pytest.mark.slow
def test_report_shows_phases_stats_and_layer_breakdown(tiny_run):
    text = (tiny_run / "report" / "report.md").read_text()
    for heading in ["## Setup", "## Timings", "### CPU operator time by phase", "### Prefill", "### Decode",
                    "## Layer → module → CPU op breakdown", "#### Layer types", "## Appendix: methodology"]:
        assert heading in text, heading
    assert "| Time % | Library | Category | CPU op | Description | Total | Instances | Avg | Med | Min | Max | StdDev |" in text
    assert "PyTorch ATen (CPU)" in text and "## Appendix: full CPU op names" in text
    assert "`mlp.down_proj`" in text and "Qwen2DecoderLayer" in text


@pytest.mark.slow
def test_report_rerenders_without_profiling(tiny_run):
    report = tiny_run / "report" / "report.md"
    report.unlink()
    result = kernelscope("report", str(tiny_run), "--top", "5")
    assert result.returncode == 0, result.stderr
    text = report.read_text()
    assert "5 of " in text and "### Decode" in text


@pytest.mark.slow
def test_import_round_trips_our_own_trace(tiny_run, tmp_path):
    out = tmp_path / "imported"
    result = kernelscope("import", str(tiny_run / "trace.json.gz"), "--out", str(out))
    assert result.returncode == 0, result.stderr
    original = pl.read_parquet(tiny_run / "kernels.parquet")
    imported = pl.read_parquet(out / "kernels.parquet")
    assert imported.select("name", "dur_ns", "phase", "step", "module", "op").equals(
        original.select("name", "dur_ns", "phase", "step", "module", "op"))


@pytest.mark.slow
def test_import_of_a_real_gpu_trace(qwen_gpu_trace, tmp_path):
    out = tmp_path / "gpu"
    result = kernelscope("import", str(qwen_gpu_trace), "--out", str(out), "--figure-formats", "png,svg")
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["attribution_coverage"] == 1.0 and summary["device"] == "NVIDIA H200"
    assert summary["phases"]["decode"]["steps"] == 3
    text = (out / "report" / "report.md").read_text()
    assert "### Prefill" in text and "### Decode" in text and "nvjet_sm90" in text  # full names: appendix
    assert "| cuBLASLt | GEMM | cuBLASLt GEMM (BF16" in text
    assert summary["catalog_coverage"] >= 0.99
    # The per-kernel table of the report adds up to the trace's own kernel total.
    table = pl.read_csv(out / "report" / "tables" / "kernels_decode.csv")
    kernels = pl.read_parquet(out / "kernels.parquet").filter(pl.col("phase") == "decode")
    assert table["total_ns"].sum() == kernels["dur_ns"].sum()
    # Roofline: the H200 ceilings measured on the GPU machine (shipped with kernelscope), cost models for
    # (nearly) all decode time, figures on disk.
    assert "## Roofline" in text and "4.14 TB/s (measured)" in text
    assert summary["cost_coverage"] >= 0.95
    for name in ["roofline_decode", "roofline_normalized_decode", "roofline_top_decode", "histograms_decode"]:
        assert (out / "report" / "figures" / f"{name}.png").stat().st_size > 5000
        assert (out / "report" / "figures" / f"{name}.svg").is_file()
        assert f"](figures/{name}.png)" in text
    classes = pl.read_csv(out / "report" / "tables" / "roofline_classes_decode.csv")
    assert abs(classes["time_pct"].sum() - 100) < 1e-6 and classes["launches"].sum() == kernels.height


def _without_figures(markdown: str) -> str:
    """A report's Markdown less its figures: image lines gone, and sections left with no text (the histograms'
    heading and intro) gone too. Blank-line runs collapsed."""
    lines = [line for line in markdown.splitlines() if not (line.startswith("![") and "](figures/" in line)]
    sections, current = [], []
    for line in lines:
        if line.startswith("## ") and current:
            sections.append(current)
            current = []
        current.append(line)
    sections.append(current)
    kept = [section for section in sections if not section[0].startswith("## Histograms")]
    text = "\n".join(line for section in kept for line in section)
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text.strip()


def assert_page_less_its_figures(drawn: Path, bare: Path, page: str) -> None:
    """`bare` (written with --figure-formats none) holds no figures, and its Markdown `page` is `drawn`'s less the
    image lines (blank-line runs collapsed)."""
    assert any((drawn / "figures").iterdir()) and not (bare / "figures").exists()
    with_figures = (drawn / page).read_text()
    images = [line for line in with_figures.splitlines() if line.startswith("![") and "](figures/" in line]
    assert images
    expected = "\n".join(line for line in with_figures.splitlines() if line not in images)
    collapse = re.compile(r"\n{3,}")
    assert collapse.sub("\n\n", (bare / page).read_text()).strip() == collapse.sub("\n\n", expected).strip()
    assert "<img" not in (bare / page).with_suffix(".html").read_text()


@pytest.mark.slow
def test_a_report_without_figures_is_the_report_less_its_figures(qwen_gpu_trace, tmp_path):
    """`--figure-formats none`: the same tables and words as the report with figures, no figure file or link,
    and matplotlib never loaded (the process says which modules it imported)."""
    drawn = tmp_path / "drawn"
    assert kernelscope("import", str(qwen_gpu_trace), "--out", str(drawn)).returncode == 0
    bare = tmp_path / "bare"
    shutil.copytree(drawn, bare)
    probe = ("import sys; from kernelscope.cli import main; code = main(['-q', 'report', sys.argv[1], "
             "'--figure-formats', 'none']); print('matplotlib' in sys.modules); sys.exit(code)")
    env = dict(os.environ, KERNELSCOPE_CALIBRATION_DIR=str(CALIBRATION_DIR))
    result = subprocess.run([sys.executable, "-c", probe, str(bare)], capture_output=True, text=True, env=env,
                            timeout=600)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "False"
    assert (drawn / "report" / "figures").is_dir() and not (bare / "report" / "figures").exists()
    for name in ("report.md", "report.zh.md", "report.html", "report.zh.html"):
        text = (bare / "report" / name).read_text()
        assert "figures/" not in text and "<img" not in text and "data:image" not in text
    drawn_text, bare_text = ((run / "report" / "report.md").read_text() for run in (drawn, bare))
    assert "](figures/" in drawn_text
    # The methodology appendix says the figures were left out, and only there.
    note = "- Figures: not drawn for this report (`--figure-formats none`)"
    said = [line for line in bare_text.splitlines() if line.startswith(note)]
    assert len(said) == 1 and note not in drawn_text
    assert _without_figures(bare_text.replace(said[0] + "\n", "")) == _without_figures(drawn_text)
    tables = sorted(p.name for p in (drawn / "report" / "tables").iterdir())
    assert tables == sorted(p.name for p in (bare / "report" / "tables").iterdir())
    for name in tables:
        assert (bare / "report" / "tables" / name).read_bytes() == (drawn / "report" / "tables" / name).read_bytes()


@pytest.mark.slow
def test_import_of_several_files_makes_ranks(qwen_gpu_trace, tmp_path):
    out = tmp_path / "ranks"
    result = kernelscope("import", str(qwen_gpu_trace), str(qwen_gpu_trace), "--out", str(out))
    assert result.returncode == 0, result.stderr
    kernels = pl.read_parquet(out / "kernels.parquet")
    assert sorted(kernels["rank"].unique().to_list()) == [0, 1]


def _assert_clean_failure(result: subprocess.CompletedProcess, *needles: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("kernelscope: error: ") and "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize(
    ("content", "needle"),
    [(b"", "file is empty"), (b'{"traceEvents": [{"ph": "X"', "truncated"), (b"<html>", "not JSON"),
     (b'{"events": []}', "not a Kineto trace")],
)
@pytest.mark.slow
def test_import_of_bad_files_fails_cleanly(tmp_path, content, needle):
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    out = tmp_path / "out"
    result = kernelscope("import", str(bad), "--out", str(out))
    _assert_clean_failure(result, str(bad), needle)
    assert not out.exists() and not any(p.name.startswith(".out") for p in tmp_path.iterdir())


def test_import_of_missing_file_and_existing_out(tmp_path, qwen_gpu_trace):
    _assert_clean_failure(kernelscope("import", str(tmp_path / "none.json")), "no such file")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("someone's")  # a folder with something in it is never taken over
    _assert_clean_failure(kernelscope("import", str(qwen_gpu_trace), "--out", str(taken)), "already exists")
    assert [p.name for p in taken.iterdir()] == ["notes.txt"]


def test_trace_without_any_event_of_interest(tmp_path):
    path = write_trace(tmp_path / "empty.json", [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0}])
    _assert_clean_failure(kernelscope("import", str(path), "--out", str(tmp_path / "o")),
                          "its one event is not a kernel, copy, runtime call, CPU op or annotation")


def test_trace_of_calls_without_device_activity(tmp_path):
    events = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10 * i,
               "dur": 5, "args": {"correlation": i}} for i in range(3)]
    path = write_trace(tmp_path / "calls.json", events)
    _assert_clean_failure(kernelscope("import", str(path), "--out", str(tmp_path / "o")),
                          "no kernels, memory copies or CPU ops in this trace (only 3 runtime calls)")


def test_legacy_autograd_profiler_export_is_refused_as_not_kineto(tmp_path):
    """A real torch.autograd.profiler export of torch <= 1.7 (tests/data/refused): events without `cat`."""
    legacy = Path(__file__).resolve().parents[1] / "data" / "refused" / "luxmea__profiler_trace.json"
    events = json.loads(legacy.read_text())
    out = tmp_path / "o"
    _assert_clean_failure(kernelscope("import", str(legacy), "--out", str(out)),
                          f"none of its {len(events):,} events is a kernel",
                          "not a Kineto trace (a legacy torch.autograd.profiler export")
    assert not out.exists()


@pytest.mark.slow
def test_ranks_with_and_without_device_activity_are_not_one_run(tmp_path):
    """A CPU-only rank (its ops stand in for kernels with their self time) beside a GPU rank: its CPU time would
    count as device time, and the report failed. Refused, naming the file; nothing written."""
    public = Path(__file__).resolve().parents[1] / "data" / "public" / "hta"
    cpu_rank = public / "data__rank_non_gpu__rank_non_gpu.json.gz"
    gpu_rank = public / "data__trace_filter__sampled_rank-1.json.gz"
    out = tmp_path / "o"
    _assert_clean_failure(kernelscope("import", str(cpu_rank), str(gpu_rank), "--out", str(out)), str(cpu_rank),
                          "records no device activity", str(gpu_rank))
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--model", "no-such-model"], "unknown preset 'no-such-model'"),
        (["--prompt-len", "1000", "--new-tokens", "100"], "exceeds the model's 1024 positions"),
        (["--dtype", "fp7"], "unknown dtype 'fp7'"),
        (["--layers", "0"], "--layers must be at least 1"),
        (["--model", "deepseek-v3-full", "--device", "cpu"], "its weights take 2684.1 GB in float32"),
        (["--device", "cuda"] if not __import__("torch").cuda.is_available() else ["--device", "tpu"], "--device"),
    ],
)
@pytest.mark.slow
def test_profile_bad_arguments_fail_cleanly(tmp_path, args, needle):
    out = tmp_path / "run"
    _assert_clean_failure(kernelscope("profile", "--out", str(out), *args), needle)
    assert not out.exists()


@pytest.mark.slow
def test_profile_layers_sets_the_depth_of_a_preset(tmp_path):
    out = tmp_path / "run"
    result = kernelscope("profile", "--model", "tiny-moe", "--layers", "2", "--prompt-len", "8", "--new-tokens", "2",
                         "--repeats", "1", "--warmup", "0", "--no-report", "--out", str(out))
    assert result.returncode == 0, result.stderr
    model = json.loads((out / "run.json").read_text())["model"]
    assert model["num_layers"] == 2 and model["config"]["num_hidden_layers"] == 2
    kernels = pl.read_parquet(out / "kernels.parquet")
    assert sorted(kernels["layer"].drop_nulls().unique().to_list()) == [0, 1]  # the CPU ops of two layers, no more


@pytest.mark.slow
def test_profile_checkpoint_without_config(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    _assert_clean_failure(kernelscope("profile", "--model", str(ckpt)), "no config.json", str(ckpt))


def test_report_of_a_non_run(tmp_path):
    _assert_clean_failure(kernelscope("report", str(tmp_path)), "not a kernelscope run directory")
    _assert_clean_failure(kernelscope("report", str(tmp_path / "x")), "no such run directory")


def test_usage_errors_exit_2():
    result = kernelscope("profile", "--batch-size", "-3")
    assert result.returncode == 2 and "non-negative" in result.stderr


@pytest.mark.slow
def test_hw_list_show_and_calibrate(tmp_path):
    listing = kernelscope("hw", "list")
    assert listing.returncode == 0 and "NVIDIA H100 SXM" in listing.stdout and "MI300X" in listing.stdout
    shown = kernelscope("hw", "show", "NVIDIA H200")
    assert shown.returncode == 0 and "4.80 TB/s" in shown.stdout and "sources" in shown.stdout
    _assert_clean_failure(kernelscope("hw", "show", "Voodoo 3"), "no device matches")
    out = tmp_path / "cpu.json"
    calibrated = kernelscope("hw", "calibrate", "--device", "cpu", "--quick", "--out", str(out))
    assert calibrated.returncode == 0, calibrated.stderr
    result = json.loads(out.read_text())
    assert result["device_type"] == "cpu" and result["copy_bandwidth"] > 1e8
    assert result["gemm_flops"]["fp32"] > 1e8


@pytest.mark.slow
def test_ncu_needs_a_gpu_and_a_profile_run(tmp_path, qwen_gpu_trace):
    import shutil as sh

    run = tmp_path / "run"
    sh.copytree(Path(__file__).parents[1] / "data" / "runs" / "h200-qwen2-0.5b-ncu", run)
    if not __import__("torch").cuda.is_available():
        _assert_clean_failure(kernelscope("ncu", str(run)), "no CUDA GPU")
    imported = tmp_path / "imported"
    assert kernelscope("import", str(qwen_gpu_trace), "--out", str(imported)).returncode == 0
    _assert_clean_failure(kernelscope("ncu", str(imported)), "needs a run made by `kernelscope profile`")


@pytest.mark.slow
def test_import_of_ncu_directory_and_into_a_run(tmp_path):
    import shutil as sh

    data = Path(__file__).parents[1] / "data"
    details = (data / "ncu" / "h200-qwen2-0.5b-decode.details.csv").read_text().splitlines()
    start = next(i for i, line in enumerate(details) if line.startswith('"ID"'))
    header, body = details[start], details[start + 1:]
    directory = tmp_path / "per-kernel"
    for launch in sorted({line.split(",")[0] for line in body}):
        sub = directory / f"kernel{launch.strip(chr(34))}"
        sub.mkdir(parents=True)
        (sub / "ncu.details.csv").write_text("\n".join([header, *[x for x in body if x.split(",")[0] == launch]]))
    own = tmp_path / "own"
    result = kernelscope("import", str(directory), "--out", str(own))
    assert result.returncode == 0, result.stderr
    per_kernel = pl.read_csv(own / "report" / "tables" / "ncu_kernels.csv")
    classes = pl.read_csv(own / "report" / "tables" / "ncu_classes.csv")
    overall = classes.filter(pl.col("measured_class") == "overall").row(0, named=True)
    for column in ["sm_throughput_pct", "dram_throughput_pct", "achieved_occupancy_pct", "l2_hit_rate_pct"]:
        assert overall[column] == pytest.approx(per_kernel[column].mean(), rel=1e-9)
    run = tmp_path / "run"
    sh.copytree(data / "runs" / "h200-qwen2-0.5b-ncu", run)
    (run / "ncu.parquet").unlink()
    result = kernelscope("import", str(data / "ncu" / "h200-qwen2-0.5b-decode.raw.csv"), "--into", str(run))
    assert result.returncode == 0, result.stderr
    joined = pl.read_parquet(run / "ncu.parquet")
    assert joined["name"].null_count() == 0 and joined.height == 6
    assert "| SM throughput |" in (run / "report" / "report.md").read_text()
