"""What a profile run feeds the model: one prompt of random ids for a language model, or one generation per image
for a vision-language model (its stages are phases of their own; see docs/ocr.md)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import torch

from kernelscope.contracts.run_info import ImageInfo, Workload
from kernelscope.contracts.run_info import ImageSettings as ImageSettingsInfo
from kernelscope.errors import UserError
from kernelscope.workload.generation import GenerationSettings, make_prompt
from kernelscope.workload.images import DocImage, load_images, synthetic_documents
from kernelscope.workload.vision import (
    ImageSettings,
    VisionSpec,
    build_processor,
    image_inputs,
    vision_model_types,
)

SYNTHETIC = "synthetic"
FILES = "files"


@dataclass(frozen=True)
class ImageRequest:
    """Which images to feed: the user's files (and directories), or `count` synthetic pages from the seed."""

    paths: tuple[Path, ...] = ()
    count: int | None = None
    settings: ImageSettings = field(default_factory=ImageSettings)

    @property
    def given(self) -> bool:
        return bool(self.paths) or self.count is not None

    def documents(self, seed: int) -> list[DocImage]:
        if self.paths and self.count is not None:
            raise UserError("give either --image PATH… or --images N (synthetic pages), not both")
        if self.paths:
            return load_images(list(self.paths))
        count = 1 if self.count is None else self.count
        if count < 1:
            raise UserError(f"--images must be at least 1, got {count}")
        return synthetic_documents(count, seed)

    def describe(self) -> dict[str, Any]:
        """run.json workload fields that let `kernelscope ncu` make the same images again."""
        source = {"image_source": FILES, "image_paths": [str(p.resolve()) for p in self.paths]} if self.paths \
            else {"image_source": SYNTHETIC}
        return {**source, "image_settings": ImageSettingsInfo(**self.settings.as_dict())}

    @classmethod
    def from_workload(cls, workload: Workload) -> ImageRequest:
        stored = workload.image_settings
        settings = ImageSettings(**msgspec.to_builtins(stored)) if isinstance(stored, ImageSettingsInfo) \
            else ImageSettings()
        if workload.image_source == FILES and isinstance(workload.image_paths, list):
            return cls(paths=tuple(Path(p) for p in workload.image_paths), settings=settings)
        return cls(count=len(workload.image_list) or 1, settings=settings)


@dataclass
class WorkloadInputs:
    """One entry per generate() call: prompt ids, or the keyword inputs of a vision model."""

    generations: list[torch.Tensor | dict[str, torch.Tensor]]
    stages: dict[str, str] = field(default_factory=dict)  # qualified module name → phase name
    images: list[ImageInfo] | None = None  # per generation: run.json workload.images
    spec: VisionSpec | None = None

    @property
    def prompt_len(self) -> int:
        if self.images:
            return int(statistics.median(image.prompt_tokens or 0 for image in self.images))
        first = self.generations[0]
        return int((first["input_ids"] if isinstance(first, dict) else first).shape[1])

    def workload_keys(self) -> dict[str, Any]:
        if self.spec is None:
            return {}
        return {"prompt": self.spec.prompt, "images": self.images, "stages": list(self.stages.values())}


def text_inputs(settings: GenerationSettings, config: Any, device: torch.device, request: ImageRequest,
                model_name: str) -> WorkloadInputs:
    if request.given:
        raise UserError(f"--image/--images: '{model_name}' is a {config.model_type} model, which takes no images "
                        f"(models that do: {', '.join(vision_model_types())})")
    return WorkloadInputs([make_prompt(settings, config.vocab_size, device)])


def vision_inputs(spec: VisionSpec, config: Any, checkpoint: Path | None, request: ImageRequest, seed: int,
                  device: torch.device, dtype: torch.dtype, limit: int | None = None) -> WorkloadInputs:
    """The images through the model's processor, checked before the model is built (bad input fails fast).
    limit: only the first images (the Nsight Compute replay needs one)."""
    request.settings.validate(spec)
    documents = request.documents(seed)[:limit]
    processor = build_processor(spec, config, checkpoint, request.settings)
    prepared = image_inputs(processor, spec, documents, request.settings, device, dtype)
    return WorkloadInputs([p.tensors for p in prepared], images=[p.info for p in prepared], spec=spec)
