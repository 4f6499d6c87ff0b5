"""Gluon kernel of gluon_decode.py: one persistent launch runs every layer of a batch-1 Qwen2/Llama decode step and
the LM head, the grid co-resident and synchronised by the grid barrier of gluon_kernels.py.

Two partitions per program (`gl.warp_specialize`), as in gluon_kernels.chain_ws:
- loader (one warp): TMA copies of this program's [BN, BK] weight tiles of every matrix of the step in order
  (per layer q/k/v, o, gate/up, down; then the LM head) into a STAGES-slot ring; it never waits on activations,
  so it runs ahead across matrix and phase boundaries.
- compute: the phases of a layer, a grid barrier between phases:
  A  stage x = rms_norm(h)·input_norm into shared memory (every program recomputes the norm of the hidden vector
     from global memory); q/k/v row blocks, bias in the epilogue → qkv (bf16, before rotary).
  B  decode attention, work items (head, split) dealt to programs: rotary on q and on the new k, the new k and v
     written into the cache at `pos` (by split 0 of the group's first head), online softmax over the split's
     slots (slot `pos` taken from registers), a normalised partial and its log2-sum-exp.
  C  stage x = the splits' partials combined per head; o row blocks, residual add in the epilogue (h in place).
  D  stage x = rms_norm(h)·post_norm; gate/up row blocks (gate rows, then up rows) → gu (bf16).
  E  stage x = silu(gate)·up from gu; down row blocks, residual add (h in place).
  After the last layer: stage rms_norm(h)·final_norm; LM head row blocks → logits (bf16).
Rounding follows the engine's Triton kernels (HF's): bf16 after the norm product, the projections, bias, rotary
products, the residual sum, silu and the product with up; softmax weights bf16 before P·V.

Row blocks of all matrices of the step are numbered in order and dealt round-robin (gluon_kernels._first_unit),
so every program streams the same share of the bytes. Every top-level function here is a kernel or jit helper.
"""

from __future__ import annotations

from gluon_kernels import _first_unit, _grid_sync, _init_ring, _load_rows, _take
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

EPI_BIAS = gl.constexpr(0)  # y + bias → out
EPI_RESIDUAL = gl.constexpr(1)  # out = out + y (each rounded to bf16 first)
EPI_STORE = gl.constexpr(2)  # y → out
# ABLATE bits: timing probes that leave a part of the step out (wrong results; where the step's time goes)
SKIP_ATTENTION = gl.constexpr(1)  # phase B
SKIP_BARRIERS = gl.constexpr(2)  # every grid barrier between phases
SKIP_STAGING = gl.constexpr(4)  # the norms, the attention combine and silu·up staged before a matrix


@gluon.jit
def _fetch(src_ptr, dst, NKT: gl.constexpr, BK: gl.constexpr, XL: gl.constexpr):
    """Issue cp.async copies of src[0 : NKT · BK] into dst[0 : NKT] ([1, BK] rows; 16 bytes a thread)."""
    c = gl.expand_dims(gl.arange(0, BK, layout=gl.SliceLayout(0, XL)), 0)
    for kt in range(NKT):
        async_copy.async_copy_global_to_shared(dst.index(kt), src_ptr + kt * BK + c)


@gluon.jit
def _landed():
    """Every issued cp.async has landed and every warp of the partition sees it."""
    async_copy.commit_group()
    async_copy.wait_group(0)
    gl.thread_barrier()


@gluon.jit
def _stage_norm(h_ptr, nw_ptr, x_smem, a_smem, b_smem, eps, K: gl.constexpr, BK: gl.constexpr, L: gl.constexpr,
                XL: gl.constexpr):
    """x_smem[kt] = bf16(bf16(h·rstd) · norm_w), kt < K // BK. h and the norm weight come in by cp.async (one L2
    round trip for all chunks) into a_smem and b_smem; results go to x_smem (a tile is replicated over warps, so
    an in-place update could be read back by a later warp)."""
    gl.thread_barrier()  # the previous matrix's reads of x_smem, a_smem, b_smem are done
    _fetch(h_ptr, a_smem, K // BK, BK, XL)
    _fetch(nw_ptr, b_smem, K // BK, BK, XL)
    _landed()
    ss = gl.zeros([1, BK], gl.float32, L)
    for kt in range(K // BK):
        x = a_smem.index(kt).load(L).to(gl.float32)
        ss += x * x
    rstd = gl.rsqrt(gl.sum(gl.sum(ss, axis=1), axis=0) / K + eps)
    for kt in range(K // BK):
        n = (a_smem.index(kt).load(L).to(gl.float32) * rstd).to(gl.bfloat16).to(gl.float32)
        w = b_smem.index(kt).load(L).to(gl.float32)
        x_smem.index(kt).store((n * w).to(gl.bfloat16))
    gl.thread_barrier()


@gluon.jit
def _stage_swiglu(gu_ptr, x_smem, a_smem, b_smem, F: gl.constexpr, BK: gl.constexpr, L: gl.constexpr,
                  XL: gl.constexpr):
    """x_smem[kt] = bf16(bf16(silu(gate)) · up), gate = gu[:F], up = gu[F:] (bf16 each), by cp.async."""
    gl.thread_barrier()
    _fetch(gu_ptr, a_smem, F // BK, BK, XL)
    _fetch(gu_ptr + F, b_smem, F // BK, BK, XL)
    _landed()
    for kt in range(F // BK):
        g = a_smem.index(kt).load(L).to(gl.float32)
        u = b_smem.index(kt).load(L).to(gl.float32)
        act = (g / (1.0 + gl.exp(-g))).to(gl.bfloat16).to(gl.float32)
        x_smem.index(kt).store((act * u).to(gl.bfloat16))
    gl.thread_barrier()


@gluon.jit
def _stage_combine(po_ptr, lse_ptr, x_smem, Q: gl.constexpr, D: gl.constexpr, S: gl.constexpr,
                   SP: gl.constexpr, BK: gl.constexpr, CL: gl.constexpr):
    """x_smem[kt] = the attention output: per head the S splits' normalised partials po [H·S, D] weighted by
    exp2(lse − max lse) (empty splits have lse −inf), in bf16. Column c of chunk kt is head c // D, dim c % D."""
    s = gl.expand_dims(gl.arange(0, SP, layout=gl.SliceLayout(1, CL)), 1)  # [SP, 1]
    c = gl.expand_dims(gl.arange(0, BK, layout=gl.SliceLayout(0, CL)), 0)  # [1, BK]
    gl.thread_barrier()
    for kt in gl.static_range(Q // BK):  # unrolled: the loads of every chunk can be in flight at once
        col = kt * BK + c
        head = col // D
        mask = (s < S) & (col < Q)
        lse = gl.load(lse_ptr + head * S + s, mask=mask, other=float("-inf"), cache_modifier=".cg")
        part = gl.load(po_ptr + (head * S + s) * D + col % D, mask=mask, other=0.0, cache_modifier=".cg")
        best = gl.max(lse, axis=0)  # split 0 is never empty: finite
        wgt = gl.exp2(lse - gl.expand_dims(best, 0))
        out = gl.sum(wgt * part, axis=0) / gl.sum(wgt, axis=0)
        x_smem.index(kt).store(gl.expand_dims(out, 0).to(gl.bfloat16))
    gl.thread_barrier()


@gluon.jit
def _rows_epi(bufs, ready, empty, x_smem, out_ptr, aux_ptr, it, first, P, N: gl.constexpr, K: gl.constexpr,
              BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, EPI: gl.constexpr, L: gl.constexpr):
    """Row blocks first, first + P, ... of one matrix against the staged x (fp32 FMAs into [BN, BK], one
    reduction a row block), then the epilogue EPI. Returns the ring position."""
    rows = gl.arange(0, BN, layout=gl.SliceLayout(1, L))
    for u in range(first, N // BN, P):
        acc = gl.zeros([BN, BK], gl.float32, L)
        for kt in range(K // BK):
            x = x_smem.index(kt).load(L).to(gl.float32)  # [1, BK]
            w = _take(bufs, ready, empty, it, STAGES, L)
            acc += w.to(gl.float32) * x
            it += 1
        y = gl.sum(acc, axis=1)
        r = u * BN + rows
        if EPI == EPI_BIAS:
            y = y + gl.load(aux_ptr + r).to(gl.float32)
        elif EPI == EPI_RESIDUAL:
            y = y.to(gl.bfloat16).to(gl.float32) + gl.load(out_ptr + r, cache_modifier=".cg").to(gl.float32)
        gl.store(out_ptr + r, y.to(gl.bfloat16))
    return it


@gluon.jit
def _rope(x1, x2, cos, sin):
    """HF's rotate_half rotary on the two halves of a head, each product and sum rounded to bf16."""
    o1 = (x1 * cos).to(gl.bfloat16).to(gl.float32) + (-x2 * sin).to(gl.bfloat16).to(gl.float32)
    o2 = (x2 * cos).to(gl.bfloat16).to(gl.float32) + (x1 * sin).to(gl.bfloat16).to(gl.float32)
    return o1.to(gl.bfloat16).to(gl.float32), o2.to(gl.bfloat16).to(gl.float32)


@gluon.jit
def _attention(qkv_ptr, kc_ptr, vc_ptr, po_ptr, lse_ptr, inv_freq_ptr, pos, layer, cap, scale_log2, p, P,
               H: gl.constexpr, HKV: gl.constexpr, D: gl.constexpr, S: gl.constexpr, BT: gl.constexpr,
               AL: gl.constexpr):
    """Work items w = head · S + split, w ≡ p (mod P). Cache [layers, cap, HKV, D]; slots < pos hold earlier
    tokens, slot pos gets this token's (roped) k and v. Split s covers slots [s·c, min((s + 1)·c, pos + 1)),
    c = ceil((pos + 1) / S)."""
    HALF: gl.constexpr = D // 2
    GROUP: gl.constexpr = H // HKV
    j = gl.arange(0, HALF, layout=gl.SliceLayout(0, AL))
    t = gl.arange(0, BT, layout=gl.SliceLayout(1, AL))
    freq = pos.to(gl.float32) * gl.load(inv_freq_ptr + j)
    cos = gl.cos(freq).to(gl.bfloat16).to(gl.float32)
    sin = gl.sin(freq).to(gl.bfloat16).to(gl.float32)
    length = pos + 1
    chunk = (length + S - 1) // S
    for w in range(p, H * S, P):
        head = w // S
        split = w % S
        g = head // GROUP
        qb = qkv_ptr + head * D
        kb = qkv_ptr + H * D + g * D
        vb = qkv_ptr + (H + HKV) * D + g * D
        q1, q2 = _rope(gl.load(qb + j, cache_modifier=".cg").to(gl.float32),
                       gl.load(qb + HALF + j, cache_modifier=".cg").to(gl.float32), cos, sin)
        k1, k2 = _rope(gl.load(kb + j, cache_modifier=".cg").to(gl.float32),
                       gl.load(kb + HALF + j, cache_modifier=".cg").to(gl.float32), cos, sin)
        v1 = gl.load(vb + j, cache_modifier=".cg").to(gl.float32)
        v2 = gl.load(vb + HALF + j, cache_modifier=".cg").to(gl.float32)
        row = (layer * cap) * (HKV * D) + g * D  # slot 0 of this layer and KV head
        if (split == 0) & (head % GROUP == 0):
            dst = row + pos * (HKV * D)
            gl.store(kc_ptr + dst + j, k1.to(gl.bfloat16))
            gl.store(kc_ptr + dst + HALF + j, k2.to(gl.bfloat16))
            gl.store(vc_ptr + dst + j, v1.to(gl.bfloat16))
            gl.store(vc_ptr + dst + HALF + j, v2.to(gl.bfloat16))
        t0 = split * chunk
        t1 = gl.minimum(t0 + chunk, length)
        m = gl.max(gl.full([BT], float("-inf"), gl.float32, gl.SliceLayout(1, AL)), axis=0)
        lsum = gl.sum(gl.zeros([BT], gl.float32, gl.SliceLayout(1, AL)), axis=0)
        a1 = gl.zeros([HALF], gl.float32, gl.SliceLayout(0, AL))
        a2 = gl.zeros([HALF], gl.float32, gl.SliceLayout(0, AL))
        for start in range(t0, t1, BT):
            ts = start + t
            old = gl.expand_dims(ts < gl.minimum(t1, pos), 1)  # [BT, 1]: slots read from the cache
            new = gl.expand_dims(ts == pos, 1)
            offs = row + gl.expand_dims(ts, 1) * (HKV * D) + gl.expand_dims(j, 0)
            c1 = gl.load(kc_ptr + offs, mask=old, other=0.0).to(gl.float32)
            c2 = gl.load(kc_ptr + offs + HALF, mask=old, other=0.0).to(gl.float32)
            c1 = gl.where(new, gl.expand_dims(k1, 0), c1)
            c2 = gl.where(new, gl.expand_dims(k2, 0), c2)
            sc = gl.sum(c1 * gl.expand_dims(q1, 0), axis=1) + gl.sum(c2 * gl.expand_dims(q2, 0), axis=1)
            sc = gl.where(ts < t1, sc * scale_log2, float("-inf"))
            m_new = gl.maximum(m, gl.max(sc, axis=0))
            pr = gl.exp2(sc - m_new)
            corr = gl.exp2(m - m_new)
            lsum = lsum * corr + gl.sum(pr, axis=0)
            pb = gl.expand_dims(pr.to(gl.bfloat16).to(gl.float32), 1)
            d1 = gl.load(vc_ptr + offs, mask=old, other=0.0).to(gl.float32)
            d2 = gl.load(vc_ptr + offs + HALF, mask=old, other=0.0).to(gl.float32)
            d1 = gl.where(new, gl.expand_dims(v1, 0), d1)
            d2 = gl.where(new, gl.expand_dims(v2, 0), d2)
            a1 = a1 * corr + gl.sum(pb * d1, axis=0)
            a2 = a2 * corr + gl.sum(pb * d2, axis=0)
            m = m_new
        has = lsum > 0.0
        inv = 1.0 / gl.where(has, lsum, 1.0)
        pb_out = po_ptr + w * D
        gl.store(pb_out + j, a1 * inv)
        gl.store(pb_out + HALF + j, a2 * inv)
        gl.store(lse_ptr + w, gl.where(has, m + gl.log2(gl.where(has, lsum, 1.0)), float("-inf")))


@gluon.jit
def _sync(counter_ptr, n, P, fails, max_spins):
    """Grid barrier number n (1, 2, ...): wait for n · P arrivals; after one timeout the later ones do not wait."""
    return fails + _grid_sync(counter_ptr, n * P, max_spins * (1 - gl.minimum(fails, 1)))


@gluon.jit
def _decode_compute(bufs, ready, empty, x_smem, a_smem, b_smem, h_ptr, qkv_ptr, gu_ptr, logits_ptr, po_ptr,
                    lse_ptr, kc_ptr, vc_ptr, bias_ptr, in_norm_ptr, post_norm_ptr, final_norm_ptr, inv_freq_ptr,
                    pos_ptr, counter_ptr, err_ptr, layers, cap, eps, scale_log2, max_spins,
                    H: gl.constexpr, HKV: gl.constexpr, D: gl.constexpr, HID: gl.constexpr, FFN: gl.constexpr,
                    VOCAB: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
                    S: gl.constexpr, SP: gl.constexpr, BT: gl.constexpr, L: gl.constexpr, AL: gl.constexpr,
                    CL: gl.constexpr, XL: gl.constexpr, ABLATE: gl.constexpr):
    p = gl.program_id(0)
    P = gl.num_programs(0)
    N_QKV: gl.constexpr = (H + 2 * HKV) * D
    UQ: gl.constexpr = N_QKV // BN
    UO: gl.constexpr = HID // BN
    UG: gl.constexpr = 2 * FFN // BN
    U_LAYER: gl.constexpr = UQ + UO + UG + HID // BN
    pos = gl.load(pos_ptr)
    it = gl.to_tensor(0)
    fails = gl.to_tensor(0)
    n = gl.to_tensor(0)  # grid barriers passed
    for layer in range(layers):
        base = layer * U_LAYER
        # A: q/k/v with the input norm in the staging and the bias in the epilogue
        if (ABLATE & SKIP_STAGING) == 0:
            _stage_norm(h_ptr, in_norm_ptr + layer * HID, x_smem, a_smem, b_smem, eps, HID, BK, L, XL)
        it = _rows_epi(bufs, ready, empty, x_smem, qkv_ptr, bias_ptr + layer * N_QKV, it, _first_unit(p, P, base),
                       P, N_QKV, HID, BN, BK, STAGES, EPI_BIAS, L)
        n += 1
        if (ABLATE & SKIP_BARRIERS) == 0:
            fails = _sync(counter_ptr, n, P, fails, max_spins)
        # B: rotary, cache write, split attention
        if (ABLATE & SKIP_ATTENTION) == 0:
            _attention(qkv_ptr, kc_ptr, vc_ptr, po_ptr, lse_ptr, inv_freq_ptr, pos, layer, cap, scale_log2, p, P, H,
                       HKV, D, S, BT, AL)
        n += 1
        if (ABLATE & SKIP_BARRIERS) == 0:
            fails = _sync(counter_ptr, n, P, fails, max_spins)
        # C: o_proj on the combined attention output, residual add
        if (ABLATE & SKIP_STAGING) == 0:
            _stage_combine(po_ptr, lse_ptr, x_smem, H * D, D, S, SP, BK, CL)
        it = _rows_epi(bufs, ready, empty, x_smem, h_ptr, h_ptr, it, _first_unit(p, P, base + UQ), P, HID, H * D,
                       BN, BK, STAGES, EPI_RESIDUAL, L)
        n += 1
        if (ABLATE & SKIP_BARRIERS) == 0:
            fails = _sync(counter_ptr, n, P, fails, max_spins)
        # D: gate/up with the post-attention norm in the staging
        if (ABLATE & SKIP_STAGING) == 0:
            _stage_norm(h_ptr, post_norm_ptr + layer * HID, x_smem, a_smem, b_smem, eps, HID, BK, L, XL)
        it = _rows_epi(bufs, ready, empty, x_smem, gu_ptr, gu_ptr, it, _first_unit(p, P, base + UQ + UO), P,
                       2 * FFN, HID, BN, BK, STAGES, EPI_STORE, L)
        n += 1
        if (ABLATE & SKIP_BARRIERS) == 0:
            fails = _sync(counter_ptr, n, P, fails, max_spins)
        # E: down on silu(gate)·up, residual add
        if (ABLATE & SKIP_STAGING) == 0:
            _stage_swiglu(gu_ptr, x_smem, a_smem, b_smem, FFN, BK, L, XL)
        it = _rows_epi(bufs, ready, empty, x_smem, h_ptr, h_ptr, it, _first_unit(p, P, base + UQ + UO + UG), P, HID,
                       FFN, BN, BK, STAGES, EPI_RESIDUAL, L)
        n += 1
        if (ABLATE & SKIP_BARRIERS) == 0:
            fails = _sync(counter_ptr, n, P, fails, max_spins)
    _stage_norm(h_ptr, final_norm_ptr, x_smem, a_smem, b_smem, eps, HID, BK, L, XL)
    _rows_epi(bufs, ready, empty, x_smem, logits_ptr, logits_ptr, it, _first_unit(p, P, layers * U_LAYER), P, VOCAB,
              HID, BN, BK, STAGES, EPI_STORE, L)
    gl.store(err_ptr + p, fails)


@gluon.jit
def _decode_loader(d_qkv, d_o, d_gu, d_dn, d_head, bufs, ready, empty, layers, H: gl.constexpr,
                   HKV: gl.constexpr, D: gl.constexpr, HID: gl.constexpr, FFN: gl.constexpr, VOCAB: gl.constexpr,
                   BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr):
    p = gl.program_id(0)
    P = gl.num_programs(0)
    N_QKV: gl.constexpr = (H + 2 * HKV) * D
    UQ: gl.constexpr = N_QKV // BN
    UO: gl.constexpr = HID // BN
    UG: gl.constexpr = 2 * FFN // BN
    UD: gl.constexpr = HID // BN
    U_LAYER: gl.constexpr = UQ + UO + UG + UD
    it = gl.to_tensor(0)
    for layer in range(layers):
        base = layer * U_LAYER
        it = _load_rows(d_qkv, bufs, ready, empty, it, layer * N_QKV, _first_unit(p, P, base), P, UQ, HID // BK, BN,
                        BK, STAGES)
        it = _load_rows(d_o, bufs, ready, empty, it, layer * HID, _first_unit(p, P, base + UQ), P, UO, (H * D) // BK,
                        BN, BK, STAGES)
        it = _load_rows(d_gu, bufs, ready, empty, it, layer * 2 * FFN, _first_unit(p, P, base + UQ + UO), P, UG,
                        HID // BK, BN, BK, STAGES)
        it = _load_rows(d_dn, bufs, ready, empty, it, layer * HID, _first_unit(p, P, base + UQ + UO + UG), P, UD,
                        FFN // BK, BN, BK, STAGES)
    _load_rows(d_head, bufs, ready, empty, it, 0, _first_unit(p, P, layers * U_LAYER), P, VOCAB // BN, HID // BK, BN,
               BK, STAGES)


@gluon.jit
def decode_step(d_qkv, d_o, d_gu, d_dn, d_head, h_ptr, qkv_ptr, gu_ptr, logits_ptr, po_ptr, lse_ptr, kc_ptr, vc_ptr,
                bias_ptr, in_norm_ptr, post_norm_ptr, final_norm_ptr, inv_freq_ptr, pos_ptr, counter_ptr, err_ptr,
                layers, cap, eps, scale_log2, max_spins,
                H: gl.constexpr, HKV: gl.constexpr, D: gl.constexpr, HID: gl.constexpr, FFN: gl.constexpr,
                VOCAB: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, S: gl.constexpr,
                SP: gl.constexpr, BT: gl.constexpr, L: gl.constexpr, AL: gl.constexpr, CL: gl.constexpr,
                XL: gl.constexpr, XS: gl.constexpr, LOAD_REGS: gl.constexpr, ABLATE: gl.constexpr = 0):
    """One batch-1 decode step: h [HID] (the token's embedding on entry, overwritten) → logits [VOCAB] (bf16).
    Descriptors: each kind's weights of all layers as one [layers · N, K] matrix (gate rows then up rows per
    layer), the LM head [VOCAB, HID]. Cache [layers, cap, HKV, D]; pos_ptr: the token's position (int32).
    counter zeroed before the launch; err_ptr[p]: grid-barrier waits that timed out."""
    bufs = gl.allocate_shared_memory(d_qkv.dtype, [STAGES, BN, BK], d_qkv.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    x_smem = gl.allocate_shared_memory(gl.bfloat16, [FFN // BK, 1, BK], XS)
    a_smem = gl.allocate_shared_memory(gl.bfloat16, [FFN // BK, 1, BK], XS)  # raw inputs of the staging
    b_smem = gl.allocate_shared_memory(gl.bfloat16, [FFN // BK, 1, BK], XS)
    _init_ring(ready, empty, STAGES)
    gl.warp_specialize([
        (_decode_compute, (bufs, ready, empty, x_smem, a_smem, b_smem, h_ptr, qkv_ptr, gu_ptr, logits_ptr, po_ptr,
                           lse_ptr, kc_ptr, vc_ptr, bias_ptr, in_norm_ptr, post_norm_ptr, final_norm_ptr,
                           inv_freq_ptr, pos_ptr, counter_ptr, err_ptr, layers, cap, eps, scale_log2, max_spins, H,
                           HKV, D, HID, FFN, VOCAB, BN, BK, STAGES, S, SP, BT, L, AL, CL, XL, ABLATE)),
        (_decode_loader, (d_qkv, d_o, d_gu, d_dn, d_head, bufs, ready, empty, layers, H, HKV, D, HID, FFN, VOCAB,
                          BN, BK, STAGES)),
    ], [1], [LOAD_REGS])
