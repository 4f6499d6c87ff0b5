"""Host side of the persistent Gluon decode step (gluon_decode_kernels.py): the engine's weights restacked for the
kernel's TMA descriptors, the step's buffers and KV cache, the launch with its declared cost, and one greedy step
(embedding → persistent kernel → the engine's argmax → position + 1) that a CUDA graph can capture.

Device-agnostic apart from the launch: gluon_decode_emulate.py runs the same step on CPU on these buffers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import gluon_configs as gc
import gluon_decode_configs as dc
import torch

from kernelscope.engine_costs import declare


class DecodeBuffers:
    """Everything the kernel reads and writes, at fixed addresses. Weights: per kind the layers stacked into one
    [layers · N, K] bf16 matrix (a copy: the engine keeps one tensor a layer); gate/up keep the engine's order
    (gate rows, then up rows, per layer). Cache [layers, cap, kv_heads, head_dim], batch 1."""

    def __init__(self, engine, capacity: int, splits: int, programs: int) -> None:
        c, w = engine.config, engine.weights
        self.shape = dc.DecodeShape.of(c)
        self.capacity, self.splits, self.programs = capacity, splits, programs
        dev, dt = w.embed.device, w.embed.dtype
        self.device = dev
        self.w_qkv = torch.cat([layer.w_qkv for layer in w.layers])
        self.w_o = torch.cat([layer.w_o for layer in w.layers])
        self.w_gu = torch.cat([layer.w_gate_up for layer in w.layers])
        self.w_dn = torch.cat([layer.w_down for layer in w.layers])
        self.head = w.lm_head.contiguous()
        self.embed = w.embed
        self.bias = (torch.cat([layer.b_qkv for layer in w.layers]) if c.qkv_bias else
                     torch.zeros(c.num_layers * self.shape.n_qkv, device=dev, dtype=dt))
        self.in_norm = torch.stack([layer.input_norm for layer in w.layers]).contiguous()
        self.post_norm = torch.stack([layer.post_norm for layer in w.layers]).contiguous()
        self.final_norm = w.final_norm.contiguous()
        self.inv_freq = c.inv_freq().to(dev, torch.float32).contiguous()
        self.scale_log2 = c.head_dim ** -0.5 * math.log2(math.e)
        s = self.shape
        cache = (s.layers, capacity, s.kv_heads, s.head_dim)
        self.kc = torch.zeros(cache, device=dev, dtype=dt)
        self.vc = torch.zeros(cache, device=dev, dtype=dt)
        self.h = torch.zeros(s.hidden, device=dev, dtype=dt)
        self.qkv = torch.zeros(s.n_qkv, device=dev, dtype=dt)
        self.gu = torch.zeros(2 * s.ffn, device=dev, dtype=dt)
        self.logits = torch.zeros(s.vocab, device=dev, dtype=dt)
        self.po = torch.zeros(s.heads * splits * s.head_dim, device=dev, dtype=torch.float32)
        self.lse = torch.zeros(s.heads * splits, device=dev, dtype=torch.float32)
        self.pos = torch.zeros(1, device=dev, dtype=torch.int32)
        self.token = torch.zeros(1, device=dev, dtype=torch.int64)
        self.counter = torch.zeros(1, device=dev, dtype=torch.int32)
        self.err = torch.zeros(programs, device=dev, dtype=torch.int32)
        self._descs: dict = {}

    def load_cache(self, cache, length: int) -> None:
        """The engine cache's first `length` slots (sequence 0) into the kernel's cache."""
        for i in range(self.shape.layers):
            self.kc[i, :length].copy_(cache.keys[i][0, :length])
            self.vc[i, :length].copy_(cache.values[i][0, :length])

    def set_state(self, token: int, pos: int) -> None:
        self.token.fill_(token)
        self.pos.fill_(pos)

    def descriptors(self, ring: gc.Config) -> list:
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

        key = (ring.bn, ring.bk)
        if key not in self._descs:
            layout = gc.weight_smem_layout(ring)
            self._descs[key] = [TensorDescriptor.from_tensor(t, [ring.bn, ring.bk], layout)
                                for t in (self.w_qkv, self.w_o, self.w_gu, self.w_dn, self.head)]
        return self._descs[key]


def step_cost(shape: dc.DecodeShape, context: int) -> tuple[int, int]:
    """(FLOPs, bytes) of one step as the engine's kernels declare theirs: 2·N·K a GEMV (+ N a bias, + N a
    residual), 4·K a norm, 3 per rotated element, 4·Dh per head and cached token of attention; bytes: every weight,
    bias and norm read once, K and V of `context` tokens per layer, the activations each phase stores."""
    s, es = shape, 2
    q = s.heads * s.head_dim
    gemv = s.n_qkv * s.hidden + s.hidden * q + 2 * s.ffn * s.hidden + s.hidden * s.ffn
    flops_layer = (2 * gemv + s.n_qkv + 2 * s.hidden + 2 * 4 * s.hidden + 3 * (s.heads + s.kv_heads) * s.head_dim
                   + 4 * context * s.heads * s.head_dim + 5 * s.ffn)
    flops = s.layers * flops_layer + 4 * s.hidden + 2 * s.vocab * s.hidden
    act_layer = s.n_qkv + 2 * s.hidden + 2 * s.ffn + 2 * s.hidden  # qkv, o out, gu, down out (bf16)
    bytes_layer = (gemv + s.n_qkv + 2 * s.hidden) * es + 2 * context * s.kv_heads * s.head_dim * es + act_layer * es
    nbytes = s.layers * bytes_layer + (s.vocab * s.hidden + s.hidden + s.vocab + s.hidden) * es
    return flops, nbytes


class GluonStep:
    """The persistent kernel on a DecodeBuffers: `launch()` runs one step's kernel (counter zeroed first);
    `step(argmax)` is the whole greedy step. layers: run only the first `layers` layers (0: the final norm and
    the LM head alone, a timing probe; the same compiled kernel up to the argument's specialisation); ablate: the
    kernel's ABLATE bits (gluon_decode_kernels: parts of the step left out, a timing probe with wrong results)."""

    def __init__(self, buf: DecodeBuffers, cfg: dc.DecodeConfig, context: int, layers: int | None = None,
                 ablate: int = 0) -> None:
        self.buf, self.cfg, self.ablate = buf, cfg, ablate
        self.layers = buf.shape.layers if layers is None else layers
        # a partial step keeps its own timeout counts: buf.err stays the full step's
        self.err = buf.err if layers is None and not ablate else torch.zeros_like(buf.err)
        self.cost = step_cost(dataclasses.replace(buf.shape, layers=self.layers), context)

    def _args(self) -> tuple:
        b, s = self.buf, self.buf.shape
        return (*b.descriptors(self.cfg.ring), b.h, b.qkv, b.gu, b.logits, b.po, b.lse, b.kc, b.vc, b.bias,
                b.in_norm, b.post_norm, b.final_norm, b.inv_freq, b.pos, b.counter, self.err, self.layers, b.capacity,
                s.eps, b.scale_log2, dc.MAX_SPINS)

    def _meta(self) -> dict:
        return {**dc.constexprs(self.cfg, self.buf.shape), **gc.launch_options(self.cfg.ring), "ABLATE": self.ablate}

    def compile(self):
        """Compile without launching; the compiled kernel (registers, shared memory)."""
        import gluon_decode_kernels as dk

        return dk.decode_step.warmup(*self._args(), grid=(self.buf.programs,), **self._meta())

    def launch(self) -> None:
        import gluon_decode_kernels as dk

        self.buf.counter.zero_()
        with declare("gluon_decode_step", *self.cost, "fp32"):  # FMAs on the CUDA cores, as a batch-1 GEMV
            dk.decode_step[(self.buf.programs,)](*self._args(), **self._meta())

    def step(self, argmax: Callable) -> None:
        greedy_step(self.buf, self.launch, argmax)


def greedy_step(buf: DecodeBuffers, run: Callable[[], None], argmax: Callable) -> None:
    """embedding of the current token → h; run (the layers and the LM head); argmax → token; position + 1."""
    torch.index_select(buf.embed, 0, buf.token, out=buf.h.view(1, -1))
    run()
    argmax(buf.logits.view(1, -1), out=buf.token)
    buf.pos.add_(1)
