"""Helpers shared by the kernel launchers: cost precision names and block sizes."""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from ..errors import EngineError

# The roof a kernel's arithmetic runs against: tensor-core kernels use their input dtype, vector kernels fp32.
_TENSOR_CORE = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "tf32"}


def matrix_precision(dtype: torch.dtype) -> str:
    return _TENSOR_CORE[dtype]


VECTOR = "fp32"


def pow2(n: int, floor: int = 1) -> int:
    return max(floor, triton.next_power_of_2(n))


def exact_dot(dtype: torch.dtype) -> bool:
    """Whether mma() runs in IEEE fp32 for this input dtype."""
    return dtype == torch.float32 or INTERPRETED


def new_or(out: torch.Tensor | None, shape: tuple[int, ...], like: torch.Tensor,
           dtype: torch.dtype | None = None) -> torch.Tensor:
    """The caller's output buffer (CUDA graphs reuse it) or a fresh one."""
    if out is not None:
        return out
    return torch.empty(shape, dtype=dtype or like.dtype, device=like.device)


# Triton's CPU interpreter (TRITON_INTERPRET=1, the CPU tests) computes bf16 tl.dot wrongly: there the dot
# operands are upcast to fp32 after their rounding to the input dtype, which gives the same products.
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


# Per (kernel, device, count): counters that a kernel's programs increment so that the last one to finish combines
# the others' partial results; zero between launches (that last program resets its own). Allocated once, before
# any CUDA-graph capture, and kept: a captured graph holds their address. Launches that run concurrently on
# several streams must not share them.
_COUNTERS: dict[tuple[str, torch.device, int], torch.Tensor] = {}


def launch_counters(kernel: str, device: torch.device, count: int) -> torch.Tensor:
    """The zeroed int32 counters of `count` program groups of `kernel` on `device`, created on first use."""
    key = (kernel, device, count)
    counters = _COUNTERS.get(key)
    if counters is None:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise EngineError(f"{kernel} with {count} program groups must run once eagerly before a CUDA graph "
                              "captures it (its counters are allocated then)")
        counters = _COUNTERS[key] = torch.zeros(count, dtype=torch.int32, device=device)
    return counters


# Programmatic dependent launch (Hopper and later), opt-in with KERNELSCOPE_ENGINE_PDL=1: a decode kernel may
# start while the one before it finishes; it waits (griddepcontrol.wait) before touching anything, so only its
# launch overlaps the previous kernel's tail. Off by default: on an H100 it made the captured decode step slower
# (qwen2-1.5b batch 1: 1.671 against 1.635 ms; batch 8: 2.810 against 2.301 ms; an L2 prefetch of each GEMV's
# first weight tile before the wait was slower still, 1.708 ms; benchmarks/results/engine-limits-h100-2026-11-25).
# The interpreter has no such instruction.
_PDL_SETTING: list[bool | None] = [None]


def set_pdl(enabled: bool | None) -> None:
    """Force programmatic dependent launch on or off for later launches (None: KERNELSCOPE_ENGINE_PDL decides)."""
    _PDL_SETTING[0] = enabled


def pdl_enabled(device: torch.device) -> bool:
    """Whether decode launches on `device` use programmatic dependent launch."""
    if INTERPRETED or device.type != "cuda":
        return False
    enabled = _PDL_SETTING[0]
    if enabled is None:
        enabled = os.environ.get("KERNELSCOPE_ENGINE_PDL", "0") == "1"
    return enabled and torch.cuda.get_device_capability(device)[0] >= 9


def pdl_options(device: torch.device) -> dict[str, bool]:
    """The PDL constexpr and launch option of a decode kernel (the option only when on: the interpreter does
    not know it)."""
    if pdl_enabled(device):
        return {"PDL": True, "launch_pdl": True}
    return {"PDL": False}


@triton.jit
def pdl_prologue(PDL: tl.constexpr):
    """Wait for the previous kernel (its writes become visible), then let the next one launch."""
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def mma(a, b, acc, FP32: tl.constexpr):
    """acc + a·b in fp32: IEEE fp32 for fp32 inputs (and in the interpreter), tensor cores otherwise."""
    if FP32:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    return tl.dot(a, b, acc)
