"""CPU emulation of the persistent Gluon decode step (gluon_decode_kernels.decode_step) on a DecodeBuffers: the
same phases in the same order (a grid barrier = the end of a loop over programs), the same work per program (row
blocks dealt by _first_unit, attention items w ≡ p mod P, split ranges, the cache slot of the new token), the
same staging and epilogue rounding. It also replays each program's loader and consumer tile sequences and checks
that they match tile for tile (the ring is FIFO) and that every row of every matrix is reduced exactly once.

`EmulatedStep(buf, cfg).run()` fills buf.logits, buf.h, the cache slot `pos`, as the kernel does. Values are
rounded to the buffers' dtype where the kernel rounds to bf16: on fp32 buffers (an fp32 engine) nothing is
rounded, so the emulation must match the engine's fp32 reference to fp32 precision and any indexing error stands
out above rounding noise.
"""

from __future__ import annotations

import gluon_decode_configs as dc
import torch


def first_unit(p: int, P: int, base: int) -> int:
    return (p + P - base % P) % P


class EmulatedStep:
    def __init__(self, buf, cfg: dc.DecodeConfig, check_ring: bool = True) -> None:
        self.buf, self.cfg, self.check_ring = buf, cfg, check_ring
        self.P = buf.programs
        self.bn, self.bk = cfg.ring.bn, cfg.ring.bk
        self.loaded: list[list[tuple]] = [[] for _ in range(self.P)]
        self.consumed: list[list[tuple]] = [[] for _ in range(self.P)]
        self.reduced: dict[str, torch.Tensor] = {}
        self.dt = buf.h.dtype

    def bf(self, x: torch.Tensor) -> torch.Tensor:
        """The kernel's bf16 rounding, in the buffers' dtype."""
        return x.to(self.dt).float()

    # ------------------------------------------------------------------ the loader's sequence (per program)
    def _loader(self) -> None:
        s, bn = self.buf.shape, self.bn
        uq, uo, ug, ud = s.units_per_layer(bn)
        u_layer = uq + uo + ug + ud
        mats = [("qkv", s.n_qkv, s.hidden, uq), ("o", s.hidden, s.heads * s.head_dim, uo),
                ("gu", 2 * s.ffn, s.hidden, ug), ("dn", s.hidden, s.ffn, ud)]
        for p in range(self.P):
            for layer in range(s.layers):
                base = layer * u_layer
                for name, n, k, units in mats:
                    for u in range(first_unit(p, self.P, base), units, self.P):
                        for kt in range(k // self.bk):
                            self.loaded[p].append((name, layer * n + u * bn, kt * self.bk))
                    base += units
            for u in range(first_unit(p, self.P, s.layers * u_layer), s.vocab // bn, self.P):
                for kt in range(s.hidden // self.bk):
                    self.loaded[p].append(("head", u * bn, kt * self.bk))

    # ------------------------------------------------------------------ compute pieces
    def _norm(self, nw: torch.Tensor) -> torch.Tensor:
        x = self.buf.h.float()
        rstd = torch.rsqrt((x * x).sum() / x.numel() + self.buf.shape.eps)
        return self.bf(self.bf(x * rstd) * nw.float())

    def _rows(self, p: int, name: str, w: torch.Tensor, layer: int, n: int, x: torch.Tensor, first: int,
              epi) -> None:
        """Row blocks first, first + P, ... of matrix `name` of this layer; epi(rows, y) stores."""
        k = x.numel()
        for u in range(first, n // self.bn, self.P):
            row0 = layer * n + u * self.bn
            for kt in range(k // self.bk):
                self.consumed[p].append((name, row0, kt * self.bk))
            y = w[row0:row0 + self.bn].float() @ x
            rows = torch.arange(u * self.bn, (u + 1) * self.bn)
            key = f"{name}{layer}"
            self.reduced.setdefault(key, torch.zeros(n, dtype=torch.int32))[rows] += 1
            epi(rows, y)

    def _attention(self, p: int, layer: int, pos: int) -> None:
        b, s, cfg = self.buf, self.buf.shape, self.cfg
        d, half, group, S = s.head_dim, s.head_dim // 2, s.heads // s.kv_heads, cfg.splits
        freq = float(pos) * b.inv_freq.float()
        cos, sin = self.bf(torch.cos(freq)), self.bf(torch.sin(freq))

        def rope(v: torch.Tensor) -> torch.Tensor:
            x1, x2 = v[:half].float(), v[half:].float()
            o1 = self.bf(self.bf(x1 * cos) + self.bf(-x2 * sin))
            o2 = self.bf(self.bf(x2 * cos) + self.bf(x1 * sin))
            return torch.cat([o1, o2])

        length = pos + 1
        chunk = (length + S - 1) // S
        for w in range(p, s.heads * S, self.P):
            head, split = divmod(w, S)
            g = head // group
            q = rope(b.qkv[head * d:(head + 1) * d])
            k_new = rope(b.qkv[(s.heads + g) * d:(s.heads + g + 1) * d])
            v_new = b.qkv[(s.heads + s.kv_heads + g) * d:(s.heads + s.kv_heads + g + 1) * d].float()
            if split == 0 and head % group == 0:
                b.kc[layer, pos, g] = k_new.to(self.dt)
                b.vc[layer, pos, g] = v_new.to(self.dt)
            t0, t1 = split * chunk, min(split * chunk + chunk, length)
            m, lsum = float("-inf"), 0.0
            acc = torch.zeros(d)
            for start in range(t0, t1, cfg.block_t):
                ts = torch.arange(start, start + cfg.block_t)
                old = ts < min(t1, pos)
                kt = torch.zeros(cfg.block_t, d)
                vt = torch.zeros(cfg.block_t, d)
                kt[old] = b.kc[layer, ts[old], g].float()
                vt[old] = b.vc[layer, ts[old], g].float()
                kt[ts == pos] = k_new
                vt[ts == pos] = v_new
                sc = torch.where(ts < t1, (kt @ q) * b.scale_log2, torch.tensor(float("-inf")))
                m_new = max(m, float(sc.max()))
                pr = torch.exp2(sc - m_new)
                corr = 2.0 ** (m - m_new)
                lsum = lsum * corr + float(pr.sum())
                acc = acc * corr + self.bf(pr) @ vt
                m = m_new
            b.po[w * d:(w + 1) * d] = acc / (lsum if lsum > 0 else 1.0)
            b.lse[w] = m + torch.log2(torch.tensor(lsum)).item() if lsum > 0 else float("-inf")

    def _combine(self) -> torch.Tensor:
        b, s, S = self.buf, self.buf.shape, self.cfg.splits
        lse = b.lse.view(s.heads, S, 1)
        po = b.po.view(s.heads, S, s.head_dim)
        wgt = torch.exp2(lse - lse.max(dim=1, keepdim=True).values)
        return self.bf((wgt * po).sum(1) / wgt.sum(1)).reshape(-1)

    # ------------------------------------------------------------------ the step
    def run(self) -> None:
        b, s, P = self.buf, self.buf.shape, self.P
        pos = int(b.pos.item())
        bn = self.bn
        uq, uo, ug, ud = s.units_per_layer(bn)
        u_layer = uq + uo + ug + ud

        def store(out: torch.Tensor, aux: torch.Tensor | None = None, residual: bool = False):
            def epi(rows: torch.Tensor, y: torch.Tensor) -> None:
                if aux is not None:
                    y = y + aux[rows].float()
                if residual:
                    y = self.bf(y) + out[rows].float()
                out[rows] = y.to(self.dt)
            return epi

        for layer in range(s.layers):
            base = layer * u_layer
            x = self._norm(b.in_norm[layer])
            bias = b.bias[layer * s.n_qkv:(layer + 1) * s.n_qkv]
            for p in range(P):  # phase A
                self._rows(p, "qkv", b.w_qkv, layer, s.n_qkv, x, first_unit(p, P, base), store(b.qkv, bias))
            for p in range(P):  # phase B
                self._attention(p, layer, pos)
            x = self._combine()
            for p in range(P):  # phase C
                self._rows(p, "o", b.w_o, layer, s.hidden, x, first_unit(p, P, base + uq), store(b.h, residual=True))
            x = self._norm(b.post_norm[layer])
            for p in range(P):  # phase D
                self._rows(p, "gu", b.w_gu, layer, 2 * s.ffn, x, first_unit(p, P, base + uq + uo), store(b.gu))
            g, u = b.gu[:s.ffn].float(), b.gu[s.ffn:].float()
            x = self.bf(self.bf(g / (1.0 + torch.exp(-g))) * u)
            for p in range(P):  # phase E
                self._rows(p, "dn", b.w_dn, layer, s.hidden, x, first_unit(p, P, base + uq + uo + ug),
                           store(b.h, residual=True))
        x = self._norm(b.final_norm)
        for p in range(P):
            self._rows(p, "head", b.head, 0, s.vocab, x, first_unit(p, P, s.layers * u_layer), store(b.logits))
        if self.check_ring:
            self._check()

    def _check(self) -> None:
        """The loader's tile sequence equals the consumer's in every program; every row reduced exactly once."""
        self._loader()
        for p in range(self.P):
            if self.loaded[p] != self.consumed[p]:
                n = next((i for i, (a, c) in enumerate(zip(self.loaded[p], self.consumed[p], strict=False))
                          if a != c), min(len(self.loaded[p]), len(self.consumed[p])))
                raise AssertionError(f"program {p}: loader and consumer differ at tile {n} "
                                     f"({len(self.loaded[p])} loaded, {len(self.consumed[p])} consumed)")
        for key, count in self.reduced.items():
            if not bool((count == 1).all()):
                raise AssertionError(f"{key}: rows reduced {int(count.min())}..{int(count.max())} times")
        self.loaded = [[] for _ in range(self.P)]
        self.consumed = [[] for _ in range(self.P)]
        self.reduced = {}

    def tiles_per_program(self) -> tuple[int, int]:
        """(fewest, most) weight tiles a program streams (after a run with check_ring)."""
        self._loader()
        counts = [len(t) for t in self.loaded]
        self.loaded = [[] for _ in range(self.P)]
        return min(counts), max(counts)
