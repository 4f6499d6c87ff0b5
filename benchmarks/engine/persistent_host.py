"""Host side of persistent_probe.py: timing (CUDA events, graph replays, the copy bandwidth), the co-residency
check a spin barrier needs, the random weights and the fp32 reference, and the launchers of every variant."""

from __future__ import annotations

import math
import subprocess

import torch
import triton
from persistent_kernels import (
    EPS,
    FFN,
    HEAD_DIM,
    HEADS,
    HIDDEN,
    KV_HEADS,
    MAX_SPINS,
    Q_ROWS,
    QKV_ROWS,
    SCR_HALF,
    flat_op_kernel,
    gemv_op_kernel,
    persistent_chain,
    persistent_flat,
)


def log(*args) -> None:
    print(*args, flush=True)


def copy_bandwidth_GBps() -> float:
    """benchmarks/engine_decode.py copy_bandwidth(): calibrate.copy_bandwidth(cuda, 1 GiB, repeats=20)."""
    from kernelscope.capture import calibrate

    bandwidth = calibrate.copy_bandwidth(torch.device("cuda"), 1 << 30, repeats=20)
    torch.cuda.empty_cache()  # the 2 GiB of copy buffers go back before the weights are built
    return bandwidth / 1e9


def graph_of(fn) -> torch.cuda.CUDAGraph:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # warm-up outside the capture (compiles)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return graph


def replay_ms(graph: torch.cuda.CUDAGraph, repeats: int) -> list[float]:
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    out = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end))
    return out


def sm_count() -> int:
    return torch.cuda.get_device_properties(0).multi_processor_count


def co_resident(compiled, warps: int, programs: int) -> tuple[bool, dict]:
    """Whether `programs` programs of this compiled kernel fit the GPU at once (so that a spin barrier cannot
    deadlock): registers, threads and shared memory per SM."""
    props = torch.cuda.get_device_properties(0)
    regs = getattr(compiled, "n_regs", None)
    shared = compiled.metadata.shared
    threads = 32 * warps
    per_sm = min(2048 // threads, 32)
    if regs:
        per_warp = math.ceil(regs * 32 / 256) * 256
        per_sm = min(per_sm, 65536 // (per_warp * warps))
    smem_limit = getattr(props, "shared_memory_per_multiprocessor", 233472)
    if shared:
        per_sm = min(per_sm, smem_limit // (shared + 1024))
    info = {"registers": regs, "spills": getattr(compiled, "n_spills", None), "shared_bytes": shared,
            "programs_per_sm_max": per_sm}
    return per_sm * props.multi_processor_count >= programs, info


def device_info() -> dict:
    props = torch.cuda.get_device_properties(0)
    info = {"name": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
            "triton": triton.__version__, "l2_bytes": getattr(props, "L2_cache_size", None)}
    try:
        q = "name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw"
        info["nvidia_smi"] = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"],
                                            capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as error:  # noqa: BLE001
        info["nvidia_smi"] = repr(error)
    return info


class Weights:
    def __init__(self, layers: int, seed: int = 0):
        g = torch.Generator(device="cuda").manual_seed(seed)

        def rand(*shape, k):
            out = torch.empty(*shape, dtype=torch.bfloat16, device="cuda")
            for i in range(shape[0]):  # per layer: no 2.6 GB fp32 temporary
                out[i] = (torch.randn(*shape[1:], device="cuda", generator=g) / math.sqrt(k)).to(torch.bfloat16)
            return out

        self.layers = layers
        self.wqkv = rand(layers, QKV_ROWS, HIDDEN, k=HIDDEN)
        self.wo = rand(layers, HIDDEN, Q_ROWS, k=Q_ROWS)
        self.wgu = rand(layers, 2 * FFN, HIDDEN, k=HIDDEN)
        self.wd = rand(layers, HIDDEN, FFN, k=FFN)
        self.n1 = (1.0 + 0.1 * torch.randn(layers, HIDDEN, device="cuda", generator=g)).to(torch.bfloat16)
        self.n2 = (1.0 + 0.1 * torch.randn(layers, HIDDEN, device="cuda", generator=g)).to(torch.bfloat16)
        self.bqkv = (0.1 * torch.randn(layers, QKV_ROWS, device="cuda", generator=g)).to(torch.bfloat16)

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.wqkv, self.wo, self.wgu, self.wd))


def reference_chain(w: Weights, h: torch.Tensor, layers: int) -> torch.Tensor:
    """The chain in fp32 on the bf16 weights, rounding to bf16 where the kernels store."""
    h = h.clone()
    for layer in range(layers):
        x = h.float()
        rstd = torch.rsqrt((x * x).mean() + EPS)
        qkv = ((w.wqkv[layer].float() @ (x * w.n1[layer].float())) * rstd).to(torch.bfloat16)
        h = (w.wo[layer].float() @ qkv[:Q_ROWS].float() + h.float()).to(torch.bfloat16)
        x = h.float()
        rstd = torch.rsqrt((x * x).mean() + EPS)
        gu = (w.wgu[layer].float() @ (x * w.n2[layer].float())) * rstd
        g, u = gu[:FFN], gu[FFN:]
        act = (g / (1.0 + torch.exp(-g)) * u).to(torch.bfloat16)
        h = (w.wd[layer].float() @ act.float() + h.float()).to(torch.bfloat16)
    return h


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    if not torch.isfinite(out).all():
        return float("nan")
    return float((out - ref).norm() / ref.norm())


class Chain:
    """Buffers and launchers of the variants."""

    def __init__(self, w: Weights):
        self.w = w
        self.P = sm_count()
        self.h = torch.empty(HIDDEN, dtype=torch.bfloat16, device="cuda")
        self.qkv = torch.empty(QKV_ROWS, dtype=torch.bfloat16, device="cuda")
        self.act = torch.empty(FFN, dtype=torch.bfloat16, device="cuda")
        self.counter = torch.zeros(1, dtype=torch.int32, device="cuda")
        self.err = torch.zeros(self.P, dtype=torch.int32, device="cuda")
        self.scr = torch.zeros(self.P * 2 * SCR_HALF.value, dtype=torch.float32, device="cuda")

    def run(self, layers: int, cfg: dict, run: bool = True):
        if cfg.get("design") == "flat":
            return self.flat(layers, cfg, run)
        return self.persistent(layers, cfg, run)

    def flat(self, layers: int, cfg: dict, run: bool = True):
        w = self.w
        meta = {"H": HIDDEN, "NQKV": QKV_ROWS, "F": FFN, "BLOCK_H": 2048, "SEGS": cfg["segs"], "BK": 256,
                "DIST": cfg["dist"], "MODE": cfg["mode"], "SYNC": cfg.get("sync", True), "SPIN": cfg.get("spin", 0),
                "num_warps": cfg["warps"], "num_stages": 1}
        args = (self.h, self.qkv, self.act, w.wqkv, w.wo, w.wgu, w.wd, w.n1, w.n2, self.scr, self.counter, self.err,
                layers, EPS, MAX_SPINS)
        if not run:
            return persistent_flat.warmup(*args, grid=(self.P,), **meta)
        self.counter.zero_()
        persistent_flat[(self.P,)](*args, **meta)

    def flat_separate(self, layers: int, cfg: dict):
        """c1 of design 2: the flat-segment loop as four launches per layer, one program per SM."""
        w = self.w
        common = {"H": HIDDEN, "BLOCK_H": 2048, "SEGS": cfg["segs"], "BK": 256, "DIST": cfg["dist"],
                  "num_warps": cfg["warps"], "num_stages": 1}
        g = (self.P,)
        rmax = max(16, triton.next_power_of_2(-(-QKV_ROWS // self.P)))
        for layer in range(layers):
            flat_op_kernel[g](w.wqkv[layer], self.h, w.n1[layer], self.h, self.qkv, self.scr, EPS, N=QKV_ROWS,
                              K=HIDDEN, PAIRED=False, NORM=True, RESID=False, RMAX=rmax, NSR_P2=8, **common)
            flat_op_kernel[g](w.wo[layer], self.qkv, self.h, self.h, self.h, self.scr, EPS, N=HIDDEN, K=Q_ROWS,
                              PAIRED=False, NORM=False, RESID=True, RMAX=16, NSR_P2=8, **common)
            flat_op_kernel[g](w.wgu[layer], self.h, w.n2[layer], self.h, self.act, self.scr, EPS, N=FFN, K=HIDDEN,
                              PAIRED=True, NORM=True, RESID=False, RMAX=128, NSR_P2=8, **common)
            flat_op_kernel[g](w.wd[layer], self.act, self.h, self.h, self.h, self.scr, EPS, N=HIDDEN, K=FFN,
                              PAIRED=False, NORM=False, RESID=True, RMAX=16, NSR_P2=64, **common)

    def persistent(self, layers: int, cfg: dict, run: bool = True):
        w = self.w
        meta = {"H": HIDDEN, "NQKV": QKV_ROWS, "F": FFN, "BLOCK_H": 2048, "BLOCK_N": cfg["block_n"],
                "BLOCK_K": cfg["block_k"], "PF_REG": cfg["pf_reg"], "PF_L2": cfg["pf_l2"],
                "L2_BYTES": cfg.get("l2_bytes", 65536), "SYNC": cfg.get("sync", True), "SPIN": cfg.get("spin", 0),
                "DIST": cfg["dist"], "num_warps": cfg["warps"], "num_stages": cfg["stages"]}
        args = (self.h, self.qkv, self.act, w.wqkv, w.wo, w.wgu, w.wd, w.n1, w.n2, self.counter, self.err, layers,
                EPS, MAX_SPINS)
        if not run:
            return persistent_chain.warmup(*args, grid=(self.P,), **meta)
        self.counter.zero_()
        persistent_chain[(self.P,)](*args, **meta)

    def separate(self, layers: int, cfg: dict, programs: int):
        """c1: the same GEMV loop as four launches per layer, `programs` programs each."""
        w = self.w
        common = {"H": HIDDEN, "BLOCK_H": 2048, "BLOCK_K": cfg["block_k"], "DIST": cfg["dist"], "num_warps": cfg["warps"],
                  "num_stages": cfg["stages"]}

        def bn(n):
            return min(cfg["block_n"], max(1, triton.next_power_of_2(-(-n // programs))))
        g = (programs,)
        for layer in range(layers):
            gemv_op_kernel[g](w.wqkv[layer], self.h, w.n1[layer], self.h, self.qkv, EPS, N=QKV_ROWS, K=HIDDEN,
                              PAIRED=False, NORM=True, RESID=False, BLOCK_N=bn(QKV_ROWS), **common)
            gemv_op_kernel[g](w.wo[layer], self.qkv, self.h, self.h, self.h, EPS, N=HIDDEN, K=Q_ROWS,
                              PAIRED=False, NORM=False, RESID=True, BLOCK_N=bn(HIDDEN), **common)
            gemv_op_kernel[g](w.wgu[layer], self.h, w.n2[layer], self.h, self.act, EPS, N=FFN, K=HIDDEN,
                              PAIRED=True, NORM=True, RESID=False, BLOCK_N=bn(FFN), **common)
            gemv_op_kernel[g](w.wd[layer], self.act, self.h, self.h, self.h, EPS, N=HIDDEN, K=FFN,
                              PAIRED=False, NORM=False, RESID=True, BLOCK_N=bn(HIDDEN), **common)


class EngineChain:
    """c2: the engine's own decode kernels for the same four ops (with the q/k/v bias, RoPE and cache write the
    engine fuses into its q/k/v GEMV), ping-ponging the residual between two buffers."""

    def __init__(self, w: Weights):
        from kernelscope.engine.kernels.linear import (
            linear_residual,
            norm_gate_up_swiglu,
            norm_qkv_rope_cache,
        )
        self.fns = (norm_qkv_rope_cache, linear_residual, norm_gate_up_swiglu)
        self.w = w
        self.h = torch.empty(1, HIDDEN, dtype=torch.bfloat16, device="cuda")
        self.h2 = torch.empty_like(self.h)
        self.q = torch.empty(1, HEADS, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
        self.act = torch.empty(1, FFN, dtype=torch.bfloat16, device="cuda")
        self.k_cache = torch.zeros(1, 256, KV_HEADS, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
        self.v_cache = torch.zeros_like(self.k_cache)
        self.pos = torch.full((1,), 200, dtype=torch.int64, device="cuda")
        self.inv_freq = 1.0 / (1e6 ** (torch.arange(0, HEAD_DIM, 2, device="cuda").float() / HEAD_DIM))

    def run(self, layers: int):
        qkv_fn, resid_fn, gu_fn = self.fns
        w = self.w
        for layer in range(layers):
            qkv_fn(self.h, w.n1[layer], EPS, w.wqkv[layer], w.bqkv[layer], self.pos, self.inv_freq, self.k_cache,
                   self.v_cache, HEADS, KV_HEADS, out=self.q)
            resid_fn(self.q.view(1, Q_ROWS), w.wo[layer], self.h, out=self.h2)
            gu_fn(self.h2, w.n2[layer], EPS, w.wgu[layer], out=self.act)
            resid_fn(self.act, w.wd[layer], self.h2, out=self.h)


def persistent_configs(quick: bool) -> list[dict]:
    """Design 1 (tiled, call 1's best and its plain twin and streaming ceiling, for the side by side) and
    design 2 (flat segments): (SEGS, warps, tile distance) × MODE (0 load after the wait, 1 between arrive and
    wait, 2 before the epilogue), and MODE 2 without barriers (the streaming ceiling)."""
    out = []
    old = {"design": "tiled", "block_n": 16, "block_k": 512, "warps": 8, "stages": 1, "dist": 1, "pf_l2": False,
           "spin": 0}
    out.append({**old, "variant": "a_plain", "pf_reg": False})
    out.append({**old, "variant": "b_prefetch_reg", "pf_reg": True})
    out.append({**old, "warps": 16, "variant": "nosync_plain", "pf_reg": False, "sync": False})
    tiles = [(32, 16, 1), (32, 16, 2), (32, 8, 1), (32, 8, 2)]
    if quick:
        tiles = tiles[:1]
    for segs, warps, dist in tiles:
        for mode, name in ((0, "fa_plain"), (1, "fb_prefetch_reg"), (2, "fe_prefetch_early")):
            out.append({"design": "flat", "variant": name, "segs": segs, "warps": warps, "dist": dist,
                        "mode": mode, "spin": 0})
    for segs, warps, dist in tiles[:2]:
        out.append({"design": "flat", "variant": "fnosync_early", "segs": segs, "warps": warps, "dist": dist,
                    "mode": 2, "sync": False})
    return out


def cfg_name(cfg: dict) -> str:
    if cfg.get("design") == "flat":
        return f"{cfg['variant']}|S{cfg['segs']}|w{cfg['warps']}|d{cfg['dist']}"
    return f"{cfg['variant']}|K{cfg['block_k']}|w{cfg['warps']}|s{cfg['stages']}|d{cfg['dist']}"
