"""Ops: the engine's operator set of one backend ("torch": the PyTorch reference; "triton": our kernels).

The model calls only these operators (docs/engine.md lists their contract). Both backends expose the same
functions with the same signatures: reference.py for "torch", kernels/launch.py for "triton", where every
launch declares its cost through kernelscope.engine_costs.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from . import reference
from .errors import EngineError

OPERATORS = (
    "add", "embedding", "linear", "argmax", "sample", "rms_norm", "add_rms_norm", "rope",
    "attention_prefill", "attention_decode", "swiglu", "gate_up_swiglu", "kv_cache_write",
    "norm_qkv_rope_cache", "qkv_rope_cache", "linear_residual", "norm_gate_up_swiglu", "norm_linear",
)
BACKENDS = ("torch", "triton")


def _backend_module(backend: str) -> ModuleType:
    if backend == "torch":
        return reference
    if backend == "triton":
        from .kernels import launch  # imports triton: only when asked for

        return launch
    raise EngineError(f"unknown engine backend {backend!r}; expected one of {', '.join(BACKENDS)}")


class Ops:
    """The operators of one backend, as attributes: `Ops("triton").linear(x, w, bias)`."""

    add: Callable
    embedding: Callable
    linear: Callable
    argmax: Callable
    sample: Callable
    rms_norm: Callable
    add_rms_norm: Callable
    rope: Callable
    attention_prefill: Callable
    attention_decode: Callable
    swiglu: Callable
    gate_up_swiglu: Callable
    kv_cache_write: Callable
    norm_qkv_rope_cache: Callable
    qkv_rope_cache: Callable
    linear_residual: Callable
    norm_gate_up_swiglu: Callable
    norm_linear: Callable

    def __init__(self, backend: str = "triton") -> None:
        self.backend = backend
        module = _backend_module(backend)
        for name in OPERATORS:
            setattr(self, name, getattr(module, name))
