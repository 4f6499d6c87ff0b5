"""A small decoder whose norms, SwiGLU and residual additions are Triton kernels written here (projections through
torch's matmul, attention through SDPA), with a greedy loop over its own KV cache: the "Triton-heavy script" of
benchmarks/device/structure_captures.py. Random weights; nothing of kernelscope."""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _rmsnorm(x_ptr, w_ptr, out_ptr, n, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + row * n + offs, mask=mask, other=0.0).to(tl.float32)
    rms = tl.sqrt(tl.sum(x * x, axis=0) / n + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * n + offs, (x / rms * w).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _swiglu(gate_ptr, up_ptr, out_ptr, total, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    g = tl.load(gate_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (g / (1.0 + tl.exp(-g)) * u).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _residual_add(x_ptr, y_ptr, out_ptr, total, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x + y, mask=mask)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    flat = x.reshape(-1, x.shape[-1]).contiguous()
    out = torch.empty_like(flat)
    _rmsnorm[(flat.shape[0],)](flat, weight, out, flat.shape[1], eps, BLOCK=triton.next_power_of_2(flat.shape[1]))
    return out.view_as(x)


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    gate, up = gate.contiguous(), up.contiguous()
    out = torch.empty_like(gate)
    _swiglu[(triton.cdiv(gate.numel(), 1024),)](gate, up, out, gate.numel(), BLOCK=1024)
    return out


def residual_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    _residual_add[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK=1024)
    return out


class Layer(torch.nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.norm1 = torch.nn.Parameter(torch.ones(hidden))
        self.norm2 = torch.nn.Parameter(torch.ones(hidden))
        self.qkv = torch.nn.Linear(hidden, 3 * hidden, bias=False)
        self.o = torch.nn.Linear(hidden, hidden, bias=False)
        self.gate = torch.nn.Linear(hidden, 4 * hidden, bias=False)
        self.up = torch.nn.Linear(hidden, 4 * hidden, bias=False)
        self.down = torch.nn.Linear(4 * hidden, hidden, bias=False)

    def forward(self, x: torch.Tensor, cache: list[torch.Tensor] | None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        b, t, h = x.shape
        q, k, v = self.qkv(rmsnorm(x, self.norm1)).view(b, t, 3, self.heads, self.head_dim).unbind(2)
        q, k, v = (y.transpose(1, 2) for y in (q, k, v))
        if cache:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None or not cache)
        x = residual_add(x, self.o(attn.transpose(1, 2).reshape(b, t, h)))
        y = rmsnorm(x, self.norm2)
        x = residual_add(x, self.down(swiglu(self.gate(y), self.up(y))))
        return x, [k, v]


class TritonDecoder(torch.nn.Module):
    def __init__(self, layers: int, hidden: int, heads: int, vocab: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, hidden)
        self.layers = torch.nn.ModuleList(Layer(hidden, heads) for _ in range(layers))
        self.norm = torch.nn.Parameter(torch.ones(hidden))
        self.head = torch.nn.Linear(hidden, vocab, bias=False)

    def forward(self, ids: torch.Tensor, caches: list[list[torch.Tensor]]) -> torch.Tensor:
        x = self.embed(ids)
        for i, layer in enumerate(self.layers):
            x, caches[i] = layer(x, caches[i])
        return self.head(rmsnorm(x, self.norm))

    @torch.no_grad()
    def generate(self, ids: torch.Tensor, passes: int) -> torch.Tensor:
        caches: list[list[torch.Tensor]] = [[] for _ in self.layers]
        tokens = ids
        for _ in range(passes):
            tokens = self(tokens, caches)[:, -1].argmax(-1, keepdim=True)
        return tokens
