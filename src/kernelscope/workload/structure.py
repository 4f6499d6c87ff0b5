"""Describe a model's structure: its decoder layers and their types, parameter counts and bytes."""

from __future__ import annotations

from typing import Any

import msgspec
import torch

from kernelscope.contracts.run_info import ModelInfo, StageInfo
from kernelscope.ranges import layer_index


def root_label(model: torch.nn.Module) -> str:
    """Range name of the root module, whose qualified name is empty: its class name."""
    return type(model).__name__


def decoder_layers(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The largest ModuleList of the model (by parameters): its elements are the decoder layers."""
    best: list[tuple[str, torch.nn.Module]] = []
    best_params = -1
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) > 0:
            params = sum(p.numel() for p in module.parameters())
            if params > best_params:
                best_params = params
                best = [(f"{name}.{i}" if name else str(i), child) for i, child in enumerate(module)]
    return best


def layer_types(model: torch.nn.Module) -> dict[int, str]:
    """A label per layer index. Layers of one class whose children differ in class (dense MLP vs MoE)
    get the differing child classes in parentheses, e.g. 'DeepseekV3DecoderLayer (DeepseekV3MoE)'."""
    layers = decoder_layers(model)
    signatures = {
        name: tuple((child_name, type(child).__name__) for child_name, child in layer.named_children())
        for name, layer in layers
    }
    by_class: dict[str, set[tuple]] = {}
    for name, layer in layers:
        by_class.setdefault(type(layer).__name__, set()).add(signatures[name])
    labels: dict[int, str] = {}
    for name, layer in layers:
        cls = type(layer).__name__
        label = cls
        variants = by_class[cls]
        if len(variants) > 1:
            common = set.intersection(*(set(v) for v in variants))
            differing = [c for _, c in signatures[name] if (_, c) not in common]
            label = f"{cls} ({', '.join(differing)})"
        index = layer_index(name)
        if index is not None:
            labels[index] = label
    return labels


def describe_model(model: torch.nn.Module, config: Any, stages: dict[str, str] | None = None) -> ModelInfo:
    """Class, sizes, decoder layers and their types; with stages (qualified module name → phase), each stage's
    module, size and layers too (its layer indices restart at 0, so each stage has its own layer types)."""
    info = ModelInfo(class_name=type(model).__name__, model_type=getattr(config, "model_type", None),
                     config=plain_config(config), **_sizes(model))
    if stages:
        described = {}
        for name, phase in stages.items():
            module = model.get_submodule(name)
            sizes = _sizes(module)
            if sizes["layer_prefix"]:
                sizes["layer_prefix"] = f"{name}.{sizes['layer_prefix']}"
            described[phase] = StageInfo(module=name, class_name=type(module).__name__, **sizes)
        info = msgspec.structs.replace(info, stages=described)
    return info


def _sizes(model: torch.nn.Module) -> dict[str, Any]:
    params = list(model.parameters())
    types = layer_types(model)
    layers = decoder_layers(model)
    return {
        "parameters": sum(p.numel() for p in params),
        "parameter_bytes": sum(p.numel() * p.element_size() for p in params),
        "num_layers": len(layers),
        "layer_prefix": layers[0][0].rsplit(".", 1)[0] if layers else None,
        "layer_types": dict(sorted(types.items())),
    }


def plain_config(config: Any) -> dict[str, Any]:
    """A transformers config as plain values (what run.json keeps of it)."""
    raw = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    keep = {}
    for key, value in raw.items():
        if key.startswith("_") or key in {"id2label", "label2id"}:
            continue
        if isinstance(value, (int, float, str, bool, type(None), list, dict)):
            keep[key] = value
    return keep
