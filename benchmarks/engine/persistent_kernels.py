"""The Triton kernels of persistent_probe.py (its driver and host side live there and in persistent_host.py):
a grid-wide spin barrier, the tiled persistent GEMV chain (design 1) and the flat-segment one (design 2), each
with its one-op kernel for the ordinary-launch comparison, and the model shape they are built for."""

from __future__ import annotations

import triton
import triton.language as tl

# qwen2-1.5b
HIDDEN, Q_ROWS, KV_ROWS, FFN, LAYERS = 1536, 1536, 256, 8960, 28
QKV_ROWS = Q_ROWS + 2 * KV_ROWS  # 2048
HEADS, KV_HEADS, HEAD_DIM = 12, 2, 128
EPS = 1e-6
MAX_SPINS = 1 << 22  # a barrier wait gives up after this many polls (a deadlock becomes an error count)


# ----------------------------------------------------------------------------------------------------------- barrier

@triton.jit
def _poll(counter_ptr, SPIN: tl.constexpr):
    """The counter, read with acquire semantics at gpu scope (SPIN 0: atomic add of 0 by one thread, broadcast;
    1: ld.acquire.gpu by every thread; 2: ld.relaxed.gpu by every thread, the acquire fence after the loop)."""
    if SPIN == 0:
        v = tl.atomic_add(counter_ptr, 0, sem="acquire", scope="gpu")
    elif SPIN == 1:
        v = tl.inline_asm_elementwise("ld.global.acquire.gpu.b32 $0, [$1];", "=r,l", [counter_ptr],
                                      dtype=tl.int32, is_pure=False, pack=1)
    else:
        v = tl.inline_asm_elementwise("ld.global.relaxed.gpu.b32 $0, [$1];", "=r,l", [counter_ptr],
                                      dtype=tl.int32, is_pure=False, pack=1)
    return v


@triton.jit
def _arrive(counter_ptr):
    """Every warp's earlier stores ordered before one release increment of the grid counter."""
    tl.debug_barrier()
    tl.atomic_add(counter_ptr, 1, sem="release", scope="gpu")


@triton.jit
def _wait(counter_ptr, target, max_spins, SPIN: tl.constexpr):
    """Spin until the counter reaches target (or max_spins polls: returns 1 then, else 0)."""
    v = _poll(counter_ptr, SPIN)
    n = 0
    while (v < target) & (n < max_spins):
        v = _poll(counter_ptr, SPIN)
        n += 1
    if SPIN == 2:
        tl.inline_asm_elementwise("fence.acq_rel.gpu; mov.u32 $0, 0;", "=r", [], dtype=tl.int32, is_pure=False,
                                  pack=1)
    tl.debug_barrier()
    return (v < target).to(tl.int32)


@triton.jit
def _smid():
    return tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32, is_pure=True, pack=1)


@triton.jit(do_not_specialize=["rounds", "max_spins"])
def barrier_kernel(counter_ptr, flags_ptr, bad_ptr, err_ptr, sm_ptr, rounds, max_spins,
                   CHECK: tl.constexpr, SPIN: tl.constexpr, BLOCK: tl.constexpr):
    """`rounds` grid barriers. CHECK: before barrier r each program stores r into its BLOCK flags (every thread
    stores); after it reads another program's flags and counts values outside {r, r + 1} (violations)."""
    p = tl.program_id(0)
    nprog = tl.num_programs(0)
    offs = tl.arange(0, BLOCK)
    bad = tl.zeros([BLOCK], tl.int32)
    fails = 0
    for r in range(1, rounds + 1):
        if CHECK:
            tl.store(flags_ptr + p * BLOCK + offs, tl.zeros([BLOCK], tl.int32) + r)
        _arrive(counter_ptr)
        fails += _wait(counter_ptr, r * nprog, tl.where(fails > 0, 0, max_spins), SPIN)
        if CHECK:
            other = (p + 1 + (r * 7) % (nprog - 1)) % nprog
            seen = tl.load(flags_ptr + other * BLOCK + offs)
            bad += ((seen < r) | (seen > r + 1)).to(tl.int32)
    tl.store(bad_ptr + p, tl.sum(bad, 0))
    tl.store(err_ptr + p, fails)
    tl.store(sm_ptr + p, _smid())


# -------------------------------------------------------------------------------------------------------- GEMV parts

@triton.jit
def _tile(w_ptr, r0, r1, t, n_t, N: tl.constexpr, K: tl.constexpr, PAIRED: tl.constexpr,
          BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Weight tile t (row chunk t // NKC, K chunk t % NKC) of this program's rows [r0, r1); PAIRED also the tile
    of rows + N (the up rows of gate/up). Masked to nothing once t ≥ n_t."""
    NKC: tl.constexpr = (K + BLOCK_K - 1) // BLOCK_K
    rows = r0 + (t // NKC) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = (t % NKC) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = ((rows < r1) & (t < n_t))[:, None] & (ks < K)[None, :]
    ptrs = w_ptr + rows[:, None] * K + ks[None, :]
    w1 = tl.load(ptrs, mask=mask, other=0.0, eviction_policy="evict_first")
    if PAIRED:  # noqa: SIM108 (a constexpr branch)
        w2 = tl.load(ptrs + N * K, mask=mask, other=0.0, eviction_policy="evict_first")
    else:
        w2 = w1
    return w1, w2


@triton.jit
def _rows(p, P, N: tl.constexpr):
    """This program's contiguous rows [r0, r1) of N: the most even split over P programs."""
    return p * N // P, (p + 1) * N // P


@triton.jit
def _n_tiles(r0, r1, K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    NKC: tl.constexpr = (K + BLOCK_K - 1) // BLOCK_K
    return tl.cdiv(r1 - r0, BLOCK_N) * NKC


@triton.jit
def _first_tile(w_ptr, p, P, N: tl.constexpr, K: tl.constexpr, PAIRED: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_K: tl.constexpr):
    r0, r1 = _rows(p, P, N)
    return _tile(w_ptr, r0, r1, 0, _n_tiles(r0, r1, K, BLOCK_N, BLOCK_K), N, K, PAIRED, BLOCK_N, BLOCK_K)


# thread i prefetches bytes [i·$3, min((i + 1)·$3, $2)) of the rows at $1 into L2 (fire and forget)
_L2_PREFETCH_ASM = tl.constexpr("""{ .reg .pred p; .reg .u32 t, off, rest, sz; .reg .u64 a;
    mov.u32 t, %tid.x; mul.lo.u32 off, t, $3; setp.lt.u32 p, off, $2;
    sub.u32 rest, $2, off; min.u32 sz, rest, $3;
    mad.wide.u32 a, t, $3, $1;
    @p cp.async.bulk.prefetch.L2.global [a], sz;
    mov.u32 $0, 0; }""")


@triton.jit
def _l2_prefetch(w_ptr, p, P, N: tl.constexpr, K: tl.constexpr, PAIRED: tl.constexpr, MAX_BYTES: tl.constexpr,
                 CHUNK: tl.constexpr):
    """cp.async.bulk.prefetch.L2 of the first MAX_BYTES of this program's weight rows (and of its up rows):
    thread i of the program prefetches chunk i (CHUNK bytes, the last one shorter)."""
    r0, r1 = _rows(p, P, N)
    base = w_ptr + r0 * K
    total = tl.minimum((r1 - r0) * K * 2, MAX_BYTES)
    tl.inline_asm_elementwise(_L2_PREFETCH_ASM, "=r,l,r,r", [base, total, CHUNK], dtype=tl.int32, is_pure=False,
                              pack=1)
    if PAIRED:
        tl.inline_asm_elementwise(_L2_PREFETCH_ASM, "=r,l,r,r", [base + N * K, total, CHUNK], dtype=tl.int32,
                                  is_pure=False, pack=1)


@triton.jit
def _rstd(x_ptr, H: tl.constexpr, BLOCK_H: tl.constexpr, eps):
    hs = tl.arange(0, BLOCK_H)
    x = tl.load(x_ptr + hs, mask=hs < H, other=0.0, cache_modifier=".cg").to(tl.float32)
    return tl.math.rsqrt(tl.sum(x * x, 0) / H + eps)


@triton.jit
def _gemv(w_ptr, x_ptr, nw_ptr, res_ptr, out_ptr, p, P, w1, w2, rstd, N: tl.constexpr, K: tl.constexpr,
          PAIRED: tl.constexpr, NORM: tl.constexpr, RESID: tl.constexpr, BLOCK_N: tl.constexpr,
          BLOCK_K: tl.constexpr, DIST: tl.constexpr):
    """out[r0:r1] of x·Wᵀ for this program's rows, fp32 accumulation; w1/w2: its first tile, already loaded (or
    in flight). Each iteration issues the loads of the tile DIST ahead (1 or 2) before it uses the current one.
    x (and the norm weight) is loaded in the tile's own layout, the same K slice for every row (L1 hits after the
    first row), so that no layout conversion through shared memory sits in the loop.
    NORM: (x·norm_w)·Wᵀ·rstd; PAIRED: silu(gate)·up with up rows at + N; RESID: + res[rows]."""
    NKC: tl.constexpr = (K + BLOCK_K - 1) // BLOCK_K
    r0, r1 = _rows(p, P, N)
    n_t = _n_tiles(r0, r1, K, BLOCK_N, BLOCK_K)
    acc1 = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
    acc2 = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
    zero_rows = tl.zeros([BLOCK_N, 1], tl.int32)
    if DIST == 2:
        b1, b2 = _tile(w_ptr, r0, r1, 1, n_t, N, K, PAIRED, BLOCK_N, BLOCK_K)
    for t in range(0, n_t):
        n1, n2 = _tile(w_ptr, r0, r1, t + DIST, n_t, N, K, PAIRED, BLOCK_N, BLOCK_K)
        kc = t % NKC
        ks = kc * BLOCK_K + tl.arange(0, BLOCK_K)
        ks2 = zero_rows + ks[None, :]
        x = tl.load(x_ptr + ks2, mask=ks2 < K, other=0.0).to(tl.float32)
        if NORM:
            x = x * tl.load(nw_ptr + ks2, mask=ks2 < K, other=0.0).to(tl.float32)
        acc1 += w1.to(tl.float32) * x
        if PAIRED:
            acc2 += w2.to(tl.float32) * x
        if kc == NKC - 1:
            rows = r0 + (t // NKC) * BLOCK_N + tl.arange(0, BLOCK_N)
            rmask = rows < r1
            y = tl.sum(acc1, 1)
            if NORM:
                y = y * rstd
            if PAIRED:
                up = tl.sum(acc2, 1) * rstd
                y = y / (1.0 + tl.exp(-y)) * up
            if RESID:
                y = y + tl.load(res_ptr + rows, mask=rmask, other=0.0).to(tl.float32)
            tl.store(out_ptr + rows, y.to(out_ptr.dtype.element_ty), mask=rmask)
            acc1 = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
            acc2 = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
        if DIST == 2:
            w1 = b1
            w2 = b2
            b1 = n1
            b2 = n2
        else:
            w1 = n1
            w2 = n2


# ---------------------------------------------------------------------------------------------- persistent kernel

@triton.jit
def _sync_and_next(counter_ptr, rnd, P, fails, max_spins, w_ptr, p, N: tl.constexpr, K: tl.constexpr,
                   PAIRED: tl.constexpr, PF_REG: tl.constexpr, PF_L2: tl.constexpr, L2_BYTES: tl.constexpr,
                   SYNC: tl.constexpr, SPIN: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Grid barrier number rnd, and the next op's first weight tile: loaded between the arrive and the wait
    (PF_REG) or after the wait; PF_L2 also bulk-prefetches the first L2_BYTES of the next op's rows into L2
    between the arrive and the wait."""
    if SYNC:
        _arrive(counter_ptr)
    if PF_L2:
        _l2_prefetch(w_ptr, p, P, N, K, PAIRED, L2_BYTES, 4096)
    if PF_REG:
        w1, w2 = _first_tile(w_ptr, p, P, N, K, PAIRED, BLOCK_N, BLOCK_K)
    if SYNC:
        fails += _wait(counter_ptr, rnd * P, tl.where(fails > 0, 0, max_spins), SPIN)
    if not PF_REG:
        w1, w2 = _first_tile(w_ptr, p, P, N, K, PAIRED, BLOCK_N, BLOCK_K)
    return w1, w2, fails


@triton.jit(do_not_specialize=["n_layers", "max_spins"])
def persistent_chain(h_ptr, qkv_ptr, act_ptr, wqkv_ptr, wo_ptr, wgu_ptr, wd_ptr, n1_ptr, n2_ptr,
                     counter_ptr, err_ptr, n_layers, eps, max_spins,
                     H: tl.constexpr, NQKV: tl.constexpr, F: tl.constexpr, BLOCK_H: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PF_REG: tl.constexpr, PF_L2: tl.constexpr,
                     L2_BYTES: tl.constexpr, SYNC: tl.constexpr, SPIN: tl.constexpr, DIST: tl.constexpr):
    """n_layers × [qkv = norm(h)·Wqkvᵀ | h += Wo·qkv[:H] | act = swiglu(norm(h)·Wguᵀ) | h += Wd·act], a grid
    barrier after each op; every program owns a contiguous range of each op's rows."""
    p = tl.program_id(0)
    P = tl.num_programs(0)
    fails = 0
    rnd = 0
    w1, w2 = _first_tile(wqkv_ptr, p, P, NQKV, H, False, BLOCK_N, BLOCK_K)
    for layer in range(n_layers):
        lw = layer.to(tl.int64)
        wqkv = wqkv_ptr + lw * (NQKV * H)
        wo = wo_ptr + lw * (H * H)
        wgu = wgu_ptr + lw * (2 * F * H)
        wd = wd_ptr + lw * (H * F)
        rstd = _rstd(h_ptr, H, BLOCK_H, eps)
        _gemv(wqkv, h_ptr, n1_ptr + layer * H, h_ptr, qkv_ptr, p, P, w1, w2, rstd, NQKV, H, False, True, False,
              BLOCK_N, BLOCK_K, DIST)
        rnd += 1
        w1, w2, fails = _sync_and_next(counter_ptr, rnd, P, fails, max_spins, wo, p, H, H, False, PF_REG, PF_L2,
                                       L2_BYTES, SYNC, SPIN, BLOCK_N, BLOCK_K)
        _gemv(wo, qkv_ptr, h_ptr, h_ptr, h_ptr, p, P, w1, w2, 1.0, H, H, False, False, True, BLOCK_N, BLOCK_K, DIST)
        rnd += 1
        w1, w2, fails = _sync_and_next(counter_ptr, rnd, P, fails, max_spins, wgu, p, F, H, True, PF_REG, PF_L2,
                                       L2_BYTES, SYNC, SPIN, BLOCK_N, BLOCK_K)
        rstd = _rstd(h_ptr, H, BLOCK_H, eps)
        _gemv(wgu, h_ptr, n2_ptr + layer * H, h_ptr, act_ptr, p, P, w1, w2, rstd, F, H, True, True, False,
              BLOCK_N, BLOCK_K, DIST)
        rnd += 1
        w1, w2, fails = _sync_and_next(counter_ptr, rnd, P, fails, max_spins, wd, p, H, F, False, PF_REG, PF_L2,
                                       L2_BYTES, SYNC, SPIN, BLOCK_N, BLOCK_K)
        _gemv(wd, act_ptr, h_ptr, h_ptr, h_ptr, p, P, w1, w2, 1.0, H, F, False, False, True, BLOCK_N, BLOCK_K, DIST)
        rnd += 1
        # the next layer's q/k/v (past the last layer: masked, rows of a layer that does not exist are not read)
        nxt = wqkv_ptr + (lw + 1) * (NQKV * H)
        if SYNC:
            _arrive(counter_ptr)
        if PF_L2:  # noqa: SIM102 (a constexpr test around a run-time one)
            if layer + 1 < n_layers:
                _l2_prefetch(nxt, p, P, NQKV, H, False, L2_BYTES, 4096)
        if PF_REG:
            r0, r1 = _rows(p, P, NQKV)
            w1, w2 = _tile(nxt, r0, r1, 0, tl.where(layer + 1 < n_layers, 1, 0), NQKV, H, False, BLOCK_N, BLOCK_K)
        if SYNC:
            fails += _wait(counter_ptr, rnd * P, tl.where(fails > 0, 0, max_spins), SPIN)
        if not PF_REG:
            r0, r1 = _rows(p, P, NQKV)
            w1, w2 = _tile(nxt, r0, r1, 0, tl.where(layer + 1 < n_layers, 1, 0), NQKV, H, False, BLOCK_N, BLOCK_K)
    tl.store(err_ptr + p, fails)


@triton.jit
def gemv_op_kernel(w_ptr, x_ptr, nw_ptr, res_ptr, out_ptr, eps, N: tl.constexpr, K: tl.constexpr,
                   PAIRED: tl.constexpr, NORM: tl.constexpr, RESID: tl.constexpr, H: tl.constexpr,
                   BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DIST: tl.constexpr):
    """One op of the chain as an ordinary kernel (variant c1): the same rows per program and the same loop."""
    p = tl.program_id(0)
    P = tl.num_programs(0)
    w1, w2 = _first_tile(w_ptr, p, P, N, K, PAIRED, BLOCK_N, BLOCK_K)
    rstd = 1.0
    if NORM:
        rstd = _rstd(x_ptr, H, BLOCK_H, eps)
    _gemv(w_ptr, x_ptr, nw_ptr, res_ptr, out_ptr, p, P, w1, w2, rstd, N, K, PAIRED, NORM, RESID, BLOCK_N, BLOCK_K,
          DIST)


# ------------------------------------------------------------------- flat-segment GEMV (full tiles, design 2)
# Call 1 showed the tiled loop above latency-bound: its [16, BLOCK_K] tiles are 75% full for o_proj and down (11–12
# rows a program) and gate/up's fifth row chunk holds 3–4 of 16 rows, and each iteration costs about the same
# whatever its valid bytes. Here a program's rows [r0, r1) are one contiguous run of (r1 - r0)·K/BK segments of BK
# elements (BK divides K: 256 for K 1,536 and 8,960), streamed as full [SEGS, BK] tiles (only a program's last tile
# is partial). Each warp reduces whole segments (a row of the tile layout lies in one warp: no shared memory in the
# loop); the segment sums go to a small per-program scratch in global memory, summed per row in the epilogue.
SCR_HALF = tl.constexpr(1024)  # scratch floats a program keeps per stream (gate/up: 68 × 6 segments, down: 12 × 35)


@triton.jit
def _st_f32(ptrs, values):
    return tl.inline_asm_elementwise("st.global.f32 [$1], $2; mov.u32 $0, 0;", "=r,l,f",
                                     [ptrs.to(tl.int64, bitcast=True), values],
                                     dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _fspan(p, P, N: tl.constexpr, K: tl.constexpr, BK: tl.constexpr):
    r0, r1 = _rows(p, P, N)
    return r0 * K, (r1 - r0) * (K // BK)


@triton.jit
def _ftile(w_ptr, base, nseg, t, N: tl.constexpr, K: tl.constexpr, PAIRED: tl.constexpr, SEGS: tl.constexpr,
           BK: tl.constexpr):
    segs = t * SEGS + tl.arange(0, SEGS)
    offs = base + segs[:, None] * BK + tl.arange(0, BK)[None, :]
    mask = (segs < nseg)[:, None]
    w1 = tl.load(w_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first")
    if PAIRED:  # noqa: SIM108 (a constexpr branch)
        w2 = tl.load(w_ptr + N * K + offs, mask=mask, other=0.0, eviction_policy="evict_first")
    else:
        w2 = w1
    return w1, w2


@triton.jit
def _ffirst(w_ptr, p, P, N: tl.constexpr, K: tl.constexpr, PAIRED: tl.constexpr, SEGS: tl.constexpr,
            BK: tl.constexpr):
    base, nseg = _fspan(p, P, N, K, BK)
    return _ftile(w_ptr, base, nseg, 0, N, K, PAIRED, SEGS, BK)


@triton.jit
def _fmain(w_ptr, x_ptr, nw_ptr, scr_ptr, p, P, w1, w2, N: tl.constexpr, K: tl.constexpr, PAIRED: tl.constexpr,
           NORM: tl.constexpr, SEGS: tl.constexpr, BK: tl.constexpr, DIST: tl.constexpr):
    """The streaming loop: segment sums of x·W for this program's segments into scr (and scr + SCR_HALF)."""
    NSR: tl.constexpr = K // BK
    base, nseg = _fspan(p, P, N, K, BK)
    n_t = tl.cdiv(nseg, SEGS)
    if DIST == 2:
        b1, b2 = _ftile(w_ptr, base, nseg, 1, N, K, PAIRED, SEGS, BK)
    for t in range(0, n_t):
        n1, n2 = _ftile(w_ptr, base, nseg, t + DIST, N, K, PAIRED, SEGS, BK)
        segs = t * SEGS + tl.arange(0, SEGS)
        kk = (segs % NSR)[:, None] * BK + tl.arange(0, BK)[None, :]
        x = tl.load(x_ptr + kk).to(tl.float32)
        if NORM:
            x = x * tl.load(nw_ptr + kk).to(tl.float32)
        # stored where the warp reduction leaves them (a tl.store would first convert the layout through shared
        # memory, two CTA barriers an iteration); segments past nseg store 0 inside the scratch
        _st_f32(scr_ptr + segs, tl.sum(w1.to(tl.float32) * x, 1))
        if PAIRED:
            _st_f32(scr_ptr + SCR_HALF + segs, tl.sum(w2.to(tl.float32) * x, 1))
        if DIST == 2:
            w1 = b1
            w2 = b2
            b1 = n1
            b2 = n2
        else:
            w1 = n1
            w2 = n2


@triton.jit
def _fepi(scr_ptr, res_ptr, out_ptr, p, P, rstd, N: tl.constexpr, K: tl.constexpr, PAIRED: tl.constexpr,
          NORM: tl.constexpr, RESID: tl.constexpr, BK: tl.constexpr, RMAX: tl.constexpr, NSR_P2: tl.constexpr):
    """Per-row sums of the segment sums, the epilogue, the stores of this program's rows."""
    NSR: tl.constexpr = K // BK
    r0, r1 = _rows(p, P, N)
    tl.debug_barrier()  # every warp's segment sums are stored
    rr = tl.arange(0, RMAX)
    jj = tl.arange(0, NSR_P2)
    rmask = rr < r1 - r0
    m = rmask[:, None] & (jj < NSR)[None, :]
    idx = rr[:, None] * NSR + jj[None, :]
    y = tl.sum(tl.load(scr_ptr + idx, mask=m, other=0.0, cache_modifier=".cg"), 1)
    if NORM:
        y = y * rstd
    if PAIRED:
        up = tl.sum(tl.load(scr_ptr + SCR_HALF + idx, mask=m, other=0.0, cache_modifier=".cg"), 1) * rstd
        y = y / (1.0 + tl.exp(-y)) * up
    rows = r0 + rr
    if RESID:
        y = y + tl.load(res_ptr + rows, mask=rmask, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows, y.to(out_ptr.dtype.element_ty), mask=rmask)


@triton.jit
def _fsync(counter_ptr, rnd, P, fails, max_spins, w1, w2, w_ptr, p, N: tl.constexpr, K: tl.constexpr,
           PAIRED: tl.constexpr, MODE: tl.constexpr, SYNC: tl.constexpr, SPIN: tl.constexpr, SEGS: tl.constexpr,
           BK: tl.constexpr):
    """Grid barrier rnd; the next op's first tile: MODE 0 loads it after the wait, 1 between the arrive and the
    wait, 2 was loaded by the caller before the epilogue (w1, w2 passed through)."""
    if SYNC:
        _arrive(counter_ptr)
    if MODE == 1:
        w1, w2 = _ffirst(w_ptr, p, P, N, K, PAIRED, SEGS, BK)
    if SYNC:
        fails += _wait(counter_ptr, rnd * P, tl.where(fails > 0, 0, max_spins), SPIN)
    if MODE == 0:
        w1, w2 = _ffirst(w_ptr, p, P, N, K, PAIRED, SEGS, BK)
    return w1, w2, fails


@triton.jit(do_not_specialize=["n_layers", "max_spins"])
def persistent_flat(h_ptr, qkv_ptr, act_ptr, wqkv_ptr, wo_ptr, wgu_ptr, wd_ptr, n1_ptr, n2_ptr, scr_ptr,
                    counter_ptr, err_ptr, n_layers, eps, max_spins,
                    H: tl.constexpr, NQKV: tl.constexpr, F: tl.constexpr, BLOCK_H: tl.constexpr, SEGS: tl.constexpr,
                    BK: tl.constexpr, DIST: tl.constexpr, MODE: tl.constexpr, SYNC: tl.constexpr,
                    SPIN: tl.constexpr):
    """persistent_chain with the flat-segment loop. MODE 2 ('early') issues the next op's first tile before the
    current op's epilogue, so that the epilogue's scratch round trip and the barrier both overlap its loads."""
    p = tl.program_id(0)
    P = tl.num_programs(0)
    scr = scr_ptr + p * (2 * SCR_HALF)
    fails = 0
    rnd = 0
    w1, w2 = _ffirst(wqkv_ptr, p, P, NQKV, H, False, SEGS, BK)
    for layer in range(n_layers):
        lw = layer.to(tl.int64)
        wqkv = wqkv_ptr + lw * (NQKV * H)
        wo = wo_ptr + lw * (H * H)
        wgu = wgu_ptr + lw * (2 * F * H)
        wd = wd_ptr + lw * (H * F)
        rstd = _rstd(h_ptr, H, BLOCK_H, eps)
        _fmain(wqkv, h_ptr, n1_ptr + layer * H, scr, p, P, w1, w2, NQKV, H, False, True, SEGS, BK, DIST)
        if MODE == 2:
            w1, w2 = _ffirst(wo, p, P, H, H, False, SEGS, BK)
        _fepi(scr, h_ptr, qkv_ptr, p, P, rstd, NQKV, H, False, True, False, BK, 16, 8)
        rnd += 1
        w1, w2, fails = _fsync(counter_ptr, rnd, P, fails, max_spins, w1, w2, wo, p, H, H, False, MODE, SYNC, SPIN,
                               SEGS, BK)
        _fmain(wo, qkv_ptr, h_ptr, scr, p, P, w1, w2, H, H, False, False, SEGS, BK, DIST)
        if MODE == 2:
            w1, w2 = _ffirst(wgu, p, P, F, H, True, SEGS, BK)
        _fepi(scr, h_ptr, h_ptr, p, P, 1.0, H, H, False, False, True, BK, 16, 8)
        rnd += 1
        w1, w2, fails = _fsync(counter_ptr, rnd, P, fails, max_spins, w1, w2, wgu, p, F, H, True, MODE, SYNC, SPIN,
                               SEGS, BK)
        rstd = _rstd(h_ptr, H, BLOCK_H, eps)
        _fmain(wgu, h_ptr, n2_ptr + layer * H, scr, p, P, w1, w2, F, H, True, True, SEGS, BK, DIST)
        if MODE == 2:
            w1, w2 = _ffirst(wd, p, P, H, F, False, SEGS, BK)
        _fepi(scr, h_ptr, act_ptr, p, P, rstd, F, H, True, True, False, BK, 128, 8)
        rnd += 1
        w1, w2, fails = _fsync(counter_ptr, rnd, P, fails, max_spins, w1, w2, wd, p, H, F, False, MODE, SYNC, SPIN,
                               SEGS, BK)
        _fmain(wd, act_ptr, h_ptr, scr, p, P, w1, w2, H, F, False, False, SEGS, BK, DIST)
        # the next layer's q/k/v (none past the last layer)
        nxt = wqkv_ptr + (lw + 1) * (NQKV * H)
        base, nseg = _fspan(p, P, NQKV, H, BK)
        nseg = tl.where(layer + 1 < n_layers, nseg, 0)
        if MODE == 2:
            w1, w2 = _ftile(nxt, base, nseg, 0, NQKV, H, False, SEGS, BK)
        _fepi(scr, h_ptr, h_ptr, p, P, 1.0, H, F, False, False, True, BK, 16, 64)
        rnd += 1
        if SYNC:
            _arrive(counter_ptr)
        if MODE == 1:
            w1, w2 = _ftile(nxt, base, nseg, 0, NQKV, H, False, SEGS, BK)
        if SYNC:
            fails += _wait(counter_ptr, rnd * P, tl.where(fails > 0, 0, max_spins), SPIN)
        if MODE == 0:
            w1, w2 = _ftile(nxt, base, nseg, 0, NQKV, H, False, SEGS, BK)
    tl.store(err_ptr + p, fails)


@triton.jit
def flat_op_kernel(w_ptr, x_ptr, nw_ptr, res_ptr, out_ptr, scr_ptr, eps, N: tl.constexpr, K: tl.constexpr,
                   PAIRED: tl.constexpr, NORM: tl.constexpr, RESID: tl.constexpr, H: tl.constexpr,
                   BLOCK_H: tl.constexpr, SEGS: tl.constexpr, BK: tl.constexpr, DIST: tl.constexpr,
                   RMAX: tl.constexpr, NSR_P2: tl.constexpr):
    """One op of the flat-segment chain as an ordinary kernel (variant c1 of design 2)."""
    p = tl.program_id(0)
    P = tl.num_programs(0)
    scr = scr_ptr + p * (2 * SCR_HALF)
    w1, w2 = _ffirst(w_ptr, p, P, N, K, PAIRED, SEGS, BK)
    rstd = 1.0
    if NORM:
        rstd = _rstd(x_ptr, H, BLOCK_H, eps)
    _fmain(w_ptr, x_ptr, nw_ptr, scr, p, P, w1, w2, N, K, PAIRED, NORM, SEGS, BK, DIST)
    _fepi(scr, res_ptr, out_ptr, p, P, rstd, N, K, PAIRED, NORM, RESID, BK, RMAX, NSR_P2)
