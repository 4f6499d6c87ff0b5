import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from kernelscope.errors import UserError
from kernelscope.workload.annotate import GenerationAnnotator
from kernelscope.workload.generation import GenerationSettings, make_prompt, timed_generate
from kernelscope.workload.model import build_config, build_model, parse_dtype, resolve_model_source
from kernelscope.workload.presets import load_presets
from kernelscope.workload.structure import describe_model, layer_types


def test_presets_hold_the_published_shapes():
    presets = load_presets()
    assert {"tiny", "qwen2-0.5b", "qwen2-1.5b", "llama-3-8b", "deepseek-v3"} <= set(presets)
    q = presets["qwen2-1.5b"].config
    assert (q["hidden_size"], q["intermediate_size"], q["num_hidden_layers"]) == (1536, 8960, 28)
    assert (q["num_attention_heads"], q["num_key_value_heads"], q["vocab_size"]) == (12, 2, 151936)
    assert q["tie_word_embeddings"] is True
    d = presets["deepseek-v3"].config
    assert (d["num_hidden_layers"], d["first_k_dense_replace"], d["n_routed_experts"]) == (3, 1, 256)


@pytest.mark.parametrize("name", sorted(load_presets()))
def test_every_preset_makes_a_config(name):
    config = build_config(resolve_model_source(name))
    preset = load_presets()[name]
    assert config.model_type == preset.model_type
    # Vision-language presets give the language model's shape in a text_config table.
    assert config.get_text_config().hidden_size == preset.config.get("text_config", preset.config)["hidden_size"]


@pytest.fixture(scope="module")
def tiny():
    source = resolve_model_source("tiny-moe")
    config = build_config(source)
    torch.manual_seed(0)
    return build_model(source, config, torch.device("cpu"), torch.float32), config


def test_layer_types_tell_dense_from_moe(tiny):
    model, config = tiny
    types = layer_types(model)
    assert types == {0: "DeepseekV3DecoderLayer (DeepseekV3MLP)", 1: "DeepseekV3DecoderLayer (DeepseekV3MoE)",
                     2: "DeepseekV3DecoderLayer (DeepseekV3MoE)"}
    info = describe_model(model, config)
    assert info.num_layers == 3 and info.parameters == sum(p.numel() for p in model.parameters())


@pytest.mark.slow
def test_annotation_changes_no_token_and_marks_every_step(tiny):
    model, config = tiny
    settings = GenerationSettings(batch_size=2, prompt_len=12, new_tokens=5)
    ids = make_prompt(settings, config.vocab_size, torch.device("cpu"))
    plain, times = timed_generate(model, ids, settings)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        annotated, _ = timed_generate(model, ids, settings, GenerationAnnotator(model, nvtx=False))
    assert plain.shape == (2, 5)
    assert torch.equal(plain, annotated)
    names = [e.name for e in prof.events()]
    phases = sorted({n for n in names if n.startswith("ks.phase:")})
    assert phases == ["ks.phase:decode:0", "ks.phase:decode:1", "ks.phase:decode:2", "ks.phase:decode:3",
                      "ks.phase:prefill"]
    modules = {n for n in names if n.startswith("ks.module:")}
    assert "ks.module:model.layers.1.mlp.experts" in modules
    assert "ks.module:generate" in modules and "ks.module:DeepseekV3ForCausalLM" in modules
    # Marks: start, 5 forward passes, end; TTFT at the second forward pass.
    assert len(times.marks_ms) == 7
    assert times.ttft_ms == times.marks_ms[2] and times.tpot_ms == pytest.approx((times.marks_ms[-1] - times.marks_ms[2]) / 4)


def test_bad_model_and_settings_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="unknown preset 'nope'"):
        resolve_model_source("nope")
    with pytest.raises(UserError, match="no config.json"):
        resolve_model_source(str(tmp_path))
    with pytest.raises(UserError, match="unknown dtype"):
        parse_dtype("fp7")
    with pytest.raises(UserError, match="exceeds the model's 1024 positions"):
        GenerationSettings(prompt_len=1000, new_tokens=64).validate(1024)
    with pytest.raises(UserError, match="--new-tokens must be at least 1"):
        GenerationSettings(new_tokens=0).validate(None)


def test_checkpoint_of_another_architecture_is_a_user_error(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "bert", "hidden_size": 32, "num_hidden_layers": 1,'
                                          ' "num_attention_heads": 2, "intermediate_size": 64}')
    source = resolve_model_source(str(tmp_path))
    config = build_config(source)
    with pytest.raises(UserError, match="cannot"):
        build_model(source, config, torch.device("cpu"), torch.float32)


def test_out_of_memory_becomes_a_user_error(monkeypatch):
    from transformers import AutoModelForCausalLM

    def boom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(AutoModelForCausalLM, "from_config", boom)
    source = resolve_model_source("tiny")
    with pytest.raises(UserError, match="CUDA out of memory while building 'tiny'"):
        build_model(source, build_config(source), torch.device("cpu"), torch.float32)


def test_layers_sets_a_presets_depth_and_keeps_its_widths():
    full = load_presets()["deepseek-v3-full"].config
    config = build_config(resolve_model_source("deepseek-v3-full"), layers=5)
    assert (config.num_hidden_layers, config.first_k_dense_replace) == (5, 3)
    assert (config.hidden_size, config.n_routed_experts, config.moe_intermediate_size) == \
        (full["hidden_size"], full["n_routed_experts"], full["moe_intermediate_size"])
    # Fewer layers than the dense first ones: all of them dense.
    assert build_config(resolve_model_source("deepseek-v3-full"), layers=2).first_k_dense_replace == 2


@pytest.mark.parametrize(("name", "layers", "message"), [
    ("tiny", 0, "at least 1"),
    ("deepseek-ocr-2-tiny", 2, "vision-language"),
])
def test_layers_refusals(name, layers, message):
    with pytest.raises(UserError, match=message):
        build_config(resolve_model_source(name), layers=layers)


def test_layers_is_refused_for_a_checkpoint(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "qwen2"}')
    with pytest.raises(UserError, match="checkpoint"):
        build_config(resolve_model_source(str(tmp_path)), layers=2)


def test_weights_that_cannot_fit_are_refused_before_anything_is_built(monkeypatch):
    from kernelscope.workload import memory_check

    config = build_config(resolve_model_source("deepseek-v3-full"), layers=6)
    count = memory_check.parameter_count(config)
    # DeepSeek-V3's layer shapes, counted by hand: embedding and head, 3 dense and 3 MoE layers with MLA attention.
    hidden, vocab, heads = 7168, 129280, 128
    attention = (hidden * 1536 + 1536 + 1536 * heads * 192 + hidden * (512 + 64) + 512 + 512 * heads * (128 + 128)
                 + heads * 128 * hidden + 2 * hidden)  # q_a, q norm, q_b, kv_a, kv norm, kv_b, o, two layer norms
    dense = 3 * hidden * 18432
    moe = 256 * 3 * hidden * 2048 + 3 * hidden * 2048 + 256 * hidden  # experts, shared expert, router (its bias: a buffer)
    assert count == 2 * vocab * hidden + hidden + 6 * attention + 3 * dense + 3 * moe
    gb = 1e9
    monkeypatch.setattr(memory_check, "available_bytes", lambda device: 60 * gb)
    with pytest.raises(UserError, match=r"its weights take 76\.3 GB in bfloat16"):
        memory_check.check_weights_fit("deepseek-v3-full", config, torch.bfloat16, torch.device("cuda", 0))
    # Split over 2 GPUs, each holds at least half: that could fit, so it is not refused.
    memory_check.check_weights_fit("deepseek-v3-full", config, torch.bfloat16, torch.device("cuda", 0), ranks=2,
                                   split=True)
    # On the CPU every rank of this machine counts.
    with pytest.raises(UserError, match="2 ranks on this machine"):
        memory_check.check_weights_fit("deepseek-v3-full", config, torch.bfloat16, torch.device("cpu"), ranks=2,
                                       split=True, ranks_per_host=2)
    memory_check.check_weights_fit("tiny", build_config(resolve_model_source("tiny")), torch.float32,
                                   torch.device("cpu"))
