"""A model's shape from its Hugging Face config (run.json `model.config`: a profile's model, or the config.json given
to `import --model-config`, read and checked by load/model_config.py), as the names cost formulas read
(`config_<name>` in data/cost_models.toml and analyze/costs/config_costs.py).

Names: hidden, heads, kv_heads, head_dim, intermediate (dense MLP), layers, vocab, experts, top_k,
moe_intermediate (one expert's), shared_experts, shared_intermediate, act_bytes (activations' element size, from
`torch_dtype`/`dtype`), weight_bytes and expert_weight_bytes (element size of the weights as stored: a quantised
checkpoint's format, e.g. 1 for FP8, 0.5 for MXFP4, else the activations'), kv_lora_rank, qk_rope_head_dim (MLA).
Vision-language configs: their `text_config`.
"""

from __future__ import annotations

from typing import Any

from kernelscope.load import knowledge

DTYPE_SIZES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "float64": 8, "float8_e4m3fn": 1,
               "float8_e5m2": 1}
# quantization_config: its method (or format) → bytes a weight element takes
QUANT_SIZES = {"fp8": 1, "fbgemm_fp8": 1, "compressed-tensors": 1, "mxfp4": 0.5, "nvfp4": 0.5, "awq": 0.5,
               "gptq": 0.5, "bitsandbytes_4bit": 0.5, "int8": 1}

_FIRST = {
    "hidden": ("hidden_size", "d_model", "n_embd"),
    "heads": ("num_attention_heads", "n_head"),
    "kv_heads": ("num_key_value_heads", "num_kv_heads", "multi_query_group_num"),
    "head_dim": ("head_dim",),
    "intermediate": ("intermediate_size", "ffn_hidden_size", "n_inner"),
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "vocab": ("vocab_size",),
    "experts": ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"),
    "top_k": ("num_experts_per_tok", "num_experts_per_token", "moe_top_k", "top_k"),
    "moe_intermediate": ("moe_intermediate_size", "expert_intermediate_size"),
    "shared_experts": ("n_shared_experts", "num_shared_experts"),
    "shared_intermediate": ("shared_expert_intermediate_size",),
    "kv_lora_rank": ("kv_lora_rank",),
    "qk_rope_head_dim": ("qk_rope_head_dim",),
}


def language_config(config: dict[str, Any]) -> dict[str, Any]:
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


def config_values(config: dict[str, Any]) -> dict[str, float]:
    """The names above that the config gives (numbers only; anything else in the file is ignored)."""
    c = language_config(config)
    out: dict[str, float] = {}
    for name, keys in _FIRST.items():
        for key in keys:
            value = c.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
                out[name] = float(value)
                break
    if "hidden" in out and "heads" in out:
        out.setdefault("head_dim", out["hidden"] // out["heads"])
        out.setdefault("kv_heads", out["heads"])
    if "experts" in out:
        out.setdefault("moe_intermediate", out.get("intermediate", 0.0))
        if not out["moe_intermediate"]:
            del out["moe_intermediate"]
    # A gated MLP (act(gate) · up) has two input projections, a plain one (fc1, act, fc2) one.
    model_type = str(c.get("model_type") or config.get("model_type") or "")
    out["mlp_up"] = 1.0 if model_type in knowledge.cost_models().get("config", {}).get("ungated_mlp", []) else 2.0
    dtype = c.get("torch_dtype") or c.get("dtype") or config.get("torch_dtype") or config.get("dtype")
    act = DTYPE_SIZES.get(str(dtype).removeprefix("torch."), 2) if isinstance(dtype, str) else 2
    out["act_bytes"] = float(act)
    quant = c.get("quantization_config") or config.get("quantization_config")
    weight = float(act)
    if isinstance(quant, dict):
        method = quant.get("quant_method") or quant.get("fmt") or quant.get("format")
        if isinstance(method, str):
            weight = float(QUANT_SIZES.get(method.lower(), act))
    out["weight_bytes"] = weight
    out["expert_weight_bytes"] = weight
    return out
