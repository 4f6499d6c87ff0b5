"""Shapes, configurations and layouts of the Gluon streaming probe (gluon_probe.py, gluon_kernels.py).

No torch here: gluon_compile_check.py imports this module on a machine without a GPU to compile every
configuration for sm_90a.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from triton.experimental.gluon import language as gl

# qwen2-1.5b: the four decode GEMVs of a layer, (rows N, K)
LAYERS = 28
SHAPES = {"qkv": (2048, 1536), "o": (1536, 1536), "gate_up": (17920, 1536), "down": (1536, 8960)}
KINDS = tuple(SHAPES)
K_MAX = max(k for _, k in SHAPES.values())
MAX_SPINS = 1 << 18  # a grid-barrier wait gives up after this many polls (a deadlock becomes an error count)
SMEM_LIMIT = 232448  # dynamic shared memory a Hopper block may use (227 KiB)
LOADER_WARPS = 1


@dataclass(frozen=True)
class Config:
    """One kernel configuration. kernel: chain_ws (every matrix in one launch), gemv_ws or gemv_pipe (one launch a
    matrix). bn × bk: the weight tile one TMA copy brings; stages: ring slots; warps: the compute partition's
    warps; sync: grid barrier before each matrix (chain_ws); grid_per_sm: programs per SM; maxnreg: register cap a
    thread (needed for two warp-specialised programs on an SM); mma: batch > 1 on the tensor cores (mma.sync, BN =
    16 · warps, 64-wide 128-byte-swizzled tiles) instead of FMAs."""

    kernel: str
    bn: int
    stages: int
    bk: int = 256
    warps: int = 4
    batch: int = 1
    sync: bool = False
    grid_per_sm: int = 1
    load_regs: int = 40
    maxnreg: int | None = None
    mma: bool = False

    @property
    def name(self) -> str:
        parts = [self.kernel + ("_sync" if self.sync else ""), f"BN{self.bn}", f"BK{self.bk}", f"S{self.stages}",
                 f"w{self.warps}", f"B{self.batch}"]
        if self.grid_per_sm != 1:
            parts.append(f"g{self.grid_per_sm}")
        if self.maxnreg:
            parts.append(f"r{self.maxnreg}")
        if self.mma:
            parts.append("mma")
        return "|".join(parts)

    @property
    def padded_batch(self) -> int:
        """Rows of staged x: the batch to a power of two (8 at least on the tensor cores: N of mma.sync)."""
        if self.batch == 1:
            return 1
        return max(8 if self.mma else 2, 1 << (self.batch - 1).bit_length())

    def record(self) -> dict:
        return {**asdict(self), "name": self.name}


def tile_layout(cfg: Config):
    """Registers of a [BN, BK] weight tile. FMAs: 8 contiguous bf16 (16 bytes) a thread; at batch 1 a warp spans 256
    contiguous elements (BK = 256: one row, 128: two rows), so its shared-memory read is 512 contiguous bytes (no
    bank conflicts without swizzling) and the per-row reduction waits for the end of the row block; at batch > 1
    (one reduction a tile and row of x) 8 lanes a row, 4 rows a warp: 3 shuffle steps instead of 5. mma: the NVMMA
    v2 accumulator layout, warps over rows."""
    if cfg.mma:
        return gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[cfg.warps, 1], instr_shape=[16, 8])
    tpw_k = min(32, cfg.bk // 8) if cfg.batch == 1 else 8
    return gl.BlockedLayout([1, 8], [32 // tpw_k, tpw_k], [cfg.warps, 1], [1, 0])


def staging_layout(cfg: Config) -> gl.BlockedLayout:
    """Registers of the [BP, BK] pointer block that stages x (16-byte cp.async a thread)."""
    tpw_k = min(32, cfg.bk // 8)
    return gl.BlockedLayout([1, 8], [32 // tpw_k, tpw_k], [cfg.warps, 1], [1, 0])


def weight_smem_layout(cfg: Config) -> gl.NVMMASharedLayout:
    """FMAs: unswizzled, so a TMA box may be 256 elements wide (a swizzled box is at most the 128-byte span) and
    the row-contiguous reads above need no swizzle. mma: 128-byte swizzle (64-wide boxes) for ldmatrix."""
    return gl.NVMMASharedLayout(swizzle_byte_width=128 if cfg.mma else 0, element_bitwidth=16, rank=2)


def x_smem_layout(cfg: Config):
    if cfg.mma:
        return gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    return gl.SwizzledSharedLayout(1, 1, 1, [1, 0])


def smem_estimate(cfg: Config, k: int) -> int:
    """Bytes of shared memory the kernel allocates: the ring, the staged x, the ring's barriers."""
    ring = cfg.stages * cfg.bn * cfg.bk * 2
    x = (k // cfg.bk) * cfg.padded_batch * cfg.bk * 2
    return ring + x + 2 * cfg.stages * 8


def chain_constexprs(cfg: Config) -> dict:
    (n_qkv, k_h), (n_o, _), (n_gu, _), (n_dn, k_dn) = (SHAPES[k] for k in KINDS)
    return {"N_QKV": n_qkv, "N_O": n_o, "N_GU": n_gu, "N_DN": n_dn, "K_H": k_h, "K_DN": k_dn, "B": cfg.batch,
            "BP": cfg.padded_batch, "BN": cfg.bn, "BK": cfg.bk, "STAGES": cfg.stages, "SYNC": cfg.sync,
            "MMA": cfg.mma, "L": tile_layout(cfg), "XL": staging_layout(cfg), "XS": x_smem_layout(cfg),
            "LOAD_REGS": cfg.load_regs}


def gemv_constexprs(cfg: Config, kind: str) -> dict:
    n, k = SHAPES[kind]
    out = {"N": n, "K": k, "BN": cfg.bn, "BK": cfg.bk, "STAGES": cfg.stages, "L": tile_layout(cfg),
           "XL": staging_layout(cfg)}
    if cfg.kernel == "gemv_ws":
        out.update({"B": cfg.batch, "BP": cfg.padded_batch, "MMA": cfg.mma, "XS": x_smem_layout(cfg),
                    "LOAD_REGS": cfg.load_regs})
    return out


def launch_options(cfg: Config) -> dict:
    return {"num_warps": cfg.warps, **({"maxnreg": cfg.maxnreg} if cfg.maxnreg else {})}


def units(cfg: Config, kind: str) -> int:
    return SHAPES[kind][0] // cfg.bn


def valid(cfg: Config) -> bool:
    """Block sizes that tile every matrix exactly (the kernels assume it) and fit in shared memory."""
    if any(n % cfg.bn or k % cfg.bk for n, k in SHAPES.values()):
        return False
    if cfg.mma and (cfg.batch == 1 or cfg.bk != 64 or cfg.bn % (16 * cfg.warps)):
        return False
    if not cfg.mma and cfg.bk not in (128, 256):
        return False
    return smem_estimate(cfg, K_MAX) <= SMEM_LIMIT  # the longest K (down) is staged in every kernel kind


def chain_sweep(batch: int = 1) -> list[Config]:
    """The one-launch chain, each without and with the grid barrier. Batch 1: ring depth at BN 8, 16, 32 and 64
    (stages 2–12: the bytes in flight an SM needs), 8 compute warps, 128-wide tiles, two programs an SM. Batch 8:
    FMA rings (x staged for 8 rows takes 140 KB) and the tensor-core path."""
    if batch == 1:
        shapes = [(8, 4), (8, 6), (8, 12), (16, 2), (16, 3), (16, 4), (16, 6), (16, 8), (16, 12), (32, 3), (32, 4),
                  (32, 6), (32, 8), (64, 3), (64, 4), (64, 6)]
        base = [Config("chain_ws", bn, s) for bn, s in shapes]
        base += [Config("chain_ws", 16, 8, warps=8), Config("chain_ws", 32, 6, warps=8),
                 Config("chain_ws", 32, 8, bk=128), Config("chain_ws", 64, 6, bk=128),
                 Config("chain_ws", 16, 4, grid_per_sm=2, maxnreg=128),
                 Config("chain_ws", 16, 6, grid_per_sm=2, maxnreg=128)]
    else:
        base = [Config("chain_ws", bn, s, batch=batch) for bn, s in ((16, 4), (16, 8), (32, 4), (8, 12))]
        base += [Config("chain_ws", 64, s, bk=64, batch=batch, mma=True) for s in (4, 8)]
    out = []
    for cfg in base:
        for sync in (False, True):
            out.append(Config(**{**asdict(cfg), "sync": sync}))
    return [cfg for cfg in out if valid(cfg)]


def gemv_sweep() -> list[Config]:
    """One launch a matrix (112 in a CUDA graph): warp-specialised and single-partition pipelines."""
    out = [Config("gemv_ws", 16, 6), Config("gemv_ws", 32, 6), Config("gemv_ws", 8, 12),
           Config("gemv_pipe", 16, 6), Config("gemv_pipe", 32, 6)]
    return [cfg for cfg in out if valid(cfg)]


def all_configs() -> list[Config]:
    return chain_sweep(1) + chain_sweep(8) + gemv_sweep()


def config_from_record(record: dict) -> Config:
    return Config(**{k: v for k, v in record.items() if k != "name"})
