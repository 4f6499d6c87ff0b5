"""Engine op tests run Triton kernels on CPU through the interpreter: set it before any kernel is defined."""

import os

import pytest

os.environ["TRITON_INTERPRET"] = "1"


def _patch_interpreter_index() -> None:
    """Triton 3.6's interpreter turns a scalar into an int with int(array), which numpy ≥ 2 refuses for its
    1-element arrays: loops with runtime bounds (`range(0, n, BLOCK)`) fail. Read the element instead."""
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    interpreter._patch_lang_tensor = patched


@pytest.fixture(scope="session")
def triton_ops():
    """Ops("triton") under the interpreter, skipped when triton is not installed."""
    pytest.importorskip("triton")
    _patch_interpreter_index()
    from kernelscope.engine.ops import Ops

    return Ops("triton")


@pytest.fixture(scope="session")
def torch_ops():
    from kernelscope.engine.ops import Ops

    return Ops("torch")
