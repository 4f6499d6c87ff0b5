"""`kernelscope whatif` and `kernelscope hw fit` as a user runs them, on committed device runs: the projection of
an H200 run onto the H100 is checked against the H100's own run of the same workload."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from tests.e2e.test_cli import assert_page_less_its_figures, kernelscope

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs"


@pytest.mark.parametrize("source, hw, other", [
    ("h200-qwen2-0.5b-ncu", "h100-sxm", "h100-qwen2-0.5b-ncu"),
    ("h100-qwen2-1.5b-b1-slim", "h200", "h200-qwen2-1.5b-slim"),
])
@pytest.mark.slow
def test_projection_onto_another_gpu_matches_its_measurement(source, hw, other, tmp_path):
    out = tmp_path / "w"
    result = kernelscope("whatif", str(RUNS / source), "--hw", hw, "--out", str(out))
    assert result.returncode == 0, result.stderr
    key = json.loads((out / "whatif.json").read_text())
    assert key["calibration_holds"] is True
    measured = json.loads((RUNS / other / "summary.json").read_text())["phases"]
    for phase in ("prefill", "decode"):
        estimate = key["phases"][phase]["estimate_ns"]
        actual = measured[phase]["device_time_per_step_us"] * 1e3
        assert abs(estimate / actual - 1) <= 0.15, (phase, estimate, actual)
    for name in ["whatif.md", "whatif.zh.md", "whatif.html", "whatif.zh.html", "tables/phases.csv",
                 "tables/groups.csv", "tables/scenarios.csv", "tables/requirements.csv", "tables/sweeps.csv",
                 "figures/sweep_bandwidth_decode.png", "figures/sweep_bf16_prefill.png"]:
        assert (out / name).is_file(), name
    for doc in ("whatif.md", "whatif.zh.md"):
        text = (out / doc).read_text(encoding="utf-8")
        assert not re.search(r"\bNone\b|\bnan\b|\{\{|<built-in", text)
    assert "## What latency goals need" in (out / "whatif.md").read_text()


@pytest.mark.slow
def test_own_device_options_sweeps_and_spec_file(tmp_path):
    run = RUNS / "h200-qwen2-1.5b-slim"
    out = tmp_path / "npu"
    spec = tmp_path / "npu.toml"
    spec.write_text('name = "NPU-1"\nmemory_bandwidth = "2TB/s"\n[peak]\nbf16 = "400TFLOPS"\nfp8 = "800TFLOPS"\n')
    result = kernelscope("whatif", str(run), "--hw", str(spec), "--set", "sram=128MB", "--set", "fuse=yes",
                         "--sweep", "bw=1:5:5", "--sweep", "sram=0.001:512:3", "--out", str(out), "--lang", "en")
    assert result.returncode == 0, result.stderr
    sweeps = pl.read_csv(out / "tables" / "sweeps.csv")
    assert sorted(set(sweeps["parameter"])) == ["bandwidth", "sram_bytes"]
    decode = (sweeps.filter((pl.col("parameter") == "bandwidth") & (pl.col("phase") == "decode"))
              .group_by("value").agg(pl.col("projected_per_step_ns").sum()).sort("value"))
    assert decode.height == 5 and decode["projected_per_step_ns"].is_sorted(descending=True)
    groups = pl.read_csv(out / "tables" / "groups.csv")
    elementwise = groups.filter(pl.col("group") == "elementwise")
    # Fused away, except kernels without a cost model, which keep their measured time.
    assert (elementwise["projected_per_step_ns"] == elementwise["carried_per_step_ns"]).all()
    assert elementwise["measured_per_step_ns"].sum() > 100 * elementwise["projected_per_step_ns"].sum()
    key = json.loads((out / "whatif.json").read_text())
    assert key["target"]["name"] == "NPU-1" and key["target"]["sram_bytes"] == 128e6
    assert key["options"] == {"fuse": True, "weight_bits": 16}  # both --set flags apply
    # Own device: the default target is the measuring device, so the estimate is the measurement itself.
    mine = tmp_path / "own"
    assert kernelscope("whatif", str(run), "--out", str(mine), "--lang", "en").returncode == 0
    phases = json.loads((mine / "whatif.json").read_text())["phases"]
    for phase in ("prefill", "decode"):
        assert phases[phase]["speedup"] == pytest.approx(1.0)
        assert phases[phase]["estimate_ns"] == pytest.approx(phases[phase]["measured_per_step_ns"])


@pytest.mark.slow
def test_fit_writes_a_model_whatif_reads(tmp_path):
    model = tmp_path / "model.toml"
    result = kernelscope("hw", "fit", str(RUNS / "h200-qwen2-0.5b-ncu"), str(RUNS / "h100-qwen2-0.5b-ncu"),
                         "--out", str(model))
    assert result.returncode == 0, result.stderr
    assert "decode" in result.stdout and "matmul" in result.stdout
    text = model.read_text()
    assert "[factors.matmul]" in text and "[device_latency]" in text
    out = tmp_path / "w"
    assert kernelscope("whatif", str(RUNS / "h200-qwen2-0.5b-ncu"), "--model", str(model), "--out", str(out),
                       "--lang", "en").returncode == 0
    assert json.loads((out / "whatif.json").read_text())["calibration_holds"] is True


@pytest.mark.slow
def test_bad_input_is_one_line_and_exit_2(tmp_path):
    bad_model = tmp_path / "m.toml"
    bad_model.write_text("[factors.matmul]\nlatency_ns = 1\n")
    cpu = tmp_path / "cpu"
    assert kernelscope("profile", "--new-tokens", "2", "--prompt-len", "8", "--repeats", "1", "--warmup", "0",
                       "--no-report", "--out", str(cpu)).returncode == 0
    run = str(RUNS / "h200-qwen2-0.5b-ncu")
    # A public GPU trace that names no device: the error says how to name it.
    unnamed = tmp_path / "unnamed"
    trace = Path(__file__).resolve().parents[1] / "data" / "public" / "hta" / "data__trace_filter__sampled_rank-0.json.gz"
    assert kernelscope("import", str(trace), "--no-report", "--out", str(unnamed)).returncode == 0
    cases = [
        (["whatif", str(unnamed)], "name its GPU with `kernelscope import --device NAME`"),
        (["whatif", str(cpu)], "a CPU run"),
        (["whatif", run, "--hw", "tpu-v9"], "no device matches"),
        (["whatif", run, "--set", "bw=3"], "needs a unit"),
        (["whatif", run, "--set", "bw=2TB/s", "--set", "bandwidth=3TB/s"], "'bandwidth' is given twice (also as 'bw')"),
        (["whatif", run, "--sweep", "bw=5:1:3"], "START < STOP"),
        (["whatif", run, "--hw", str(tmp_path / "missing.toml")], "no such spec file"),
        (["whatif", run, "--model", str(bad_model)], "not a projection model"),
        (["whatif", str(tmp_path / "nowhere")], "no such run directory"),
        (["hw", "fit", str(cpu)], "not a GPU run"),
    ]
    for args, message in cases:
        result = kernelscope(*args, *(["--out", str(tmp_path / "never")] if args[0] == "whatif" else []))
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, (args, result.stderr)
    assert not (tmp_path / "never").exists()


@pytest.mark.slow
def test_study_states_its_baseline_and_shows_each_projection_s_terms(tmp_path):
    """Baseline and target (with the options applied) come before any number; an option the target already
    has is not shown as 1.00×; every kernel row shows its terms, which add up to its projection; rows far from
    the measured time say why; efficiencies above 1 are explained; kernels sharing a friendly name keep #2."""
    run = RUNS / "h200-qwen2-0.5b-ncu"
    out = tmp_path / "w"
    result = kernelscope("whatif", str(run), "--hw", "h100-sxm", "--set", "fuse=yes", "--out", str(out), "--lang", "en")
    assert result.returncode == 0, result.stderr
    text = (out / "whatif.md").read_text()
    summary = text.split("## Summary", 1)[1].split("##", 1)[0].strip().splitlines()
    assert summary[0].startswith("- Baseline: the run as measured on NVIDIA H200. Target: NVIDIA H100")
    assert "element-wise chains fused" in summary[0] and not re.search(r"\d\.\d", summary[0])
    fuse = next(line for line in text.splitlines() if line.startswith("| fuse element-wise chains"))
    assert "already in the target" in fuse and "1.00×" not in fuse
    kernels = pl.read_csv(out / "tables" / "kernels.csv")
    # The terms: latency + max(memory, compute), or nothing where fused, or the measured time where carried.
    modelled = kernels.filter(pl.col("bound").is_in(["latency", "memory", "compute"]))
    for r in modelled.iter_rows(named=True):
        total = r["latency_per_step_ns"] + max(r["memory_per_step_ns"], r["compute_per_step_ns"])
        assert total == pytest.approx(r["projected_per_step_ns"], rel=1e-6), r["label"]
    # Measured per step, from the run's kernels: the kernel's time in the phase over the phase's steps.
    k = pl.read_parquet(run / "kernels.parquet")
    row = modelled.filter(pl.col("phase") == "decode").row(0, named=True)
    decode = k.filter(pl.col("phase") == "decode")
    steps = decode["step"].n_unique()
    assert row["measured_per_step_ns"] == pytest.approx(decode.filter(pl.col("name") == row["name"])["dur_ns"].sum() / steps)
    ratio = kernels["projected_per_step_ns"] / kernels["measured_per_step_ns"]
    far = kernels.filter(((ratio > 2) | (ratio < 0.5)) & pl.col("bound").is_in(["latency", "memory", "compute"]))
    assert far.height and (far["why"] == far["bound"]).all()
    for label in far["label"]:
        assert any(line.startswith(f"| {label} |") and "per launch" in line for line in text.splitlines())
    assert ("A memory efficiency above 1" in text) == bool((kernels["memory_efficiency"] > 1).any())
    for _, phase_rows in kernels.group_by("phase"):
        assert phase_rows["label"].n_unique() == phase_rows.height  # no two rows share a name


@pytest.mark.slow
def test_a_study_without_figures_is_the_study_less_its_figures(tmp_path):
    drawn, bare = tmp_path / "drawn", tmp_path / "bare"
    for out, extra in ((drawn, []), (bare, ["--figure-formats", "none"])):
        result = kernelscope("whatif", str(RUNS / "h200-qwen2-0.5b-ncu"), "--hw", "h100-sxm", "--lang", "en",
                             "--out", str(out), *extra)
        assert result.returncode == 0, result.stderr
    assert_page_less_its_figures(drawn, bare, "whatif.md")
