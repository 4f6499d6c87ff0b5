"""EngineConfig: the few numbers the engine needs, read from a Hugging Face Qwen2 or Llama config."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from kernelscope.engine.errors import EngineError

SUPPORTED = ("qwen2", "llama")


@dataclass(frozen=True)
class EngineConfig:
    architecture: str  # "qwen2" or "llama"
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_positions: int
    tie_word_embeddings: bool
    qkv_bias: bool  # Qwen2 has q/k/v biases; Llama none
    rope_scaling: dict[str, Any] = field(default_factory=dict)  # Llama-3 "llama3" parameters, else empty

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    def inv_freq(self) -> torch.Tensor:
        """RoPE inverse frequencies [head_dim/2] in fp32, with Llama-3 frequency scaling when configured."""
        exponents = torch.arange(0, self.head_dim, 2, dtype=torch.int64).float() / self.head_dim
        inv_freq = 1.0 / (self.rope_theta ** exponents)
        if self.rope_scaling:
            inv_freq = _llama3_scaled(inv_freq, self.rope_scaling)
        return inv_freq


def _llama3_scaled(inv_freq: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
    """Llama 3.1 scaling: long wavelengths divided by `factor`, short kept, a smooth blend between."""
    factor = float(params["factor"])
    low, high = float(params["low_freq_factor"]), float(params["high_freq_factor"])
    original = float(params["original_max_position_embeddings"])
    low_wavelen, high_wavelen = original / low, original / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (original / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, blended, scaled)


def config_from_hf(hf: Any) -> EngineConfig:
    """From a `transformers` config object (or anything with the same attributes)."""
    arch = getattr(hf, "model_type", None)
    if arch not in SUPPORTED:
        raise EngineError(f"unsupported architecture '{arch}' (the engine runs {', '.join(SUPPORTED)})")
    if getattr(hf, "mlp_bias", False) or (arch == "llama" and getattr(hf, "attention_bias", False)):
        raise EngineError(f"unsupported {arch} variant: attention_bias/mlp_bias must be false")
    if getattr(hf, "use_sliding_window", False):
        raise EngineError(f"unsupported {arch} variant: sliding-window attention")
    heads, kv_heads = hf.num_attention_heads, getattr(hf, "num_key_value_heads", None) or hf.num_attention_heads
    if heads % kv_heads:
        raise EngineError(f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}")
    theta, scaling = _rope(hf)
    return EngineConfig(
        architecture=arch,
        vocab_size=hf.vocab_size,
        hidden_size=hf.hidden_size,
        intermediate_size=hf.intermediate_size,
        num_layers=hf.num_hidden_layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=getattr(hf, "head_dim", None) or hf.hidden_size // heads,
        rms_norm_eps=float(hf.rms_norm_eps),
        rope_theta=theta,
        max_positions=hf.max_position_embeddings,
        tie_word_embeddings=bool(getattr(hf, "tie_word_embeddings", False)),
        qkv_bias=arch == "qwen2",
        rope_scaling=scaling,
    )


def _rope(hf: Any) -> tuple[float, dict[str, Any]]:
    """(theta, llama3 parameters or {}) from `rope_parameters` (transformers ≥ 5) or `rope_theta`/`rope_scaling`."""
    params = dict(getattr(hf, "rope_parameters", None) or getattr(hf, "rope_scaling", None) or {})
    theta = float(params.get("rope_theta", getattr(hf, "rope_theta", 10000.0)))
    kind = params.get("rope_type", params.get("type", "default"))
    if kind == "default":
        return theta, {}
    if kind == "llama3":
        return theta, {key: params[key] for key in
                       ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}
    raise EngineError(f"unsupported rope_type '{kind}' (the engine supports default and llama3)")


def config_from_dir(path: Path) -> EngineConfig:
    """From the config.json of a local checkpoint directory."""
    from transformers import AutoConfig

    file = Path(path) / "config.json"
    try:
        model_type = json.loads(file.read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError) as exc:
        raise EngineError(f"cannot read {file}: {exc}") from None
    if model_type not in SUPPORTED:
        raise EngineError(f"{file}: unsupported architecture '{model_type}' (the engine runs {', '.join(SUPPORTED)})")
    return config_from_hf(AutoConfig.from_pretrained(path, local_files_only=True))
