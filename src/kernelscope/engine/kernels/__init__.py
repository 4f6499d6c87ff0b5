"""Triton kernels of the engine; each module pairs its @triton.jit kernels with the launchers Ops binds."""
