"""PyTorch reference of every engine operator: the "torch" backend of Ops and the oracle of the kernel tests.

Each function rounds where HF transformers' Qwen2/Llama modules round in the same dtype, so a model built on
these ops reproduces transformers' tokens. Signatures are the Ops contract (docs/engine.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F


def _into(result: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    if out is None:
        return result
    out.copy_(result)
    return out


def add(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return _into(x + y, out)


def embedding(ids: torch.Tensor, table: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return _into(table[ids], out)


def linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None,
           out: torch.Tensor | None = None) -> torch.Tensor:
    return _into(F.linear(x, w, bias), out)


def argmax(logits: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return _into(torch.argmax(logits, dim=-1), out)


def sampling_noise(logits: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Exp(1) noise for the exponential race: argmax(p / q) is a draw from p (no host sync, graph-safe)."""
    return torch.empty(logits.shape, dtype=torch.float32, device=logits.device).exponential_(
        generator=generator)


def filtered_probs(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """Softmax of logits/temperature over the tokens kept by top-k then top-p (others 0), in fp32.

    top-k keeps every token whose logit is ≥ the k-th largest (ties kept, as HF's TopKLogitsWarper);
    top-p keeps a token when the probability mass of strictly larger tokens is < top_p (HF's TopPLogitsWarper
    up to ties). top_k ≤ 0 or ≥ V and top_p ≥ 1 disable the filter.
    """
    scaled = logits.float() / temperature
    vocab = scaled.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(scaled, top_k, dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    if top_p < 1.0:
        ordered = torch.sort(probs, dim=-1, descending=True).values
        mass_above = torch.cumsum(ordered, dim=-1) - ordered
        # The smallest kept probability; every token at least that likely is kept (ties included).
        floor = ordered.masked_fill(mass_above >= top_p, float("inf")).amin(dim=-1, keepdim=True)
        probs = probs.masked_fill(probs < floor, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def sample(logits: torch.Tensor, temperature: float, top_k: int, top_p: float,
           generator: torch.Generator | None = None) -> torch.Tensor:
    if temperature == 0.0:
        return argmax(logits)
    noise = sampling_noise(logits, generator)
    return torch.argmax(filtered_probs(logits, temperature, top_k, top_p) / noise, dim=-1)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float, out: torch.Tensor | None = None) -> torch.Tensor:
    xf = x.float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return _into(w * normed.to(x.dtype), out)


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    new_residual = x + residual
    return rms_norm(new_residual, w, eps), new_residual


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor,
                 dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [T, Dh] computed in fp32 from inv_freq·position, then cast to the activation dtype (as HF)."""
    freqs = positions.float()[:, None] * inv_freq.float()[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
         inv_freq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    cos, sin = rope_cos_sin(positions, inv_freq, q.dtype)
    cos, sin = cos[:, None, :], sin[:, None, :]
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
            scale: float) -> torch.Tensor:
    """q [B,H,M,Dh], k/v [B,Hkv,N,Dh], mask [B|1,1,M,N] (True = attend): softmax in fp32, output in q's dtype."""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1).float()
    v = v.repeat_interleave(group, dim=1).float()
    scores = (q.float() @ k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~mask, float("-inf"))
    return (torch.softmax(scores, dim=-1) @ v).to(q.dtype)


def attention_prefill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    length = q.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool, device=q.device).tril()[None, None]
    out = _attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal, scale)
    return out.transpose(1, 2).contiguous()


def attention_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, lengths: torch.Tensor,
                     scale: float, out: torch.Tensor | None = None,
                     kv_tokens: int | Sequence[int] | None = None) -> torch.Tensor:
    """kv_tokens (host-side lengths or their sum) only informs the Triton backend's cost declaration."""
    slots = torch.arange(k_cache.shape[1], device=q.device)
    valid = (slots[None, :] < lengths[:, None])[:, None, None, :]
    result = _attend(q[:, :, None, :], k_cache.transpose(1, 2), v_cache.transpose(1, 2), valid, scale)
    return _into(result[:, :, 0, :], out)


def swiglu(gate_up: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return _into(F.silu(gate) * up, out)


def gate_up_swiglu(x: torch.Tensor, w_gate_up: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return _into(swiglu(linear(x, w_gate_up)), out)


def kv_cache_write(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   start: int) -> None:
    k_cache[:, start:start + k.shape[1]] = k
    v_cache[:, start:start + v.shape[1]] = v


# ---- fused decode operators: the composition of the unfused ones above (one token per sequence)

def qkv_rope_cache(qkv: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, k_cache: torch.Tensor,
                   v_cache: torch.Tensor, num_heads: int, num_kv_heads: int) -> torch.Tensor:
    batch, length, _ = qkv.shape
    head_dim = k_cache.shape[-1]
    q_size, kv_size = num_heads * head_dim, num_kv_heads * head_dim
    tokens = batch * length
    q = qkv[..., :q_size].reshape(tokens, num_heads, head_dim)
    k = qkv[..., q_size:q_size + kv_size].reshape(tokens, num_kv_heads, head_dim)
    v = qkv[..., q_size + kv_size:].reshape(batch, length, num_kv_heads, head_dim)
    q, k = rope(q, k, positions, inv_freq)
    kv_cache_write(k.view(batch, length, num_kv_heads, head_dim), v, k_cache, v_cache, 0)
    return q.view(batch, length, num_heads, head_dim)


def norm_qkv_rope_cache(h: torch.Tensor, norm_w: torch.Tensor, eps: float, w_qkv: torch.Tensor,
                        b_qkv: torch.Tensor | None, positions: torch.Tensor, inv_freq: torch.Tensor,
                        k_cache: torch.Tensor, v_cache: torch.Tensor, num_heads: int, num_kv_heads: int,
                        out: torch.Tensor | None = None) -> torch.Tensor:
    batch, head_dim = h.shape[0], k_cache.shape[-1]
    qkv = linear(rms_norm(h, norm_w, eps), w_qkv, b_qkv)
    q_size, kv_size = num_heads * head_dim, num_kv_heads * head_dim
    q = qkv[:, :q_size].reshape(batch, num_heads, head_dim)
    k = qkv[:, q_size:q_size + kv_size].reshape(batch, num_kv_heads, head_dim)
    v = qkv[:, q_size + kv_size:].reshape(batch, num_kv_heads, head_dim)
    q, k = rope(q, k, positions, inv_freq)
    rows = torch.arange(batch, device=h.device)
    k_cache[rows, positions] = k
    v_cache[rows, positions] = v
    return _into(q, out)


def linear_residual(x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor,
                    out: torch.Tensor | None = None) -> torch.Tensor:
    return _into(residual + linear(x, w), out)


def norm_gate_up_swiglu(h: torch.Tensor, norm_w: torch.Tensor, eps: float, w_gate_up: torch.Tensor,
                        out: torch.Tensor | None = None) -> torch.Tensor:
    return _into(swiglu(linear(rms_norm(h, norm_w, eps), w_gate_up)), out)


def norm_linear(h: torch.Tensor, norm_w: torch.Tensor, eps: float, w: torch.Tensor,
                out: torch.Tensor | None = None) -> torch.Tensor:
    return _into(linear(rms_norm(h, norm_w, eps), w), out)
