"""The "triton" backend's operator table: every Ops operator, by the name Ops binds."""

from .attention import attention_decode, attention_prefill
from .elementwise import add, embedding, kv_cache_write, swiglu
from .linear import (
    gate_up_swiglu,
    linear,
    linear_residual,
    norm_gate_up_swiglu,
    norm_linear,
    norm_qkv_rope_cache,
)
from .norm import add_rms_norm, rms_norm
from .rope import qkv_rope_cache, rope
from .sampling import argmax, sample

__all__ = [
    "add", "add_rms_norm", "argmax", "attention_decode", "attention_prefill", "embedding", "gate_up_swiglu",
    "kv_cache_write",
    "linear", "linear_residual", "norm_gate_up_swiglu", "norm_linear", "norm_qkv_rope_cache", "qkv_rope_cache", "rms_norm",
    "rope", "sample", "swiglu",
]
