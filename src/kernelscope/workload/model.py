"""Build a Hugging Face causal LM (or a vision-language model, data/vision.toml) from a preset (random weights)
or a local checkpoint."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kernelscope.errors import UserError
from kernelscope.workload.presets import Preset, load_presets
from kernelscope.workload.vision import vision_model_types, vision_spec

DTYPES: dict[str, torch.dtype] = {
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "float32": torch.float32,
    "fp32": torch.float32,
}


def parse_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name.lower()]
    except KeyError:
        raise UserError(f"--dtype: unknown dtype '{name}' (choose from {', '.join(sorted(DTYPES))})") from None


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class ModelSource:
    """What to build: a preset by name, or a checkpoint directory."""

    name: str
    preset: Preset | None = None
    checkpoint: Path | None = None

    @property
    def kind(self) -> str:
        return "preset" if self.preset is not None else "checkpoint"


def resolve_model_source(name_or_path: str) -> ModelSource:
    presets = load_presets()
    if name_or_path in presets:
        return ModelSource(name=name_or_path, preset=presets[name_or_path])
    path = Path(name_or_path)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UserError(f"--model: checkpoint directory '{path}' has no config.json")
        return ModelSource(name=path.name, checkpoint=path)
    if path.exists():
        raise UserError(f"--model: '{path}' is a file; give a preset name or a checkpoint directory")
    raise UserError(
        f"--model: unknown preset '{name_or_path}' and no such directory "
        f"(presets: {', '.join(presets)})"
    )


def build_config(source: ModelSource, layers: int | None = None) -> Any:
    """The model's configuration; `layers` sets a preset's depth (its widths stay: DeepSeek-V3's layers at full
    width, as many as the GPUs hold)."""
    from kernelscope.workload.framework import import_transformers

    auto_config = import_transformers().AutoConfig  # the first import of transformers in a profile
    if layers is not None and layers < 1:
        raise UserError(f"--layers must be at least 1, got {layers}")
    if source.preset is not None:
        settings = dict(source.preset.config)
        if layers is not None:
            if source.preset.model_type in vision_model_types():
                raise UserError(f"--layers: {source.name} is a vision-language model; --layers sets the depth of a "
                                "causal LM preset")
            settings["num_hidden_layers"] = layers
            dense = settings.get("first_k_dense_replace")
            if isinstance(dense, int) and dense > layers:  # MoE presets: the dense first layers fit in the depth
                settings["first_k_dense_replace"] = layers
        return auto_config.for_model(source.preset.model_type, **settings)
    if layers is not None:
        raise UserError(f"--layers: '{source.name}' is a checkpoint; its weights fix its depth (--layers sets a "
                        "preset's)")
    try:
        json.loads((source.checkpoint / "config.json").read_text(encoding="utf-8"))
        return auto_config.from_pretrained(source.checkpoint, local_files_only=True)
    except (ValueError, KeyError, OSError) as exc:
        raise UserError(f"--model: cannot read {source.checkpoint / 'config.json'}: {_first_line(exc)}") from None


def build_model(source: ModelSource, config: Any, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    """Random weights for presets; the checkpoint's weights for a directory. Returns an eval-mode model."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    import transformers

    auto = transformers.AutoModelForImageTextToText if vision_spec(config) else transformers.AutoModelForCausalLM
    kind = "vision-language model" if vision_spec(config) else "causal LM"
    try:
        if source.checkpoint is None:
            with device:
                model = auto.from_config(config, dtype=dtype)
        else:
            model = auto.from_pretrained(
                source.checkpoint, config=config, dtype=dtype, local_files_only=True
            ).to(device)
    except torch.OutOfMemoryError:
        raise UserError(
            f"CUDA out of memory while building '{source.name}' on {device} "
            f"({estimate_parameter_bytes(config, dtype) / 1e9:.1f} GB of weights estimated)"
        ) from None
    except ValueError as exc:
        # transformers raises ValueError for configurations it has no causal-LM class for.
        raise UserError(f"--model: cannot build a {kind} from '{source.name}': {_first_line(exc)}") from None
    except OSError as exc:
        raise UserError(f"--model: cannot load weights from '{source.checkpoint}': {_first_line(exc)}") from None
    model.eval()
    return model


def estimate_parameter_bytes(config: Any, dtype: torch.dtype) -> float:
    """A rough size for error messages: 12·h²·layers + vocab·h parameters (of the language model)."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    hidden = getattr(config, "hidden_size", 0)
    layers = getattr(config, "num_hidden_layers", 0)
    vocab = getattr(config, "vocab_size", 0)
    params = 12 * hidden * hidden * layers + 2 * vocab * hidden
    return params * torch.empty((), dtype=dtype).element_size()


def max_positions(config: Any) -> int | None:
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    return getattr(config, "max_position_embeddings", None)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
