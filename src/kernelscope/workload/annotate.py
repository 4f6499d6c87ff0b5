"""Mark phases, decode steps and modules of a generation as profiler ranges and NVTX ranges.

Ranges (names in kernelscope.ranges):
  phase   prefill = from the start of generate() to the start of the second forward pass;
          decode step i = from the start of forward pass i+2 to the start of the next one (or the end).
          So each phase also holds the step's token selection, not only the model's forward pass.
          A model stage (a vision encoder, a projector: `stages`) is a phase of its own while its module runs,
          nested in prefill; attribution takes the innermost phase, so its kernels leave prefill.
  module  every nn.Module call, by qualified name (the root by its class name), and 'generate' for the
          work generate() does between forward passes.
  generation  around the whole generate() call, when the run profiles several (one per input image).
Hooks return None, so outputs are unchanged (tested); what the ranges cost is measured by the profile job.
"""

from __future__ import annotations

from typing import Any

import torch

from kernelscope import ranges
from kernelscope.workload.structure import root_label


class RangeStack:
    """Push/pop ranges into torch.profiler (record_function) and, on CUDA, into NVTX."""

    def __init__(self, nvtx: bool) -> None:
        self._nvtx = nvtx
        self._open: list[tuple[str, Any]] = []

    def push(self, name: str) -> None:
        record = torch.autograd.profiler.record_function(name)
        record.__enter__()
        if self._nvtx:
            torch.cuda.nvtx.range_push(name)
        self._open.append((name, record))

    def pop(self) -> str:
        name, record = self._open.pop()
        if self._nvtx:
            torch.cuda.nvtx.range_pop()
        record.__exit__(None, None, None)
        return name

    def top(self) -> str | None:
        return self._open[-1][0] if self._open else None

    def depth(self) -> int:
        return len(self._open)

    def pop_to(self, depth: int) -> None:
        """Pop ranges until `depth` remain open."""
        while len(self._open) > depth:
            self.pop()

    def pop_through(self, name: str) -> None:
        """Pop ranges down to and including `name`; nothing if it is not open."""
        if any(open_name == name for open_name, _ in self._open):
            while self.pop() != name:
                pass

    def close_all(self) -> None:
        while self._open:
            self.pop()


class GenerationAnnotator:
    """Registers forward hooks on every module; use as a context manager around one or more
    generations, calling begin()/end() around each generate() call."""

    def __init__(self, model: torch.nn.Module, nvtx: bool | None = None, modules: bool = True,
                 stages: dict[str, str] | None = None, generation: int | None = None) -> None:
        """stages: qualified module name → phase name, for modules that are phases of their own.
        generation: index of this generate() call among the profiled ones (a range around it), or None."""
        self._model = model
        use_nvtx = torch.cuda.is_available() if nvtx is None else nvtx
        self._stack = RangeStack(nvtx=use_nvtx)
        self._modules = modules
        self._stages = dict(stages or {})
        self._generation = generation
        self._base = 0  # ranges that stay open for the whole generation
        self._handles: list[Any] = []
        self._forwards = 0

    def __enter__(self) -> GenerationAnnotator:
        root = self._model
        # Phase bookkeeping must wrap the root's own module range: prepend the pre-hook, append the post-hook.
        self._handles.append(root.register_forward_pre_hook(self._before_forward, prepend=True))
        if self._modules:
            for name, module in root.named_modules():
                label = ranges.module_range(name or root_label(root))
                self._handles.append(module.register_forward_pre_hook(self._push_hook(label)))
                self._handles.append(module.register_forward_hook(self._pop_hook(label)))
        for name, phase in self._stages.items():
            # The stage's phase range wraps its module range: pre-hook first, post-hook last.
            module = root.get_submodule(name)
            label = ranges.phase_range(phase)
            self._handles.append(module.register_forward_pre_hook(self._push_hook(label), prepend=True))
            self._handles.append(module.register_forward_hook(self._pop_hook(label)))
        self._handles.append(root.register_forward_hook(self._after_forward))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._stack.close_all()

    def begin(self) -> None:
        self._forwards = 0
        if self._generation is not None:
            self._stack.push(ranges.generation_range(self._generation))
        self._base = self._stack.depth()
        self._stack.push(ranges.phase_range(ranges.PREFILL))
        self._stack.push(ranges.module_range(ranges.GENERATE_MODULE))

    def end(self) -> None:
        self._stack.close_all()

    def _push_hook(self, label: str):
        def hook(module: torch.nn.Module, args: Any) -> None:
            self._stack.push(label)

        return hook

    def _pop_hook(self, label: str):
        def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
            # A module whose forward raised may have left inner ranges open: pop through our own.
            self._stack.pop_through(label)

        return hook

    def _before_forward(self, module: torch.nn.Module, args: Any) -> None:
        if self._stack.top() == ranges.module_range(ranges.GENERATE_MODULE):
            self._stack.pop()
        if self._forwards > 0:
            self._stack.pop_to(self._base)
            self._stack.push(ranges.phase_range(ranges.DECODE, self._forwards - 1))
        self._forwards += 1

    def _after_forward(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        self._stack.push(ranges.module_range(ranges.GENERATE_MODULE))
