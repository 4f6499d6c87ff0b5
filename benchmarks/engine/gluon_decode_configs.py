"""Shapes, configurations and layouts of the persistent Gluon decode step (gluon_decode_kernels.py).

No torch here: gluon_compile_check.py --decode imports this module on a machine without a GPU. The weight ring
reuses gluon_configs.Config (kernel "decode"); attention splits and the slot block are fields of DecodeConfig.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import gluon_configs as gc
from triton.experimental.gluon import language as gl

MAX_SPINS = gc.MAX_SPINS
BARRIERS_PER_LAYER = 5  # after q/k/v, attention, o, gate/up, down


@dataclass(frozen=True)
class DecodeShape:
    """The numbers of a Qwen2/Llama decoder the kernel is specialised on (from the engine's EngineConfig)."""

    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    eps: float
    qkv_bias: bool

    @classmethod
    def of(cls, config) -> DecodeShape:
        """From an engine EngineConfig (or anything with its attribute names)."""
        return cls(config.num_layers, config.hidden_size, config.intermediate_size, config.num_heads,
                   config.num_kv_heads, config.head_dim, config.vocab_size, config.rms_norm_eps, config.qkv_bias)

    @property
    def n_qkv(self) -> int:
        return (self.heads + 2 * self.kv_heads) * self.head_dim

    def units_per_layer(self, bn: int) -> tuple[int, int, int, int]:
        """Row blocks of q/k/v, o, gate/up, down."""
        return self.n_qkv // bn, self.hidden // bn, 2 * self.ffn // bn, self.hidden // bn

    def weight_bytes(self) -> int:
        """bf16 bytes one step streams: every layer matrix and the LM head (the norms and biases are small)."""
        per_layer = (self.n_qkv * self.hidden + self.hidden * self.heads * self.head_dim
                     + 2 * self.ffn * self.hidden + self.hidden * self.ffn)
        return 2 * (self.layers * per_layer + self.vocab * self.hidden)


QWEN2_1_5B = DecodeShape(layers=28, hidden=1536, ffn=8960, heads=12, kv_heads=2, head_dim=128, vocab=151936,
                         eps=1e-6, qkv_bias=True)


@dataclass(frozen=True)
class DecodeConfig:
    ring: gc.Config
    splits: int = 8  # attention splits per head
    block_t: int = 32  # cache slots a step of a split's loop

    @property
    def name(self) -> str:
        r = self.ring
        return f"decode|BN{r.bn}|BK{r.bk}|S{r.stages}|w{r.warps}|sp{self.splits}|bt{self.block_t}"

    def record(self) -> dict:
        return {"ring": self.ring.record(), "splits": self.splits, "block_t": self.block_t, "name": self.name}


def decode_config(bn: int = 16, stages: int = 12, bk: int = 256, warps: int = 4, splits: int = 8,
                  block_t: int = 32) -> DecodeConfig:
    return DecodeConfig(gc.Config("decode", bn, stages, bk=bk, warps=warps), splits, block_t)


def from_record(record: dict) -> DecodeConfig:
    return DecodeConfig(gc.config_from_record(record["ring"]), record["splits"], record["block_t"])


# The best ring of the probe's barrier-synchronised chain (BN16 BK256 S12) and its runner-up (S6); then the best
# ring with fewer attention splits: each program's combine before o_proj stages splits × heads × head-dim partials.
CONFIGS = (decode_config(16, 12), decode_config(16, 6), decode_config(16, 12, splits=4),
           decode_config(16, 12, splits=2), decode_config(16, 12, splits=1))


def attention_layout(cfg: DecodeConfig, shape: DecodeShape) -> gl.BlockedLayout:
    """[BT, D/2] cache tiles: 4 contiguous bf16 (8 bytes) a thread, 16 threads along a half head row."""
    tpw_d = min(32, shape.head_dim // 2 // 4)
    return gl.BlockedLayout([1, 4], [32 // tpw_d, tpw_d], [cfg.ring.warps, 1], [1, 0])


def combine_layout(cfg: DecodeConfig) -> gl.BlockedLayout:
    """[SP, BK] partials: the splits of a column in one thread's registers (the reduction stays in the thread)."""
    sp = splits_padded(cfg)
    return gl.BlockedLayout([sp, 1], [1, 32], [1, cfg.ring.warps], [1, 0])


def splits_padded(cfg: DecodeConfig) -> int:
    return 1 << (cfg.splits - 1).bit_length()


def constexprs(cfg: DecodeConfig, shape: DecodeShape) -> dict:
    r = cfg.ring
    return {"H": shape.heads, "HKV": shape.kv_heads, "D": shape.head_dim, "HID": shape.hidden, "FFN": shape.ffn,
            "VOCAB": shape.vocab, "BN": r.bn, "BK": r.bk, "STAGES": r.stages, "S": cfg.splits,
            "SP": splits_padded(cfg), "BT": cfg.block_t, "L": gc.tile_layout(r), "AL": attention_layout(cfg, shape),
            "CL": combine_layout(cfg), "XL": gc.staging_layout(r), "XS": gc.x_smem_layout(r), "LOAD_REGS": r.load_regs,
            "ABLATE": 0}


def smem_estimate(cfg: DecodeConfig, shape: DecodeShape) -> int:
    """The ring, the staged x and the two raw staging buffers (the longest K: the FFN width), the ring's
    barriers."""
    r = cfg.ring
    return r.stages * r.bn * r.bk * 2 + 3 * shape.ffn * 2 + 2 * r.stages * 8


def valid(cfg: DecodeConfig, shape: DecodeShape) -> str | None:
    """Why the kernel cannot run this shape with this configuration, or None."""
    r = cfg.ring
    rows = (shape.n_qkv, shape.hidden, 2 * shape.ffn, shape.vocab)
    if any(n % r.bn for n in rows):
        return f"a matrix's rows are not a multiple of BN={r.bn}"
    if any(k % r.bk for k in (shape.hidden, shape.ffn, shape.heads * shape.head_dim)):
        return f"a matrix's K is not a multiple of BK={r.bk}"
    if shape.head_dim & (shape.head_dim - 1) or shape.heads % shape.kv_heads:
        return "head_dim must be a power of two and heads a multiple of kv_heads"
    if smem_estimate(cfg, shape) > gc.SMEM_LIMIT:
        return "shared memory"
    return None


def record(shape: DecodeShape) -> dict:
    return asdict(shape)
