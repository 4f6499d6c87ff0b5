"""DeepSeek-OCR-2 end to end on CPU (the reduced preset): images → vision stages as phases → report."""

import csv
import json
from pathlib import Path

import polars as pl
import pytest
from PIL import Image

from kernelscope.cli import main
from tests.e2e.test_cli import kernelscope

STAGES = ["sam_encoder", "vision_encoder", "multi_modal_projector"]
NEW_TOKENS = 3


@pytest.fixture(scope="module")
def ocr_run(tmp_path_factory) -> Path:
    # Three synthetic pages: 6, 2 and 0 crops; the seed's generation settings with few new tokens.
    out = tmp_path_factory.mktemp("runs") / "ocr"
    result = kernelscope("profile", "--model", "deepseek-ocr-2-tiny", "--images", "3", "--new-tokens",
                         str(NEW_TOKENS), "--no-repeat-ngram-size", "20", "--repeats", "1", "--warmup", "0",
                         "--out", str(out))
    assert result.returncode == 0, result.stderr
    return out


@pytest.mark.slow
def test_each_vision_stage_prefill_and_decode_is_a_phase_with_device_time(ocr_run):
    summary = json.loads((ocr_run / "summary.json").read_text())
    assert list(summary["phases"]) == [*STAGES, "prefill", "decode"]
    for name, phase in summary["phases"].items():
        assert phase["cpu_time_us"] > 0, name  # a CPU run: its CPU ops stand in for kernels
    # Per image: each stage and prefill once, decode new_tokens - 1 steps.
    assert [summary["phases"][p]["steps"] for p in [*STAGES, "prefill"]] == [3, 3, 3, 3]
    assert summary["phases"]["decode"]["steps"] == 3 * (NEW_TOKENS - 1)
    assert summary["attribution_coverage"] >= 0.995
    kernels = pl.read_parquet(ocr_run / "kernels.parquet")
    assert sorted(kernels["generation"].unique().to_list()) == [0, 1, 2]
    # The vision stages run in the first forward pass only.
    assert kernels.filter(pl.col("phase").is_in(STAGES))["step"].is_null().all()


@pytest.mark.slow
def test_run_json_records_images_settings_and_unchanged_tokens(ocr_run):
    run = json.loads((ocr_run / "run.json").read_text())
    workload = run["workload"]
    assert [image["crops"] for image in workload["images"]] == [6, 2, 0]
    assert [image["image_tokens"] for image in workload["images"]] == [1121, 545, 257]
    assert workload["image_settings"] == {"base_size": 1024, "image_size": 768, "crop_mode": True}
    assert workload["image_source"] == "synthetic" and workload["stages"] == STAGES
    assert (workload["temperature"], workload["no_repeat_ngram_size"]) == (0.0, 20)
    assert workload["decoding"] == "greedy, no repeated 20-grams, EOS ignored"
    assert run["timings"]["tokens_match"] and run["timings"]["profiled_tokens_match"]
    assert len(run["timings"]["images"]) == 3 and all(t["ttft_ms"] > 0 for t in run["timings"]["images"])
    assert list(run["model"]["stages"]) == STAGES


@pytest.mark.slow
def test_report_shows_the_stage_table_and_the_per_image_table(ocr_run):
    text = (ocr_run / "report" / "report.md").read_text()
    phases = text.split("### CPU operator time by phase", 1)[1].split("###", 1)[0]
    rows = [line.split("|")[1].strip() for line in phases.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[1:] == ["SAM encoder", "vision encoder", "projector", "prefill", "decode"]
    for heading in ["### Per image", "### SAM encoder", "### Vision encoder", "### Projector", "### Prefill",
                    "### Decode", "#### Layer types", "DeepseekOcr2SamVisionLayer", "DeepseekOcr2VisionEncoderLayer"]:
        assert heading in text, heading
    assert "| Image | Source | Size | Crops | Prompt tokens | SAM encoder |" in text
    assert "The vision stages take" in text
    with (ocr_run / "report" / "tables" / "images.csv").open() as f:
        images = list(csv.DictReader(f))
    assert [row["source"] for row in images] == ["synthetic portrait page", "synthetic slide", "synthetic note",
                                                 "mean"]
    assert all(float(row["sam_encoder"]) > 0 for row in images)
    for stage in STAGES:
        assert (ocr_run / "report" / "tables" / f"kernels_{stage}.csv").is_file()
    zh = (ocr_run / "report" / "report.zh.md").read_text()
    assert "SAM 编码器" in zh and "### 逐图像" in zh


@pytest.mark.slow
def test_export_and_ncu_take_stage_phases(ocr_run, tmp_path):
    result = kernelscope("export", str(ocr_run), "--format", "kern-sum", "--phase", "sam_encoder",
                         "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "kern_sum_sam_encoder.csv").is_file()
    result = kernelscope("export", str(ocr_run), "--format", "kern-sum-nvtx", "--out", str(tmp_path / "nvtx.csv"))
    ranges = [line.split(",")[0] for line in (tmp_path / "nvtx.csv").read_text().splitlines()[1:]]
    assert list(dict.fromkeys(ranges)) == [f"ks.phase:{p}" for p in [*STAGES, "prefill", "decode"]]
    gpu_run = Path(__file__).resolve().parents[1] / "data" / "runs" / "h200-qwen2-0.5b-ncu"
    result = kernelscope("ncu", str(gpu_run), "--phase", "sam_encoder")
    assert result.returncode == 2
    assert "no phase 'sam_encoder' in this run (its phases: prefill, decode)" in result.stderr


@pytest.mark.slow
def test_user_images_without_crops(tmp_path):
    pages = tmp_path / "pages"
    pages.mkdir()
    Image.new("RGB", (600, 400), "white").save(pages / "a.png")
    Image.new("RGB", (300, 500), "gray").save(pages / "b.jpg")
    (pages / "readme.txt").write_text("not an image, and not picked up: its suffix is not an image's")
    out = tmp_path / "run"
    result = kernelscope("profile", "--model", "deepseek-ocr-2-tiny", "--image", str(pages), "--no-crop-mode",
                         "--base-size", "768", "--new-tokens", "2", "--repeats", "1", "--warmup", "0", "--no-report",
                         "--out", str(out))
    assert result.returncode == 0, result.stderr
    workload = json.loads((out / "run.json").read_text())["workload"]
    assert [Path(image["source"]).name for image in workload["images"]] == ["a.png", "b.jpg"]
    assert [image["image_tokens"] for image in workload["images"]] == [145, 145]
    assert workload["image_source"] == "files" and len(workload["image_paths"]) == 1


@pytest.fixture
def bad_inputs(tmp_path) -> Path:
    (tmp_path / "notes.png").write_text("a text file with an image's name")
    (tmp_path / "empty").mkdir()
    qwen = tmp_path / "qwen-checkpoint"
    qwen.mkdir()
    (qwen / "config.json").write_text(json.dumps({
        "model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 256}))
    return tmp_path


@pytest.mark.parametrize("args, needle", [
    (["--image", "{d}/notes.png"], "notes.png: not an image file Pillow can read"),
    (["--image", "{d}/empty"], "empty: the directory holds no image files"),
    (["--image", "{d}/missing.png"], "missing.png: no such file or directory"),
    (["--image-size", "640"], "--image-size 640: a 640-pixel view becomes 100 image tokens"),
    (["--images", "2", "--image", "{d}/notes.png"], "not both"),
    (["--images", "0"], "--images must be at least 1"),
    (["--batch-size", "2"], "one generation per image"),
    (["--model", "{d}/qwen-checkpoint", "--images", "1"], "'qwen-checkpoint' is a qwen2 model, which takes no images"),
    (["--model", "tiny", "--image", "{d}/notes.png"], "'tiny' is a qwen2 model, which takes no images"),
    (["--temperature", "-1"], "--temperature must be a finite number"),
])
def test_bad_input_fails_with_one_line_and_writes_nothing(bad_inputs, capsys, args, needle):
    out = bad_inputs / "run"
    argv = ["-q", "profile", "--model", "deepseek-ocr-2-tiny", "--out", str(out), "--new-tokens", "2"]
    argv += [a.format(d=bad_inputs) for a in args]
    if "--model" in args:  # the last --model wins
        argv.remove("deepseek-ocr-2-tiny")
        argv.remove("--model")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("kernelscope: error: ") and err.count("\n") == 1, err
    assert needle in err
    assert not out.exists() and not list(bad_inputs.glob(".run.partial-*"))
