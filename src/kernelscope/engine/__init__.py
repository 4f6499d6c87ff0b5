"""kernelscope's compact Python + Triton inference engine (docs/engine.md)."""

from .ops import Ops

__all__ = ["Ops"]
