"""The Kineto events as decoded (msgspec structs of just the fields kernelscope reads, their args per category), which categories make which table, the times a trace can hold, and each table's usable events (`Timed`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import msgspec
import numpy as np

from kernelscope.load import knowledge

T = TypeVar("T")


class TraceEvent(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str | None = 0
    tid: int | str | None = 0
    ts: float | None = None
    dur: float | None = None
    args: msgspec.Raw = msgspec.Raw(b"{}")
    id: msgspec.Raw = msgspec.Raw(b"null")  # flow events' id, any JSON (marks.py)


class KernelArgs(msgspec.Struct, gc=False):
    external_id: int | None = msgspec.field(name="External id", default=None)
    external_id_old: int | None = msgspec.field(name="external id", default=None)
    correlation: int | None = None
    device: int | None = None
    stream: int | None = None
    grid: list[int] | None = None
    block: list[int] | None = None
    registers: int | None = msgspec.field(name="registers per thread", default=None)
    shared_memory: int | None = msgspec.field(name="shared memory", default=None)
    occupancy: float | None = msgspec.field(name="est. achieved occupancy %", default=None)
    bytes: int | None = None
    # Collectives (NCCL kernels in torch ≥ 2.4 traces): what the kernel communicates.
    collective: str | None = msgspec.field(name="Collective name", default=None)
    in_elems: int | None = msgspec.field(name="In msg nelems", default=None)
    out_elems: int | None = msgspec.field(name="Out msg nelems", default=None)
    group_size: int | None = msgspec.field(name="Group size", default=None)
    dtype: str | None = None
    process_group: str | None = msgspec.field(name="Process Group Name", default=None)


class RuntimeArgs(msgspec.Struct, gc=False):
    external_id: int | None = msgspec.field(name="External id", default=None)
    external_id_old: int | None = msgspec.field(name="external id", default=None)
    correlation: int | None = None
    kernel: str | None = None  # ROCm names the kernel a launch call launches (CUDA does not)


class OpArgs(msgspec.Struct, gc=False):
    external_id: int | None = msgspec.field(name="External id", default=None)
    external_id_old: int | None = msgspec.field(name="external id", default=None)
    sequence_number: int | None = msgspec.field(name="Sequence number", default=None)
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=msgspec.Raw(b""))
    input_dims_old: msgspec.Raw = msgspec.field(name="Input dims", default=msgspec.Raw(b""))
    input_type: msgspec.Raw = msgspec.field(name="Input type", default=msgspec.Raw(b""))
    concrete_inputs: msgspec.Raw = msgspec.field(name="Concrete Inputs", default=msgspec.Raw(b""))


# Event categories, lower-cased, to the table they go to. MTIA's command-processor events are its kernels.
KERNEL_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset",
                "memset": "memset", "mtia_ccp_events": "kernel"}


RUNTIME_CATS = {"cuda_runtime", "runtime", "cuda_driver", "xpu_runtime", "privateuse1_runtime", "mtia_runtime"}


OP_CATS = {"cpu_op": "cpu_op", "operator": "cpu_op", "user_annotation": "annotation", "python_function": "python"}


# Device-side activity no table holds: ranges measured on the device (CUPTI's range profiler) and device-side
# copies of user annotations. Counted in the trace's metadata, so a run without kernels can say what it had.
UNREAD_DEVICE_CATS = {"cuda_profiler_range", "gpu_user_annotation"}


# Ops whose scalar arguments ("Concrete Inputs") the cost models read; others' are not kept.
CONCRETE_INPUT_OPS = frozenset({
    "aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention",
    "aten::_scaled_dot_product_attention_math", "aten::_flash_attention_forward", "aten::_efficient_attention_forward",
    "aten::_cudnn_attention_forward", "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::convolution", "aten::_convolution", "aten::cudnn_convolution", "aten::conv2d", "aten::conv1d",
    "aten::mean", "aten::sum", "aten::amax", "aten::max", "aten::argmax", "aten::topk", "aten::_softmax",
}) | frozenset(knowledge.cost_models().get("scalar_ops", ()))  # serving ops whose scalars data/cost_models.toml reads


# Kernels torch.compile generates, recorded as ops: their scalars are the loop sizes (xnumel, rnumel).
GENERATED_KERNEL_PREFIX = "triton_"


def keeps_concrete_inputs(name: str) -> bool:
    return name in CONCRETE_INPUT_OPS or name.startswith(GENERATED_KERNEL_PREFIX)


# Times a trace can hold: |ts| within 4e15 µs (127 years around its epoch: any difference of two still fits int64
# ns) and durations from 0 to 1e12 µs (11 days). Anything else is a corrupt event, left out and counted.
MAX_ABS_TS_US = 4e15


MAX_DUR_US = 1e12


@dataclass
class Timed:
    """One table's events with their starts (µs as written) and durations (µs; missing counts as 0)."""

    events: list[TraceEvent]
    ts: np.ndarray
    dur: np.ndarray

    def where(self, mask: np.ndarray) -> Timed:
        return Timed([e for e, keep in zip(self.events, mask.tolist(), strict=True) if keep], self.ts[mask],
                      self.dur[mask])

    def dur_ns(self) -> np.ndarray:
        return np.rint(self.dur * 1e3).astype(np.int64)


def decode_args(events: list[TraceEvent], struct: type[T], dropped: dict[str, int]) -> list[T]:
    """Each event's args as `struct`; an event whose args do not fit (a grid that is a string, an id that is an
    object) keeps its name and times with empty args, counted as malformed."""
    decoder = msgspec.json.Decoder(struct)
    try:
        return [decoder.decode(e.args) for e in events]
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        pass
    out = []
    for e in events:
        try:
            out.append(decoder.decode(e.args))
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError, UnicodeDecodeError):
            out.append(struct())
            dropped["malformed args"] = dropped.get("malformed args", 0) + 1
    return out
