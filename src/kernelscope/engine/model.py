"""The decoder (Qwen2 / Llama) written against Ops: prefill with unfused ops, decode with fused ops only.

A decode step launches per layer: norm_qkv_rope_cache, attention_decode (split-KV, combined by its last program),
linear_residual (o_proj), norm_gate_up_swiglu, linear_residual (down_proj) = 5 kernels on the triton backend; then the
embedding before the layers and norm_linear (final norm + lm_head) after them.

`scope(name)` opens a context around each module's launches with its HF-style qualified name, so a profiled
eager run can attribute kernels to modules. Fused decode ops that absorb a norm are attributed to the module
that consumes it (input_layernorm → self_attn, post_attention_layernorm → mlp, model.norm → lm_head).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager

import torch

from kernelscope.engine.cache import KVCache
from kernelscope.engine.config import EngineConfig
from kernelscope.engine.ops import Ops
from kernelscope.engine.weights import Weights

Scope = Callable[[str], AbstractContextManager]


def no_scope(_name: str) -> AbstractContextManager:
    return contextlib.nullcontext()


class Decoder:
    def __init__(self, config: EngineConfig, weights: Weights, ops: Ops) -> None:
        self.config = config
        self.weights = weights
        self.ops = ops
        self.inv_freq = config.inv_freq().to(weights.embed.device)
        self.scale = config.head_dim ** -0.5

    def prefill(self, ids: torch.Tensor, cache: KVCache, scope: Scope = no_scope,
                last: torch.Tensor | None = None) -> torch.Tensor:
        """Run prompts ids [B, L] from position 0, fill the cache's first L slots; logits [B, V] at position
        `last` (a one-element device tensor: prompts padded at the end to a fixed length; causal attention keeps
        the padding out of every earlier position) or of the last token."""
        c, w, ops = self.config, self.weights, self.ops
        batch, length = ids.shape
        tokens = batch * length
        positions = torch.arange(length, device=ids.device).repeat(batch)
        with scope("model.embed_tokens"):
            h = ops.embedding(ids.reshape(-1), w.embed)
        residual = None
        for i, layer in enumerate(w.layers):
            prefix = f"model.layers.{i}."
            with scope(prefix + "input_layernorm"):
                if residual is None:
                    x, residual = ops.rms_norm(h, layer.input_norm, c.rms_norm_eps), h
                else:
                    x, residual = ops.add_rms_norm(h, residual, layer.input_norm, c.rms_norm_eps)
            with scope(prefix + "self_attn"):
                qkv = ops.linear(x, layer.w_qkv, layer.b_qkv)
                q = ops.qkv_rope_cache(qkv.view(batch, length, -1), positions, self.inv_freq, cache.keys[i],
                                       cache.values[i], c.num_heads, c.num_kv_heads)
                # Keys and values are read back from the cache: its first L slots, strided by its capacity.
                attn = ops.attention_prefill(q, cache.keys[i][:, :length], cache.values[i][:, :length], self.scale)
                h = ops.linear(attn.view(tokens, c.q_size), layer.w_o)
            with scope(prefix + "post_attention_layernorm"):
                x, residual = ops.add_rms_norm(h, residual, layer.post_norm, c.rms_norm_eps)
            with scope(prefix + "mlp"):
                h = ops.linear(ops.gate_up_swiglu(x, layer.w_gate_up), layer.w_down)
        # Only the last position's logits are needed to continue.
        if last is None:
            last_h = h.view(batch, length, -1)[:, -1].contiguous()
            last_residual = residual.view(batch, length, -1)[:, -1].contiguous()
        else:
            last_h = h.view(batch, length, -1).index_select(1, last).view(batch, -1)
            last_residual = residual.view(batch, length, -1).index_select(1, last).view(batch, -1)
        with scope("model.norm"):
            x, _ = ops.add_rms_norm(last_h, last_residual, w.final_norm, c.rms_norm_eps)
        with scope("lm_head"):
            return ops.linear(x, w.lm_head)

    def decode_step(self, tokens: torch.Tensor, positions: torch.Tensor, lengths: torch.Tensor, cache: KVCache,
                    scope: Scope = no_scope, kv_tokens: int | None = None) -> torch.Tensor:
        """One token per sequence: tokens [B] at positions [B] (lengths = positions + 1); logits [B, V].
        kv_tokens, the host's count of valid cache entries over the batch when it knows it (eager steps), makes
        the attention's declared cost exact; a captured graph is not profiled and passes none."""
        c, w, ops = self.config, self.weights, self.ops
        batch = tokens.shape[0]
        with scope("model.embed_tokens"):
            h = ops.embedding(tokens, w.embed)
        for i, layer in enumerate(w.layers):
            prefix = f"model.layers.{i}."
            with scope(prefix + "self_attn"):
                q = ops.norm_qkv_rope_cache(h, layer.input_norm, c.rms_norm_eps, layer.w_qkv, layer.b_qkv, positions,
                                            self.inv_freq, cache.keys[i], cache.values[i], c.num_heads,
                                            c.num_kv_heads)
                attn = ops.attention_decode(q, cache.keys[i], cache.values[i], lengths, self.scale,
                                            kv_tokens=kv_tokens)
                h = ops.linear_residual(attn.view(batch, c.q_size), layer.w_o, h)
            with scope(prefix + "mlp"):
                act = ops.norm_gate_up_swiglu(h, layer.post_norm, c.rms_norm_eps, layer.w_gate_up)
                h = ops.linear_residual(act, layer.w_down, h)
        with scope("lm_head"):
            return ops.norm_linear(h, w.final_norm, c.rms_norm_eps, w.lm_head)
