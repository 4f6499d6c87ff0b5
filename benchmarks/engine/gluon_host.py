"""Host side of gluon_probe.py: random qwen2-1.5b weights, the activation arena and its table, the fp32 reference,
the launchers of every variant (the one-launch Gluon chain, Gluon per-matrix launches, torch.mm, the engine's
Triton GEMV) and the error of a run against the reference.

The arena is one bf16 buffer; a table row per matrix m = 4 · layer + kind gives (x offset, x row stride, y offset).
chain: h → qkv → h2 → gate_up → h, each matrix reading the previous one's output (o_proj reads qkv[:, :1536],
down reads gate_up[:, :8960]), as a decode step does; stream: every matrix its own random x and its own y, no
dependency (the one-launch kernel needs no barrier for it).
"""

from __future__ import annotations

import math

import gluon_configs as gc
import gluon_kernels as gk
import torch
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

ALIGN = 64  # elements: every arena region starts 128-byte aligned


class Weights:
    """Per kind a [layers, N, K] bf16 tensor of N(0, 1/K) entries (each GEMV keeps the activation's scale)."""

    def __init__(self, layers: int, device: str = "cuda", seed: int = 0):
        g = torch.Generator(device=device).manual_seed(seed)
        self.layers = layers
        self.w: dict[str, torch.Tensor] = {}
        for kind, (n, k) in gc.SHAPES.items():
            t = torch.empty(layers, n, k, dtype=torch.bfloat16, device=device)
            for i in range(layers):  # a layer at a time: no fp32 temporary of the whole stack
                t[i] = (torch.randn(n, k, device=device, generator=g) / math.sqrt(k)).to(torch.bfloat16)
            self.w[kind] = t
        self._descs: dict[tuple, object] = {}

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.w.values())

    def matrix(self, m: int) -> torch.Tensor:
        return self.w[gc.KINDS[m % 4]][m // 4]

    def stacked_descriptors(self, cfg: gc.Config) -> list:
        """One TMA descriptor a kind over all layers ([layers · N, K]), box [BN, BK], in q/k/v, o, gate/up, down
        order."""
        key = ("stacked", cfg.bn, cfg.bk, cfg.mma)
        if key not in self._descs:
            self._descs[key] = [
                TensorDescriptor.from_tensor(self.w[kind].view(-1, gc.SHAPES[kind][1]), [cfg.bn, cfg.bk],
                                             gc.weight_smem_layout(cfg)) for kind in gc.KINDS]
        return self._descs[key]

    def matrix_descriptor(self, cfg: gc.Config, m: int):
        key = ("one", cfg.bn, cfg.bk, cfg.mma, m)
        if key not in self._descs:
            self._descs[key] = TensorDescriptor.from_tensor(self.matrix(m), [cfg.bn, cfg.bk], gc.weight_smem_layout(cfg))
        return self._descs[key]


class Arena:
    """Activations of one mode (chain or stream) at one batch size, the kernel's table, and the initial state."""

    def __init__(self, layers: int, batch: int, mode: str, device: str = "cuda", seed: int = 1):
        self.layers, self.batch, self.mode = layers, batch, mode
        size = 0

        def region(width: int) -> int:
            nonlocal size
            start = size
            size += -(-batch * width // ALIGN) * ALIGN
            return start

        rows, inputs = [], []
        if mode == "chain":
            h, qkv, h2, gu = (region(w) for w in (gc.SHAPES["o"][0], gc.SHAPES["qkv"][0], gc.SHAPES["o"][0],
                                                   gc.SHAPES["gate_up"][0]))
            inputs.append((h, gc.SHAPES["qkv"][1]))
            for _ in range(layers):
                rows += [(h, gc.SHAPES["qkv"][1], qkv), (qkv, gc.SHAPES["qkv"][0], h2),
                         (h2, gc.SHAPES["o"][0], gu), (gu, gc.SHAPES["gate_up"][0], h)]
        elif mode == "stream":
            for _ in range(layers):
                for kind in gc.KINDS:
                    n, k = gc.SHAPES[kind]
                    x = region(k)
                    rows.append((x, k, region(n)))
                    inputs.append((x, k))
        else:
            raise ValueError(f"mode {mode!r}")
        self.rows = rows
        self.table = torch.tensor([[x, ld, y, 0] for x, ld, y in rows], dtype=torch.int32, device=device).view(-1)
        g = torch.Generator(device=device).manual_seed(seed)
        self.initial = torch.zeros(size, dtype=torch.bfloat16, device=device)
        for off, width in inputs:
            self.initial[off:off + batch * width] = torch.randn(batch * width, device=device, generator=g).to(
                torch.bfloat16)
        self.act = self.initial.clone()

    def reset(self) -> None:
        self.act.copy_(self.initial)

    def _view(self, buf: torch.Tensor, off: int, cols: int, ld: int) -> torch.Tensor:
        return buf[off:off + self.batch * ld].view(self.batch, ld)[:, :cols]

    def x(self, m: int, buf: torch.Tensor | None = None) -> torch.Tensor:
        """Matrix m's input [B, K] (rows ld apart)."""
        off, ld, _ = self.rows[m]
        return self._view(self.act if buf is None else buf, off, gc.SHAPES[gc.KINDS[m % 4]][1], ld)

    def y(self, m: int, buf: torch.Tensor | None = None) -> torch.Tensor:
        """Matrix m's output [B, N] (contiguous)."""
        n = gc.SHAPES[gc.KINDS[m % 4]][0]
        return self._view(self.act if buf is None else buf, self.rows[m][2], n, n)


def reference(w: Weights, arena: Arena) -> torch.Tensor:
    """The arena after the table's matrices in order, in fp32 on the bf16 weights, rounded to bf16 where the
    kernels store."""
    buf = arena.initial.clone()
    for m in range(len(arena.rows)):
        y = arena.x(m, buf).float() @ w.matrix(m).float().t()
        arena.y(m, buf).copy_(y.to(torch.bfloat16))
    return buf


def errors(out: torch.Tensor, ref: torch.Tensor) -> dict:
    """Max absolute error, that over the reference's largest magnitude, and the norm-relative error."""
    out, ref = out.double(), ref.double()
    if not torch.isfinite(out).all():
        return {"max_abs_err": float("nan"), "max_rel_err": float("nan"), "rel_err": float("nan")}
    diff = (out - ref).abs()
    return {"max_abs_err": float(diff.max()), "max_rel_err": float(diff.max() / ref.abs().max()),
            "rel_err": float(diff.norm() / ref.norm())}


class Launchers:
    """Every variant as a function of the arena it runs on."""

    def __init__(self, w: Weights, sms: int, device: str = "cuda"):
        self.w, self.sms = w, sms
        self.counter = torch.zeros(1, dtype=torch.int32, device=device)
        self.err = torch.zeros(4 * sms, dtype=torch.int32, device=device)

    def programs(self, cfg: gc.Config) -> int:
        return self.sms * cfg.grid_per_sm

    def chain_ws(self, cfg: gc.Config, arena: Arena, warmup: bool = False):
        """One launch: every matrix of the table; the counter zeroed first (a memset in the graph) in both modes."""
        d = self.w.stacked_descriptors(cfg)
        args = (*d, arena.act, arena.table, self.counter, self.err, self.w.layers, gc.MAX_SPINS)
        meta = {**gc.chain_constexprs(cfg), **gc.launch_options(cfg)}
        grid = (self.programs(cfg),)
        if warmup:
            return gk.chain_ws.warmup(*args, grid=grid, **meta)
        self.counter.zero_()
        gk.chain_ws[grid](*args, **meta)

    def gemv(self, cfg: gc.Config, arena: Arena, warmup: bool = False):
        """One Gluon launch a matrix (4 a layer), min(row blocks, programs) programs each."""
        fn = gk.gemv_ws if cfg.kernel == "gemv_ws" else gk.gemv_pipe
        compiled = []
        for m in range(len(arena.rows)):
            kind = gc.KINDS[m % 4]
            grid = (min(gc.units(cfg, kind), self.programs(cfg)),)
            args = (self.w.matrix_descriptor(cfg, m), arena.x(m), arena.y(m))
            meta = {**gc.gemv_constexprs(cfg, kind), **gc.launch_options(cfg)}
            if warmup:
                if m < 4:
                    compiled.append(fn.warmup(*args, grid=grid, **meta))
                continue
            fn[grid](*args, **meta)
        return compiled

    def torch_mm(self, arena: Arena):
        for m in range(len(arena.rows)):
            torch.mm(arena.x(m), self.w.matrix(m).t(), out=arena.y(m))

    def engine(self, arena: Arena):
        """The engine's Triton decode GEMV (kernels/linear.py `linear`: ks_gemv with its own tile and split plan)."""
        from kernelscope.engine.kernels.linear import linear

        for m in range(len(arena.rows)):
            linear(arena.x(m), self.w.matrix(m), out=arena.y(m))
