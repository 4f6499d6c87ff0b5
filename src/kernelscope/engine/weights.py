"""The decoder's weights in the engine's layout: q/k/v and gate/up fused at load, from HF names.

Sources: a state dict (e.g. of a transformers model, so engine and transformers share weights), safetensors
files in a local directory, or random init through transformers' own model class.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kernelscope.engine.config import EngineConfig
from kernelscope.engine.errors import EngineError


@dataclass(frozen=True)
class LayerWeights:
    input_norm: torch.Tensor  # [D]
    w_qkv: torch.Tensor  # [(H + 2·Hkv)·Dh, D]
    b_qkv: torch.Tensor | None  # [(H + 2·Hkv)·Dh] (Qwen2) or None (Llama)
    w_o: torch.Tensor  # [D, H·Dh]
    post_norm: torch.Tensor  # [D]
    w_gate_up: torch.Tensor  # [2F, D], gate first
    w_down: torch.Tensor  # [D, F]


@dataclass(frozen=True)
class Weights:
    embed: torch.Tensor  # [V, D]
    layers: list[LayerWeights]
    final_norm: torch.Tensor  # [D]
    lm_head: torch.Tensor  # [V, D]; the embedding itself when tied

    def tensors(self) -> list[torch.Tensor]:
        """Every distinct tensor once (a tied lm_head is not counted twice)."""
        found: dict[int, torch.Tensor] = {}
        for layer in self.layers:
            for tensor in vars(layer).values():
                if tensor is not None:
                    found[tensor.data_ptr()] = tensor
        for tensor in (self.embed, self.final_norm, self.lm_head):
            found[tensor.data_ptr()] = tensor
        return list(found.values())


def weights_from_state_dict(config: EngineConfig, state: Mapping[str, torch.Tensor], device: torch.device | str,
                            dtype: torch.dtype) -> Weights:
    """Check every tensor's presence and shape against the config, then fuse and move to device/dtype."""
    d, f, v = config.hidden_size, config.intermediate_size, config.vocab_size

    def get(name: str, shape: tuple[int, ...]) -> torch.Tensor:
        if name not in state:
            raise EngineError(f"missing weight '{name}' (expected shape {list(shape)})")
        tensor = state[name]
        if tuple(tensor.shape) != shape:
            raise EngineError(f"weight '{name}' has shape {list(tensor.shape)}, expected {list(shape)}")
        return tensor.to(device=device, dtype=dtype)

    layers = []
    for i in range(config.num_layers):
        p = f"model.layers.{i}."
        qkv = [(f"{p}self_attn.q_proj", config.q_size), (f"{p}self_attn.k_proj", config.kv_size),
               (f"{p}self_attn.v_proj", config.kv_size)]
        layers.append(LayerWeights(
            input_norm=get(f"{p}input_layernorm.weight", (d,)),
            w_qkv=torch.cat([get(f"{name}.weight", (rows, d)) for name, rows in qkv]),
            b_qkv=torch.cat([get(f"{name}.bias", (rows,)) for name, rows in qkv]) if config.qkv_bias else None,
            w_o=get(f"{p}self_attn.o_proj.weight", (d, config.q_size)),
            post_norm=get(f"{p}post_attention_layernorm.weight", (d,)),
            w_gate_up=torch.cat([get(f"{p}mlp.gate_proj.weight", (f, d)), get(f"{p}mlp.up_proj.weight", (f, d))]),
            w_down=get(f"{p}mlp.down_proj.weight", (d, f)),
        ))
    embed = get("model.embed_tokens.weight", (v, d))
    lm_head = embed if config.tie_word_embeddings else get("lm_head.weight", (v, d))
    return Weights(embed=embed, layers=layers, final_norm=get("model.norm.weight", (d,)), lm_head=lm_head)


def load_safetensors(config: EngineConfig, directory: Path, device: torch.device | str,
                     dtype: torch.dtype) -> Weights:
    """Every *.safetensors file of a checkpoint directory (sharded or not)."""
    from safetensors.torch import load_file

    files = sorted(Path(directory).glob("*.safetensors"))
    if not files:
        raise EngineError(f"no *.safetensors files in '{directory}'")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            state.update(load_file(file))
        except Exception as exc:  # safetensors raises its own error types for corrupt files
            raise EngineError(f"cannot read '{file}': {exc}") from None
    return weights_from_state_dict(config, state, device, dtype)


def random_hf_model(hf_config: Any, device: torch.device | str, dtype: torch.dtype,
                    seed: int | None = None) -> torch.nn.Module:
    """transformers' own model with random weights (built on the device), for engine/transformers comparisons.
    Without a seed, the caller's random state decides the weights."""
    from transformers import AutoModelForCausalLM

    if seed is not None:
        torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(hf_config, dtype=dtype)
    return model.eval()
