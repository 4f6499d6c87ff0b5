"""The inputs of a framework op as the trace records them (shapes, dtypes, concrete values) and what an op's
analytic cost is: the records every cost model shares (analyze/costs/op_costs.py, matmul_costs.py, cost_rules.py)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kernelscope.analyze.costs.gemm_shape import GemmShape

DTYPE_BYTES = {
    "c10::BFloat16": 2, "c10::Half": 2, "float": 4, "double": 8, "long int": 8, "int": 4, "short int": 2,
    "signed char": 1, "unsigned char": 1, "bool": 1, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1, "c10::Float8_e5m2fnuz": 1, "c10::complex<float>": 8, "c10::complex<double>": 16,
    "unsigned int": 4, "unsigned long": 8,
}
# Tensor-core precision of a matrix op, by its input dtype.
MATRIX_PRECISION = {
    "c10::BFloat16": "bf16", "c10::Half": "fp16", "float": "fp32", "double": "fp64", "signed char": "int8",
    "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8",
    "c10::Float8_e5m2fnuz": "fp8",
}


@dataclass(frozen=True)
class OpCost:
    flops: float
    bytes: float
    precision: str  # the roof: a key of the hardware's peak table (bf16, fp16, fp32, tf32, fp64, fp8, int8)
    model: str  # which formula produced it
    gemms: tuple[GemmShape, ...] = ()  # the GEMMs it solves, in launch order


@dataclass(frozen=True)
class Tensor:
    shape: tuple[int, ...]
    dtype: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BYTES.get(self.dtype, 4)


Args = list  # per input: Tensor, list[Tensor] (TensorList) or None (a scalar or absent tensor)
Model = Callable[[Args, list[str]], OpCost | None]


def parse_inputs(dims_json: str | None, types_json: str | None) -> Args:
    """The op's inputs from the trace's JSON text: a Tensor where a shape of whole non-negative numbers has a known
    dtype, a list of Tensors for a TensorList, else None (a scalar, an absent tensor, or anything malformed)."""
    dims = json.loads(dims_json) if dims_json else []
    types = json.loads(types_json) if types_json else []
    dims = dims if isinstance(dims, list) else []
    types = types if isinstance(types, list) else []
    args: Args = []
    for i, dim in enumerate(dims):
        dtype = types[i] if i < len(types) and isinstance(types[i], str) else ""
        if not isinstance(dim, list):
            args.append(None)
        elif dtype == "TensorList" or (dim and isinstance(dim[0], list)):
            args.append([Tensor(tuple(d), "") for d in dim if isinstance(d, list) and whole(d)])
        elif dtype in DTYPE_BYTES and whole(dim):
            args.append(Tensor(tuple(dim), dtype))
        else:
            args.append(None)
    return args


def whole(shape: list) -> bool:
    return all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in shape)


def tensor_inputs(args: Args) -> list[Tensor]:
    return [a for a in args if isinstance(a, Tensor)]


def broadcast(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes)) if shapes else ()
    except ValueError:
        return max(shapes, key=math.prod)


def matrix_precision(t: Tensor) -> str:
    return MATRIX_PRECISION.get(t.dtype, "fp32")
