"""The matrix problem a GEMM kernel solved, as cost models give it (analyze/costs/op_costs.py, analyze/costs/cost_rules.py)
and the GEMM shape table shows it (analyze/costs/gemm_table.py)."""

from __future__ import annotations

from dataclasses import dataclass

# Short dtype names for the GEMM shape table.
SHORT_DTYPES = {
    "c10::BFloat16": "bf16", "c10::Half": "fp16", "float": "fp32", "double": "fp64", "signed char": "int8",
    "unsigned char": "uint8", "c10::Float8_e4m3fn": "fp8e4m3", "c10::Float8_e5m2": "fp8e5m2",
    "c10::Float8_e4m3fnuz": "fp8e4m3", "c10::Float8_e5m2fnuz": "fp8e5m2", "int": "int32", "long int": "int64",
}


@dataclass(frozen=True)
class GemmShape:
    """The matrix problem a GEMM solves: C[m, n] = A[m, k] · B[k, n], `batch` times; dtypes as `a×b→c`."""

    m: int
    n: int
    k: int
    batch: int
    dtypes: str
