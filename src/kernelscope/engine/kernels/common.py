"""Helpers shared by the kernel launchers: cost precision names and block sizes."""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

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


@triton.jit
def mma(a, b, acc, FP32: tl.constexpr):
    """acc + a·b in fp32: IEEE fp32 for fp32 inputs (and in the interpreter), tensor cores otherwise."""
    if FP32:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    return tl.dot(a, b, acc)
