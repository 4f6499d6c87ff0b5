"""The vision-language workload: presets, images, the processor's inputs, stage phases, generation settings."""

import polars as pl
import pytest
import torch
from PIL import Image
from torch.profiler import ProfilerActivity, profile

from kernelscope import ranges
from kernelscope.analyze.structure.phases import ordered_phases, phase_table, step_counts, step_table
from kernelscope.contracts.tables import conform_kernels
from kernelscope.errors import UserError
from kernelscope.workload.annotate import GenerationAnnotator
from kernelscope.workload.generation import (
    GenerationSettings,
    decoding_description,
    make_prompt,
    timed_generate,
)
from kernelscope.workload.images import load_images, synthetic_documents
from kernelscope.workload.inputs import ImageRequest, text_inputs, vision_inputs
from kernelscope.workload.model import build_config, build_model, resolve_model_source
from kernelscope.workload.presets import load_presets
from kernelscope.workload.structure import describe_model
from kernelscope.workload.vision import ImageSettings, stage_modules, vision_spec

CPU = torch.device("cpu")
STAGES = ["sam_encoder", "vision_encoder", "multi_modal_projector"]


def test_full_preset_holds_the_published_shapes_and_builds():
    preset = load_presets()["deepseek-ocr-2"].config
    text, vision = preset["text_config"], preset["vision_config"]
    assert (text["hidden_size"], text["num_hidden_layers"], text["n_routed_experts"]) == (1280, 12, 64)
    assert (text["num_experts_per_tok"], text["n_shared_experts"], text["moe_intermediate_size"]) == (6, 2, 896)
    assert text["mlp_layer_types"] == ["dense"] + ["sparse"] * 11 and text["vocab_size"] == 129280
    assert vision["encoder_config"]["hidden_size"] == vision["sam_config"]["downsample_channels"][-1] == 896
    assert (vision["sam_config"]["hidden_size"], vision["sam_config"]["global_attn_indexes"]) == (768, [2, 5, 8, 11])
    config = build_config(resolve_model_source("deepseek-ocr-2"))
    from transformers import AutoModelForImageTextToText

    with torch.device("meta"):  # buildable without allocating: the shapes fit together
        model = AutoModelForImageTextToText.from_config(config)
    assert 3.38e9 < sum(p.numel() for p in model.parameters()) < 3.40e9
    assert list(stage_modules(model, vision_spec(config)).values()) == STAGES


@pytest.fixture(scope="module")
def tiny():
    source = resolve_model_source("deepseek-ocr-2-tiny")
    config = build_config(source)
    torch.manual_seed(0)
    return build_model(source, config, CPU, torch.float32), config


@pytest.fixture(scope="module")
def pages(tiny):
    _, config = tiny
    return vision_inputs(vision_spec(config), config, None, ImageRequest(count=3), 0, CPU, torch.float32)


def test_synthetic_pages_are_deterministic_and_vary_in_shape():
    first, again = synthetic_documents(6, 0), synthetic_documents(6, 0)
    assert [d.image.tobytes() for d in first] == [d.image.tobytes() for d in again]
    assert len({d.size for d in first}) == 6 and len({d.source for d in first}) == 6
    assert synthetic_documents(1, 1)[0].source == first[1].source  # the seed shifts the cycle of shapes


def test_processor_inputs_hold_the_image_tokens_of_each_page(pages, tiny):
    _, config = tiny
    assert [image.crops for image in pages.images] == [6, 2, 0]
    for tensors, image in zip(pages.generations, pages.images, strict=True):
        # 256 tokens for the 1024-pixel global view, 144 per 768-pixel crop, one separator.
        assert image.image_tokens == 256 + 144 * image.crops + 1
        assert int((tensors["input_ids"] == config.image_token_id).sum()) == image.image_tokens
        assert tensors["input_ids"][0, 0] == config.text_config.bos_token_id
        assert tensors["pixel_values"].shape == (1, 3, 1024, 1024)
        assert ("pixel_values_local" in tensors) == (image.crops > 0)
    assert pages.prompt_len == pages.images[2].prompt_tokens + 288  # median: the 2-crop page


@pytest.mark.slow
def test_stage_ranges_are_phases_and_change_no_token(tiny, pages):
    model, config = tiny
    stages = stage_modules(model, vision_spec(config))
    settings = GenerationSettings(new_tokens=3, no_repeat_ngram_size=20)
    inputs = pages.generations[1]
    plain, _ = timed_generate(model, inputs, settings)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        annotated, times = timed_generate(model, inputs, settings,
                                          GenerationAnnotator(model, nvtx=False, stages=stages, generation=4))
    assert torch.equal(plain, annotated) and plain.shape == (1, 3)
    names = [e.name for e in prof.events()]
    assert {f"ks.phase:{s}" for s in STAGES} <= set(names)
    assert "ks.generation:4" in names and "ks.phase:prefill" in names and "ks.phase:decode:1" in names
    # Global view and crops: each stage runs twice in the first forward pass, never in decode.
    assert names.count("ks.phase:sam_encoder") == 2 and len(times.marks_ms) == 5


def test_stage_layers_have_their_own_types(tiny):
    model, config = tiny
    info = describe_model(model, config, stage_modules(model, vision_spec(config)))
    assert list(info.stages) == STAGES
    assert info.stages["sam_encoder"].layer_types == {0: "DeepseekOcr2SamVisionLayer", 1: "DeepseekOcr2SamVisionLayer"}
    assert info.stages["vision_encoder"].layer_prefix == "model.vision_tower.vision_encoder.layers"
    assert info.layer_types[0] == "DeepseekOcr2TextDecoderLayer (DeepseekOcr2TextMLP)"


@pytest.mark.slow
def test_sampling_is_seeded_and_greedy_is_the_default(tiny, pages):
    model, _ = tiny
    inputs = pages.generations[2]
    sampled = GenerationSettings(new_tokens=4, temperature=1.5, seed=3)
    first, _ = timed_generate(model, inputs, sampled)
    again, _ = timed_generate(model, inputs, sampled)
    assert torch.equal(first, again)
    assert decoding_description(GenerationSettings()) == "greedy, EOS ignored"
    assert decoding_description(sampled) == "sampling at temperature 1.5 (seed 3), EOS ignored"
    assert "no repeated 20-grams" in decoding_description(GenerationSettings(no_repeat_ngram_size=20))
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(UserError, match="--temperature"):
            GenerationSettings(temperature=bad).validate(None)


@pytest.mark.parametrize("settings, needle", [
    (ImageSettings(image_size=640), "--image-size 640: a 640-pixel view becomes 100 image tokens"),
    (ImageSettings(base_size=800), "--base-size 800"),
    (ImageSettings(base_size=640, crop_mode=False), "views of 705–768 or 961–1024 pixels"),
])
def test_view_sizes_the_model_rejects(settings, needle):
    spec = vision_spec(build_config(resolve_model_source("deepseek-ocr-2-tiny")))
    with pytest.raises(UserError, match=needle):
        settings.validate(spec)


def test_view_sizes_the_model_takes():
    spec = vision_spec(build_config(resolve_model_source("deepseek-ocr-2-tiny")))
    for settings in (ImageSettings(), ImageSettings(base_size=768, crop_mode=False), ImageSettings(image_size=720)):
        settings.validate(spec)
    assert ImageSettings(crop_mode=False).processor_kwargs()["tile_size"] == 1024


def test_unreadable_images_are_user_errors(tmp_path):
    (tmp_path / "notes.txt").write_text("not an image")
    Image.new("RGB", (40, 30), "white").save(tmp_path / "page.png")
    Image.effect_noise((200, 200), 60).save(tmp_path / "noise.png")
    (tmp_path / "cut.png").write_bytes((tmp_path / "noise.png").read_bytes()[:2000])  # header intact, data cut
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="notes.txt: not an image file"):
        load_images([tmp_path / "notes.txt"])
    with pytest.raises(UserError, match="cut.png: cannot read the image"):
        load_images([tmp_path / "cut.png"])
    with pytest.raises(UserError, match="holds no image files"):
        load_images([tmp_path / "empty"])
    with pytest.raises(UserError, match="no such file"):
        load_images([tmp_path / "missing.png"])
    assert [d.size for d in load_images([tmp_path / "page.png"])] == [(40, 30)]
    with pytest.raises(UserError, match="not both"):
        ImageRequest(paths=(tmp_path / "page.png",), count=2).documents(0)


def test_a_text_model_takes_no_images():
    config = build_config(resolve_model_source("tiny"))
    with pytest.raises(UserError, match="'tiny' is a qwen2 model, which takes no images"):
        text_inputs(GenerationSettings(), config, CPU, ImageRequest(count=1), "tiny")
    inputs = text_inputs(GenerationSettings(prompt_len=7), config, CPU, ImageRequest(), "tiny")
    assert inputs.prompt_len == 7 and torch.equal(inputs.generations[0],
                                                  make_prompt(GenerationSettings(prompt_len=7), 2048, CPU))


def test_stages_come_first_in_execution_order():
    assert ordered_phases(["decode", "unknown", "prefill", "projector", "sam"], {"sam": 5, "projector": 9}) == \
        ["sam", "projector", "prefill", "decode", "unknown"]
    assert ordered_phases(["decode", "prefill"]) == ["prefill", "decode"]


def test_phase_steps_count_generations():
    # Two generations (images): stage and prefill once each, decode steps 0-1 each.
    rows = [("sam", None, 0, 10), ("sam", None, 1, 30), ("prefill", None, 0, 50), ("prefill", None, 1, 60),
            ("decode", 0, 0, 70), ("decode", 1, 0, 80), ("decode", 0, 1, 90), ("decode", 1, 1, 100)]
    kernels = conform_kernels(pl.DataFrame(
        [{"phase": p, "step": s, "generation": g, "start_ns": 10 * i, "dur_ns": d, "device": 0,
          "launch_dur_ns": 1} for i, (p, s, g, d) in enumerate(rows)],
        schema={"phase": pl.String, "step": pl.Int64, "generation": pl.Int64, "start_ns": pl.Int64,
                "dur_ns": pl.Int64, "device": pl.Int64, "launch_dur_ns": pl.Int64},
    ))
    one_generation = kernels.with_columns(pl.lit(None, dtype=pl.Int64).alias("generation"))
    table = phase_table(kernels)
    assert table["phase"].to_list() == ["sam", "prefill", "decode"]
    assert table["steps"].to_list() == [2, 2, 4]
    assert table["device_time_per_step_ns"].to_list() == [20, 55, 85]
    assert step_table(kernels).columns == ["generation", "step", "kernel_count", "device_time_ns"]
    assert phase_table(one_generation)["steps"].to_list() == [1, 1, 2]
    # Every per-step figure elsewhere (accelerator needs, what-if) divides by the same counts.
    assert step_counts(kernels) == {"sam": 2, "prefill": 2, "decode": 4}
    assert step_counts(one_generation) == {"sam": 1, "prefill": 1, "decode": 2}


def test_range_names():
    assert ranges.generation_range(3) == "ks.generation:3"
    assert ranges.stage_phase("model.vision_tower.sam_encoder") == "sam_encoder"
