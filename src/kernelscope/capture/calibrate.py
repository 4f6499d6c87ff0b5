"""Measure achievable ceilings on the present device: copy bandwidth (bytes read + written) and large-GEMM
throughput per dtype. Timed with CUDA events on a GPU (host clock on CPU), median of repeats after warm-up,
on random data (never zeros)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from datetime import date
from typing import Any

import torch

import kernelscope
from kernelscope.contracts.calibration import Calibration


def median_seconds(fn: Callable[[], Any], device: torch.device, repeats: int, warmup: int = 3) -> float:
    """Median seconds of fn() after warm-up: CUDA events on a GPU, the wall clock on the CPU."""
    for _ in range(warmup):
        fn()
    times = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
    else:
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def copy_bandwidth(device: torch.device, nbytes: int, repeats: int) -> float:
    src = torch.rand(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    seconds = median_seconds(lambda: dst.copy_(src), device, repeats)
    return 2 * src.numel() * 4 / seconds


def gemm_flops(device: torch.device, precision: str, n: int, repeats: int) -> float | None:
    """FLOP/s of an n×n×n product in this precision, or None where the device or torch cannot run it."""
    gen = torch.Generator(device=device).manual_seed(0)

    def rand(dtype: torch.dtype) -> torch.Tensor:
        return torch.randn(n, n, device=device, generator=gen).to(dtype)

    try:
        if precision in ("bf16", "fp16", "fp32", "tf32", "fp64"):
            dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "tf32": torch.float32,
                     "fp64": torch.float64}[precision]
            a, b = rand(dtype), rand(dtype)
            previous = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
            try:
                seconds = median_seconds(lambda: torch.mm(a, b), device, repeats)
            finally:
                torch.backends.cuda.matmul.allow_tf32 = previous
        elif precision == "fp8":
            if device.type != "cuda" or torch.cuda.get_device_capability(device) < (8, 9):
                return None
            a = rand(torch.float8_e4m3fn)
            b = rand(torch.float8_e4m3fn).t()  # _scaled_mm wants the second operand column-major
            one = torch.ones((), device=device)
            seconds = median_seconds(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
                            device, repeats)
        elif precision == "int8":
            if device.type != "cuda":
                return None
            a = torch.randint(-64, 64, (n, n), device=device, dtype=torch.int8, generator=gen)
            b = torch.randint(-64, 64, (n, n), device=device, dtype=torch.int8, generator=gen)
            seconds = median_seconds(lambda: torch._int_mm(a, b), device, repeats)
        else:
            return None
    except (RuntimeError, TypeError, NotImplementedError):
        return None
    return 2.0 * n**3 / seconds


def calibrate(device: torch.device, quick: bool = False) -> Calibration:
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        free, _ = torch.cuda.mem_get_info(device)
        copy_bytes = min(2 << 30, free // 8)
        n, repeats = (4096, 10) if quick else (8192, 30)
        precisions = ["bf16", "fp16", "fp32", "tf32", "fp8", "int8", "fp64"]
    else:
        from kernelscope.capture.environment import describe_hardware

        name = describe_hardware(device).name or "cpu"
        copy_bytes = 64 << 20 if quick else 512 << 20
        n, repeats = (512, 3) if quick else (2048, 5)
        precisions = ["fp32", "bf16"]
    return Calibration(
        device=name,
        device_type=device.type,
        date=date.today().isoformat(),
        kernelscope=kernelscope.__version__,
        torch=str(torch.__version__),
        copy_bytes=copy_bytes,
        copy_bandwidth=copy_bandwidth(device, copy_bytes, repeats),
        gemm_n=n,
        repeats=repeats,
        gemm_flops={p: gemm_flops(device, p, n, repeats) for p in precisions},
        method="median of repeats after warm-up; copy counts bytes read + written; GEMM n×n×n on random data",
        threads=torch.get_num_threads() if device.type == "cpu" else None,
    )
