"""Vision-language workloads: which models take images (data/vision.toml), their stages, and their inputs made by
the model's own processor (offline).

Each image is one generation: the processor turns (image, prompt) into input ids with the image's placeholder
tokens, the global view's pixels and the crops' pixels. For presets (random weights, no files) the processor is
built from transformers' image processor and a small word-level tokenizer that knows the prompt's words and maps
the special tokens to the model's ids; a checkpoint directory with tokenizer files brings its own processor.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import torch

from kernelscope import ranges
from kernelscope.contracts.run_info import ImageInfo
from kernelscope.errors import UserError
from kernelscope.packaged import packaged_toml
from kernelscope.workload.images import DocImage

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
FIRST_WORD_ID = 100  # ids of the stand-in tokenizer's ordinary words start here


@dataclass(frozen=True)
class VisionSpec:
    model_type: str
    name: str
    stages: tuple[str, ...]
    prompt: str
    image_token: str
    special_tokens: tuple[str, ...]
    view_tokens: tuple[int, ...]
    view_pixels: int
    separator_tokens: int
    processor: str
    image_processor: str

    def view_token_count(self, side: int) -> int:
        return math.ceil(side / self.view_pixels) ** 2

    def view_sides(self) -> str:
        """The view sizes (pixels) that give an accepted token count, e.g. '705–768 or 961–1024'."""
        spans = []
        for tokens in self.view_tokens:
            per_side = math.isqrt(tokens)
            spans.append(f"{(per_side - 1) * self.view_pixels + 1}–{per_side * self.view_pixels}")
        return " or ".join(spans)


@cache
def _specs() -> dict[str, VisionSpec]:
    table = packaged_toml("kernelscope.data", "vision.toml")
    return {
        model_type: VisionSpec(
            model_type=model_type,
            name=entry["name"],
            stages=tuple(entry["stages"]),
            prompt=entry["prompt"],
            image_token=entry["image_token"],
            special_tokens=tuple(entry.get("special_tokens", ())),
            view_tokens=tuple(entry["view_tokens"]),
            view_pixels=entry["view_pixels"],
            separator_tokens=entry.get("separator_tokens", 0),
            processor=entry["processor"],
            image_processor=entry["image_processor"],
        )
        for model_type, entry in table["models"].items()
    }


def vision_spec(config: Any) -> VisionSpec | None:
    """The vision workload of a model configuration, or None for a text-only model."""
    return _specs().get(getattr(config, "model_type", None))


def vision_model_types() -> list[str]:
    return sorted(_specs())


@dataclass(frozen=True)
class ImageSettings:
    """The processor's knobs under the names of DeepSeek-OCR's own scripts: base_size is the global view's side,
    image_size the side of each crop (the processor's tile_size), crop_mode whether large images are also cut
    into crops."""

    base_size: int = 1024
    image_size: int = 768
    crop_mode: bool = True

    def validate(self, spec: VisionSpec) -> None:
        views = [("--base-size", self.base_size)] + ([("--image-size", self.image_size)] if self.crop_mode else [])
        for option, side in views:
            if side < 1:
                raise UserError(f"{option} must be at least 1, got {side}")
            tokens = spec.view_token_count(side)
            if tokens not in spec.view_tokens:
                raise UserError(
                    f"{option} {side}: a {side}-pixel view becomes {tokens} image tokens, but {spec.name}'s vision "
                    f"encoder has learned queries only for {' or '.join(map(str, spec.view_tokens))} tokens per view "
                    f"(views of {spec.view_sides()} pixels)"
                )

    def processor_kwargs(self) -> dict[str, Any]:
        size = {"height": self.base_size, "width": self.base_size}
        # Without crops the processor sizes the only (global) view by tile_size: give it the base size.
        tile = self.image_size if self.crop_mode else self.base_size
        return {"crop_to_patches": self.crop_mode, "size": size, "tile_size": tile}

    def as_dict(self) -> dict[str, Any]:
        return {"base_size": self.base_size, "image_size": self.image_size, "crop_mode": self.crop_mode}


@dataclass
class ImageInputs:
    """One generation's model inputs (tensors on the device) and what run.json says about its image."""

    tensors: dict[str, torch.Tensor]
    info: ImageInfo


def stage_modules(model: torch.nn.Module, spec: VisionSpec) -> dict[str, str]:
    """Qualified module name → phase name, for the spec's stages that the model has."""
    names = {name for name, _ in model.named_modules()}
    return {name: ranges.stage_phase(name) for name in spec.stages if name in names}


def build_processor(spec: VisionSpec, config: Any, checkpoint: Path | None, settings: ImageSettings) -> Any:
    """The model's processor: the checkpoint's tokenizer when it has tokenizer files, else a stand-in one (no
    download either way), with transformers' image processor set to `settings`. The settings are given both to
    the image processor and to each call (image_inputs): processor versions differ in which one counts the image
    tokens, and a processor's own defaults override the image processor's."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    import transformers

    image_processor = getattr(transformers, spec.image_processor)(**settings.processor_kwargs())
    if checkpoint is not None and any((checkpoint / name).is_file() for name in TOKENIZER_FILES):
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint, local_files_only=True)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UserError(f"--model: cannot load the tokenizer of '{checkpoint}': {_first_line(exc)}") from None
    else:
        tokenizer = stand_in_tokenizer(spec, config)
    return getattr(transformers, spec.processor)(image_processor=image_processor, tokenizer=tokenizer)


def stand_in_tokenizer(spec: VisionSpec, config: Any) -> Any:
    """A word-level tokenizer for random-weight presets: the prompt's words and special tokens, the image token
    at the model's image_token_id, BOS first as the real tokenizer does. Kernel shapes depend on token counts, and
    the text part of the prompt is within a few tokens of the real tokenizer's."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    text = config.get_text_config()
    bos = getattr(text, "bos_token_id", None)
    eos = getattr(text, "eos_token_id", None)
    bos = 0 if bos is None else bos
    eos = (eos[0] if isinstance(eos, list) else eos) if eos is not None else bos
    vocab = {"<bos>": bos, "<eos>": eos, spec.image_token: config.image_token_id}
    taken = set(vocab.values())
    next_id = FIRST_WORD_ID
    words = list(spec.special_tokens) + ["<unk>"] + pre_tokenizers.Whitespace().pre_tokenize_str(
        _strip(spec.prompt, [spec.image_token, *spec.special_tokens]))
    for word in words:
        word = word[0] if isinstance(word, tuple) else word
        if word in vocab:
            continue
        while next_id in taken:
            next_id += 1
        if next_id >= text.vocab_size:
            raise UserError(f"the model's vocabulary ({text.vocab_size}) is too small for the prompt's words")
        vocab[word] = next_id
        taken.add(next_id)
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", bos)])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>", pad_token="<eos>",
        additional_special_tokens=[spec.image_token, *spec.special_tokens],
    )


def image_inputs(processor: Any, spec: VisionSpec, images: list[DocImage], settings: ImageSettings,
                 device: torch.device, dtype: torch.dtype) -> list[ImageInputs]:
    """Model inputs of each image through the processor; pixels in the model's dtype. An image the processor
    cannot take, or token counts the model would reject, are UserErrors naming the image."""
    image_token_id = processor.tokenizer.convert_tokens_to_ids(spec.image_token)
    out = []
    for index, doc in enumerate(images):
        try:
            batch = processor(images=doc.image, text=spec.prompt, return_tensors="pt", **settings.processor_kwargs())
        except (ValueError, TypeError, RuntimeError, OSError) as exc:
            raise UserError(f"{doc.source}: the {spec.name} processor rejected the image: {_first_line(exc)}") from None
        tensors = {key: value for key, value in batch.items() if isinstance(value, torch.Tensor)}
        crops = int(tensors["num_local_patches"].sum()) if "num_local_patches" in tensors else 0
        image_tokens = int((tensors["input_ids"] == image_token_id).sum())
        expected = (spec.view_token_count(settings.base_size) + crops * spec.view_token_count(settings.image_size)
                    + spec.separator_tokens)
        if image_tokens != expected:
            raise UserError(f"{doc.source}: the processor made {image_tokens} image tokens, the vision encoder would "
                            f"make {expected} ({crops} crops): check --base-size and --image-size")
        tensors = {key: value.to(device, dtype) if value.is_floating_point() else value.to(device)
                   for key, value in tensors.items()}
        width, height = doc.size
        out.append(ImageInputs(tensors, ImageInfo(
            index=index, source=doc.source, width=width, height=height, crops=crops, image_tokens=image_tokens,
            prompt_tokens=int(tensors["input_ids"].shape[1]),
        )))
    return out


def _strip(text: str, tokens: list[str]) -> str:
    for token in tokens:
        text = text.replace(token, " ")
    return text


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
