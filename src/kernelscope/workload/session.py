"""A built workload, ready to run its generations: transformers' generate() (HFSession) or kernelscope's engine
(EngineSession). Both do the same things, so profiling treats them alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from kernelscope.contracts.run_info import ModelInfo
from kernelscope.workload.annotate import GenerationAnnotator
from kernelscope.workload.engine_backend import EngineWorkload
from kernelscope.workload.generation import GenerationSettings, RunTimes, timed_generate
from kernelscope.workload.inputs import WorkloadInputs
from kernelscope.workload.structure import describe_model


class WorkloadSession(Protocol):
    backend: str  # hf or engine
    description: str  # how it generates, in words (run.json workload.backend_description)
    model_info: ModelInfo
    generations: int  # generate() calls per profiled run: 1, or one per input image

    def generate(self, index: int, annotated: bool) -> tuple[torch.Tensor, RunTimes]:
        """Generation `index` (its new tokens and its timings), with kernelscope's ranges if annotated."""
        ...


@dataclass
class HFSession:
    model: torch.nn.Module
    inputs: WorkloadInputs
    settings: GenerationSettings
    model_info: ModelInfo
    backend: str = "hf"
    description: str = "transformers generate()"

    @classmethod
    def build(cls, model: torch.nn.Module, config: Any, inputs: WorkloadInputs,
              settings: GenerationSettings) -> HFSession:
        return cls(model, inputs, settings, describe_model(model, config, inputs.stages))

    @property
    def generations(self) -> int:
        return len(self.inputs.generations)

    def generate(self, index: int, annotated: bool) -> tuple[torch.Tensor, RunTimes]:
        per_image = self.inputs.spec is not None
        annotator = GenerationAnnotator(self.model, stages=self.inputs.stages,
                                        generation=index if per_image else None) if annotated else None
        return timed_generate(self.model, self.inputs.generations[index], self.settings, annotator)


@dataclass
class EngineSession:
    engine: EngineWorkload
    inputs: WorkloadInputs
    settings: GenerationSettings
    model_info: ModelInfo
    backend: str = "engine"

    @property
    def description(self) -> str:
        return self.engine.description()

    @property
    def generations(self) -> int:
        return len(self.inputs.generations)

    def generate(self, index: int, annotated: bool) -> tuple[torch.Tensor, RunTimes]:
        return self.engine.generate(self.inputs.generations[index], self.settings, annotated)
