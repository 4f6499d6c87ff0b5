"""Gluon kernels of gluon_probe.py: batch-1 (and small-batch) GEMVs y = W·x that stream W [N, K] (bf16, row-major)
through a multi-stage shared-memory ring filled by TMA bulk copies, with mbarriers for the ready and empty slots.

- `gemv_ws`: one matrix; a one-warp loader partition issues the TMA copies, the default (compute) partition
  consumes the ring (`gl.warp_specialize`). Each program owns row blocks pid, pid + grid, ...
- `gemv_pipe`: the same GEMV without warp specialisation: one partition keeps STAGES − 1 copies in flight ahead of
  the tile it reduces.
- `chain_ws`: every matrix of a decode step (layers × q/k/v, o, gate/up, down) in ONE launch. The loader walks the
  program's share of every matrix in order, never waiting for activations, so it fills the ring across matrix
  boundaries; the compute partition optionally waits on a grid-wide barrier (atomic counter) before each matrix
  (SYNC, for a chain where each matrix reads the previous one's output).

Work split: the row blocks (BN rows × all of K) of all matrices are numbered in order and dealt round-robin to
the programs, so every program streams the same number of blocks over the step whatever each matrix's size.
The activation x ([B, K], row stride ld) is staged once per matrix into shared memory by cp.async; a program
reduces each [BN, BK] weight tile against it with fp32 FMAs (batch 1: a [BN, BK] fp32 accumulator reduced once a
row block; batch > 1: one reduction per tile and row of x) and stores bf16.
Layouts come from the host (constexpr arguments), so every top-level function here is a kernel.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy, mma_v2
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

# ------------------------------------------------------------------------------------------------ shared pieces


@gluon.jit
def _first_unit(p, P, base):
    """The first of this program's units when units base, base + 1, ... are dealt round-robin from program 0."""
    return (p + P - base % P) % P


@gluon.jit
def _load_rows(desc, bufs, ready, empty, it, row0, first, P, U: gl.constexpr, NKT: gl.constexpr, BN: gl.constexpr,
               BK: gl.constexpr, STAGES: gl.constexpr):
    """Producer: TMA copies of the [BN, BK] tiles of row blocks first, first + P, ... (< U) of the matrix whose
    row 0 is descriptor row row0, into ring slot it % STAGES once the consumer has freed it. Returns it."""
    for u in range(first, U, P):
        row = row0 + u * BN
        for kt in range(NKT):
            s = it % STAGES
            # the empty barriers start in phase 0; waiting for the phase before it passes at once
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(s), desc.block_type.nbytes)
            tma.async_copy_global_to_shared(desc, [row, kt * BK], ready.index(s), bufs.index(s))
            it += 1
    return it


@gluon.jit
def _stage_x(x_ptr, ld, x_smem, K: gl.constexpr, B: gl.constexpr, BP: gl.constexpr, BK: gl.constexpr,
             XL: gl.constexpr):
    """x [B, K] (row stride ld) into x_smem [K // BK, BP, BK] with cp.async (rows ≥ B zero-filled); all copies are
    issued before the one wait, so staging costs one L2 round trip, not one a tile."""
    rows = gl.arange(0, BP, layout=gl.SliceLayout(1, XL))
    cols = gl.arange(0, BK, layout=gl.SliceLayout(0, XL))
    offs = rows[:, None] * ld + cols[None, :]
    mask = (rows[:, None] < B) & (cols[None, :] < BK)
    for kt in range(K // BK):
        async_copy.async_copy_global_to_shared(x_smem.index(kt), x_ptr + kt * BK + offs, mask)
    async_copy.commit_group()
    async_copy.wait_group(0)
    gl.thread_barrier()


@gluon.jit
def _take(bufs, ready, empty, it, STAGES: gl.constexpr, L: gl.constexpr):
    """Consumer: wait for ring slot it % STAGES, read its tile into registers (layout L), hand the slot back."""
    s = it % STAGES
    mbarrier.wait(ready.index(s), (it // STAGES) & 1)
    w = bufs.index(s).load(L)
    gl.thread_barrier()  # every warp of the partition has read the slot
    fence_async_shared()  # the generic-proxy reads are ordered before the next TMA write of the slot
    mbarrier.arrive(empty.index(s), count=1)
    return w


@gluon.jit
def _compute_rows(bufs, ready, empty, x_smem, y_ptr, it, first, P, N: gl.constexpr, K: gl.constexpr,
                  B: gl.constexpr, BP: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
                  MMA: gl.constexpr, L: gl.constexpr):
    """Consumer: row blocks first, first + P, ... of one matrix against the staged x; y [B, N] bf16. Returns it.
    B = 1: fp32 FMAs into a [BN, BK] accumulator, one reduction a row block. B > 1 and MMA: mma.sync (L is the
    NVMMA v2 layout; W tile as A, xᵀ as B, N = BP = 8). B > 1 otherwise: FMAs, one reduction a tile and row of x."""
    U: gl.constexpr = N // BN
    NKT: gl.constexpr = K // BK
    rows = gl.arange(0, BN, layout=gl.SliceLayout(1, L))
    cols = gl.arange(0, BP, layout=gl.SliceLayout(0, L))
    for u in range(first, U, P):
        if B == 1:
            acc = gl.zeros([BN, BK], gl.float32, L)
            for kt in range(NKT):
                x = x_smem.index(kt).load(L).to(gl.float32)  # [1, BK]; read before the wait, off its path
                w = _take(bufs, ready, empty, it, STAGES, L)
                acc += w.to(gl.float32) * x
                it += 1
            y = gl.sum(acc, axis=1)
            gl.store(y_ptr + u * BN + rows, y.to(gl.bfloat16))
        else:
            acc2 = gl.zeros([BN, BP], gl.float32, L)
            for kt in range(NKT):
                if MMA:
                    xb = x_smem.index(kt).permute([1, 0]).load(gl.DotOperandLayout(1, L, 2))  # [BK, BP]
                    w = _take(bufs, ready, empty, it, STAGES, gl.DotOperandLayout(0, L, 2))
                    acc2 = mma_v2(w, xb, acc2)
                else:
                    w = _take(bufs, ready, empty, it, STAGES, L).to(gl.float32)
                    xt = x_smem.index(kt)
                    for b in gl.static_range(B):
                        x = xt.slice(b, 1).load(L).to(gl.float32)
                        part = gl.sum(w * x, axis=1)
                        acc2 += gl.where(cols[None, :] == b, part[:, None], 0.0)
                it += 1
            offs = (u * BN + rows)[:, None] + cols[None, :] * N
            gl.store(y_ptr + offs, acc2.to(gl.bfloat16), mask=(rows[:, None] < BN) & (cols[None, :] < B))
    return it


@gluon.jit
def _init_ring(ready, empty, STAGES: gl.constexpr):
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    fence_async_shared()


# ------------------------------------------------------------------------------------------- one matrix, WS


@gluon.jit
def _gemv_loader(w_desc, bufs, ready, empty, N: gl.constexpr, K: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
                 STAGES: gl.constexpr):
    _load_rows(w_desc, bufs, ready, empty, gl.to_tensor(0), 0, gl.program_id(0), gl.num_programs(0), N // BN, K // BK,
               BN, BK, STAGES)


@gluon.jit
def _gemv_compute(bufs, ready, empty, x_smem, x_ptr, y_ptr, N: gl.constexpr, K: gl.constexpr, B: gl.constexpr,
                  BP: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, MMA: gl.constexpr,
                  L: gl.constexpr, XL: gl.constexpr):
    _stage_x(x_ptr, K, x_smem, K, B, BP, BK, XL)
    _compute_rows(bufs, ready, empty, x_smem, y_ptr, gl.to_tensor(0), gl.program_id(0), gl.num_programs(0), N, K, B,
                  BP, BN, BK, STAGES, MMA, L)


@gluon.jit
def gemv_ws(w_desc, x_ptr, y_ptr, N: gl.constexpr, K: gl.constexpr, B: gl.constexpr, BP: gl.constexpr,
            BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, MMA: gl.constexpr, L: gl.constexpr,
            XL: gl.constexpr, XS: gl.constexpr, LOAD_REGS: gl.constexpr):
    """y [B, N] = x [B, K] · W [N, K]ᵀ, W by TMA into a STAGES-slot ring; loader warp + compute partition."""
    bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES, BN, BK], w_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    x_smem = gl.allocate_shared_memory(gl.bfloat16, [K // BK, BP, BK], XS)
    _init_ring(ready, empty, STAGES)
    gl.warp_specialize([
        (_gemv_compute, (bufs, ready, empty, x_smem, x_ptr, y_ptr, N, K, B, BP, BN, BK, STAGES, MMA, L, XL)),
        (_gemv_loader, (w_desc, bufs, ready, empty, N, K, BN, BK, STAGES)),
    ], [1], [LOAD_REGS])


# ---------------------------------------------------------------------------------------- one matrix, no WS


@gluon.jit
def _issue(w_desc, bufs, ready, t, p, P, NKT: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
           STAGES: gl.constexpr):
    """TMA copy of this program's local tile t (unit t // NKT, K tile t % NKT) into slot t % STAGES."""
    s = t % STAGES
    row = (p + (t // NKT) * P) * BN
    mbarrier.expect(ready.index(s), w_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(w_desc, [row, (t % NKT) * BK], ready.index(s), bufs.index(s))


@gluon.jit
def gemv_pipe(w_desc, x_ptr, y_ptr, N: gl.constexpr, K: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
              STAGES: gl.constexpr, L: gl.constexpr, XL: gl.constexpr):
    """Batch-1 y = W·x with a software-pipelined TMA ring in one partition (no warp specialisation)."""
    bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES, BN, BK], w_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    x_smem = gl.allocate_shared_memory(gl.bfloat16, [K // BK, 1, BK], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
    fence_async_shared()
    U: gl.constexpr = N // BN
    NKT: gl.constexpr = K // BK
    p = gl.program_id(0)
    P = gl.num_programs(0)
    T = gl.cdiv(U - p, P) * NKT  # this program's tiles (p < U: the host launches at most U programs)
    for t in gl.static_range(STAGES - 1):
        if t < T:
            _issue(w_desc, bufs, ready, t, p, P, NKT, BN, BK, STAGES)
    _stage_x(x_ptr, K, x_smem, K, 1, 1, BK, XL)
    rows = gl.arange(0, BN, layout=gl.SliceLayout(1, L))
    acc = gl.zeros([BN, BK], gl.float32, L)
    for t in range(T):
        s = t % STAGES
        mbarrier.wait(ready.index(s), (t // STAGES) & 1)
        w = bufs.index(s).load(L).to(gl.float32)
        kt = t % NKT
        acc += w * x_smem.index(kt).load(L).to(gl.float32)
        if kt == NKT - 1:
            y = gl.sum(acc, axis=1)
            gl.store(y_ptr + (p + (t // NKT) * P) * BN + rows, y.to(gl.bfloat16))
            acc = gl.zeros([BN, BK], gl.float32, L)
        # slot (t + STAGES - 1) % STAGES was read at t - 1 by every warp: refill it
        gl.thread_barrier()
        fence_async_shared()
        if t + STAGES - 1 < T:
            _issue(w_desc, bufs, ready, t + STAGES - 1, p, P, NKT, BN, BK, STAGES)


# ------------------------------------------------------------------------------- every matrix, one launch


@gluon.jit
def _grid_sync(counter_ptr, target, max_spins):
    """Grid barrier: this program's earlier stores, then one release increment; spin (acquire) until the counter
    reaches target or max_spins polls have passed. Returns 1 on a timeout, else 0."""
    gl.thread_barrier()
    gl.atomic_add(counter_ptr, 1, sem="release", scope="gpu")
    v = gl.atomic_add(counter_ptr, 0, sem="acquire", scope="gpu")
    n = 0
    while (v < target) & (n < max_spins):
        v = gl.atomic_add(counter_ptr, 0, sem="acquire", scope="gpu")
        n += 1
    gl.thread_barrier()
    return (v < target).to(gl.int32)


@gluon.jit
def _chain_matrix(bufs, ready, empty, x_smem, act_ptr, table_ptr, counter_ptr, m, it, fails, max_spins, first, P,
                  N: gl.constexpr, K: gl.constexpr, B: gl.constexpr, BP: gl.constexpr, BN: gl.constexpr,
                  BK: gl.constexpr, STAGES: gl.constexpr, SYNC: gl.constexpr, MMA: gl.constexpr, L: gl.constexpr,
                  XL: gl.constexpr):
    """Consumer side of matrix m of the chain: (barrier,) stage its x, reduce this program's row blocks."""
    if SYNC:  # noqa: SIM102 (a constexpr branch around a run-time one)
        if m > 0:
            fails += _grid_sync(counter_ptr, m * P, max_spins * (1 - gl.minimum(fails, 1)))
    in_off = gl.multiple_of(gl.load(table_ptr + 4 * m), 16)
    ld = gl.multiple_of(gl.load(table_ptr + 4 * m + 1), 16)
    out_off = gl.multiple_of(gl.load(table_ptr + 4 * m + 2), 16)
    gl.thread_barrier()  # the previous matrix's reads of x_smem are done
    _stage_x(act_ptr + in_off, ld, x_smem, K, B, BP, BK, XL)
    it = _compute_rows(bufs, ready, empty, x_smem, act_ptr + out_off, it, first, P, N, K, B, BP, BN, BK, STAGES,
                       MMA, L)
    return it, fails


@gluon.jit
def _chain_compute(bufs, ready, empty, x_smem, act_ptr, table_ptr, counter_ptr, err_ptr, layers, max_spins,
                   N_QKV: gl.constexpr, N_O: gl.constexpr, N_GU: gl.constexpr, N_DN: gl.constexpr,
                   K_H: gl.constexpr, K_DN: gl.constexpr, B: gl.constexpr, BP: gl.constexpr, BN: gl.constexpr,
                   BK: gl.constexpr, STAGES: gl.constexpr, SYNC: gl.constexpr, MMA: gl.constexpr, L: gl.constexpr,
                   XL: gl.constexpr):
    p = gl.program_id(0)
    P = gl.num_programs(0)
    UQ: gl.constexpr = N_QKV // BN
    UO: gl.constexpr = N_O // BN
    UG: gl.constexpr = N_GU // BN
    U_LAYER: gl.constexpr = UQ + UO + UG + N_DN // BN
    it = gl.to_tensor(0)
    fails = gl.to_tensor(0)
    for layer in range(layers):
        base = layer * U_LAYER
        m = 4 * layer
        it, fails = _chain_matrix(bufs, ready, empty, x_smem, act_ptr, table_ptr, counter_ptr, m, it, fails,
                                  max_spins, _first_unit(p, P, base), P, N_QKV, K_H, B, BP, BN, BK, STAGES, SYNC,
                                  MMA, L, XL)
        it, fails = _chain_matrix(bufs, ready, empty, x_smem, act_ptr, table_ptr, counter_ptr, m + 1, it, fails,
                                  max_spins, _first_unit(p, P, base + UQ), P, N_O, K_H, B, BP, BN, BK, STAGES, SYNC,
                                  MMA, L, XL)
        it, fails = _chain_matrix(bufs, ready, empty, x_smem, act_ptr, table_ptr, counter_ptr, m + 2, it, fails,
                                  max_spins, _first_unit(p, P, base + UQ + UO), P, N_GU, K_H, B, BP, BN, BK, STAGES,
                                  SYNC, MMA, L, XL)
        it, fails = _chain_matrix(bufs, ready, empty, x_smem, act_ptr, table_ptr, counter_ptr, m + 3, it, fails,
                                  max_spins, _first_unit(p, P, base + UQ + UO + UG), P, N_DN, K_DN, B, BP, BN, BK,
                                  STAGES, SYNC, MMA, L, XL)
    gl.store(err_ptr + p, fails)


@gluon.jit
def _chain_loader(d_qkv, d_o, d_gu, d_dn, bufs, ready, empty, layers, N_QKV: gl.constexpr, N_O: gl.constexpr,
                  N_GU: gl.constexpr, N_DN: gl.constexpr, K_H: gl.constexpr, K_DN: gl.constexpr, BN: gl.constexpr,
                  BK: gl.constexpr, STAGES: gl.constexpr):
    p = gl.program_id(0)
    P = gl.num_programs(0)
    UQ: gl.constexpr = N_QKV // BN
    UO: gl.constexpr = N_O // BN
    UG: gl.constexpr = N_GU // BN
    UD: gl.constexpr = N_DN // BN
    U_LAYER: gl.constexpr = UQ + UO + UG + UD
    it = gl.to_tensor(0)
    for layer in range(layers):
        base = layer * U_LAYER
        it = _load_rows(d_qkv, bufs, ready, empty, it, layer * N_QKV, _first_unit(p, P, base), P, UQ, K_H // BK,
                        BN, BK, STAGES)
        it = _load_rows(d_o, bufs, ready, empty, it, layer * N_O, _first_unit(p, P, base + UQ), P, UO, K_H // BK,
                        BN, BK, STAGES)
        it = _load_rows(d_gu, bufs, ready, empty, it, layer * N_GU, _first_unit(p, P, base + UQ + UO), P, UG,
                        K_H // BK, BN, BK, STAGES)
        it = _load_rows(d_dn, bufs, ready, empty, it, layer * N_DN, _first_unit(p, P, base + UQ + UO + UG), P, UD,
                        K_DN // BK, BN, BK, STAGES)


@gluon.jit
def chain_ws(d_qkv, d_o, d_gu, d_dn, act_ptr, table_ptr, counter_ptr, err_ptr, layers, max_spins,
             N_QKV: gl.constexpr, N_O: gl.constexpr, N_GU: gl.constexpr, N_DN: gl.constexpr, K_H: gl.constexpr,
             K_DN: gl.constexpr, B: gl.constexpr, BP: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
             STAGES: gl.constexpr, SYNC: gl.constexpr, MMA: gl.constexpr, L: gl.constexpr, XL: gl.constexpr,
             XS: gl.constexpr, LOAD_REGS: gl.constexpr):
    """`layers` × (q/k/v, o, gate/up, down) GEMVs in one launch. Descriptors view each kind's weights of all layers
    as one [layers · N, K] matrix. table_ptr: int32 [layers · 4, 4] = (x offset, x row stride, y offset, 0) into
    act_ptr per matrix. SYNC: a grid barrier before every matrix but the first (the grid must be co-resident;
    counter zeroed before the launch); err_ptr[p]: barrier waits that timed out."""
    bufs = gl.allocate_shared_memory(d_qkv.dtype, [STAGES, BN, BK], d_qkv.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    x_smem = gl.allocate_shared_memory(gl.bfloat16, [K_DN // BK, BP, BK], XS)
    _init_ring(ready, empty, STAGES)
    gl.warp_specialize([
        (_chain_compute, (bufs, ready, empty, x_smem, act_ptr, table_ptr, counter_ptr, err_ptr, layers, max_spins,
                          N_QKV, N_O, N_GU, N_DN, K_H, K_DN, B, BP, BN, BK, STAGES, SYNC, MMA, L, XL)),
        (_chain_loader, (d_qkv, d_o, d_gu, d_dn, bufs, ready, empty, layers, N_QKV, N_O, N_GU, N_DN, K_H, K_DN, BN,
                         BK, STAGES)),
    ], [1], [LOAD_REGS])
