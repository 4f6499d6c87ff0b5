"""What the operator tests share: dtypes and their tolerances, the relative-error check against the PyTorch
reference, random inputs, RoPE frequencies, and a fixed seed before every test."""

from __future__ import annotations

import pytest
import torch

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
EPS = 1e-6


def close(out: torch.Tensor, want: torch.Tensor, dtype: torch.dtype, roundings: int = 1) -> None:
    """Relative error within the dtype's tolerance per rounding step that can differ (fused chains have more)."""
    assert out.shape == want.shape and out.dtype == want.dtype
    assert torch.isfinite(out.float()).all()
    err = ((out.double() - want.double()).norm() / want.double().norm().clamp_min(1e-30)).item()
    assert err <= roundings * TOL[dtype], f"relative error {err:.3g} > {roundings * TOL[dtype]}"


def rand(*shape: int, dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape) * scale).to(dtype)


def inv_freq(head_dim: int, theta: float = 10000.0) -> torch.Tensor:
    return 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
