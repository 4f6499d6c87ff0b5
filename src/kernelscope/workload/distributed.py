"""One rank of a multi-process workload: torch.distributed started by torchrun (NCCL on GPUs, gloo on CPU), and a
model split across the ranks by transformers' own tensor-parallel plan (and its expert-parallel plan for MoE
models). kernelscope adds no parallelism of its own: the split is the one transformers serves with."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kernelscope.errors import UserError


@dataclass(frozen=True)
class RankContext:
    """Where this process runs in the job (torchrun's environment)."""

    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    backend: str
    host: str


def start_rank(device_type: str) -> RankContext:
    """Join the process group torchrun set up: NCCL on CUDA (this process's GPU is LOCAL_RANK), gloo on CPU."""
    import torch.distributed as dist

    rank, local_rank, world = (int(os.environ[k]) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))
    if device_type == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise UserError(f"--gpus: rank {rank} needs GPU {local_rank}, but this node has "
                            f"{torch.cuda.device_count()}")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend, device_id=device if device.type == "cuda" else None)
    return RankContext(rank, local_rank, world, device, backend, socket.gethostname())


def barrier() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()


def finish() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def check_split(config: Any, tp: int, ep: int) -> None:
    """Shapes that transformers' plans can split `tp` (and `ep`) ways; a clear line before anything is built."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if tp > 1:
        if not getattr(text, "base_model_tp_plan", None):
            raise UserError(f"--tp {tp}: transformers has no tensor-parallel plan for model type "
                            f"'{getattr(text, 'model_type', '?')}'")
        for field in ("num_attention_heads", "num_key_value_heads"):
            value = getattr(text, field, None)
            if value is not None and value % tp:
                raise UserError(f"--tp {tp}: the model's {field} ({value}) is not divisible by {tp}")
    if ep > 1:
        experts = getattr(text, "n_routed_experts", None) or getattr(text, "num_experts", None) \
            or getattr(text, "num_local_experts", None)
        if not experts:
            raise UserError(f"--ep {ep}: the model has no routed experts")
        if experts % ep:
            raise UserError(f"--ep {ep}: the model's {experts} routed experts are not divisible by {ep}")


def build_split_model(source: Any, config: Any, context: RankContext, dtype: torch.dtype, tp: int, ep: int,
                      weights_dir: Path, seed: int) -> torch.nn.Module:
    """The model with transformers' plans applied on this rank. A preset's random weights are drawn by every rank
    for its own shard: rank 0 writes a checkpoint that holds only the tensors' names and shapes (a sparse file:
    no bytes on disk, zeros when read), every rank loads it with the plan, then fills its parameters in place.
    So a model larger than any one GPU, disk or host memory still starts in seconds."""
    import transformers

    if source.checkpoint is None:
        if context.rank == 0:
            write_shape_checkpoint(config, dtype, weights_dir, context.device, seed)
        barrier()
        path = weights_dir
    else:
        path = source.checkpoint
    kwargs: dict[str, Any] = {"dtype": dtype, "local_files_only": True}
    if tp > 1 or ep > 1:
        kwargs.update(_split_arguments(tp, ep))
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except (ValueError, NotImplementedError) as exc:
        raise UserError(f"--tp/--ep: transformers cannot split '{source.name}' this way: "
                        f"{str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}") from None
    if tp == 1 and ep == 1:
        model = model.to(context.device)
    if source.checkpoint is None:
        fill_random_weights(model, seed, getattr(config, "initializer_range", 0.02))
    model.eval()
    return model


def write_shape_checkpoint(config: Any, dtype: torch.dtype, folder: Path, device: torch.device, seed: int) -> None:
    """save_pretrained of the model built on the meta device, its safetensors files written as header + hole:
    the checkpoint's names, shapes and layout are transformers' own (whatever its release renames or fuses),
    and its data reads as zeros. Without transformers' safetensors hook, the weights are drawn and saved whole."""
    import transformers
    import transformers.modeling_utils as modeling_utils

    if not hasattr(modeling_utils, "safe_save_file"):
        torch.manual_seed(seed)
        with device:
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
        model.save_pretrained(folder)
        return
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    real = modeling_utils.safe_save_file
    modeling_utils.safe_save_file = write_sparse_safetensors
    try:
        model.save_pretrained(folder)
    finally:
        modeling_utils.safe_save_file = real


_SAFETENSORS_DTYPES = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32", torch.float64: "F64",
                       torch.int64: "I64", torch.int32: "I32", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL"}


def write_sparse_safetensors(tensors: dict[str, torch.Tensor], filename: str | os.PathLike,
                             metadata: dict[str, str] | None = None) -> None:
    """A safetensors file (8-byte header length, JSON header, data) whose data is a hole of the right length."""
    header: dict[str, Any] = {}
    offset = 0
    for name in sorted(tensors):
        tensor = tensors[name]
        size = tensor.numel() * tensor.element_size()
        header[name] = {"dtype": _SAFETENSORS_DTYPES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    if metadata:
        header["__metadata__"] = metadata
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the data starts 8-byte aligned
    with open(filename, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        f.truncate(8 + len(encoded) + offset)


def fill_random_weights(model: torch.nn.Module, seed: int, std: float) -> None:
    """transformers' initialisation, applied to this rank's shard of every parameter: norms' weights 1, biases 0,
    everything else normal(0, std). Each parameter's generator is seeded by its name, so a parameter that every
    rank holds whole gets the same values on every rank (the ranks compute one model)."""
    with torch.no_grad():
        for module_name, module in model.named_modules():
            is_norm = "norm" in type(module).__name__.lower()
            for name, param in module.named_parameters(recurse=False):
                local = param.to_local() if hasattr(param, "to_local") else param.data
                if name == "bias" or name.endswith("_bias"):
                    local.zero_()
                elif is_norm:
                    local.fill_(1.0)
                else:
                    generator = torch.Generator(device=local.device)
                    generator.manual_seed(seed * 1_000_003 + zlib.crc32(f"{module_name}.{name}".encode()))
                    local.normal_(0.0, std, generator=generator)


def _split_arguments(tp: int, ep: int) -> dict[str, Any]:
    """from_pretrained's arguments for tensor- (and expert-) parallel loading. transformers' DistributedConfig
    changed within 5.x, so the layout is written in the form the installed release takes:
    - with `ep_size` (≥ 5.2x): `DistributedConfig(tp_size, tp_plan="auto", ep_size)`;
    - with `tp_size` but no `ep_size` (5.1x, e.g. 5.17): `DistributedConfig(tp_size, tp_plan="auto",
      enable_expert_parallel)`; these refuse a separate `tp_plan` beside a `distributed_config`;
    - earlier: `tp_plan="auto"`, beside `DistributedConfig(enable_expert_parallel=True)` for experts."""
    from transformers.distributed import DistributedConfig

    fields = {f.name for f in dataclasses.fields(DistributedConfig)}
    if "ep_size" in fields:
        layout: dict[str, Any] = {"tp_size": tp, "tp_plan": "auto"}
        if ep > 1:
            layout["ep_size"] = ep
        return {"distributed_config": DistributedConfig(**layout)}
    if "tp_size" in fields:
        return {"distributed_config": DistributedConfig(tp_size=tp, tp_plan="auto", enable_expert_parallel=ep > 1)}
    if ep > 1:
        return {"tp_plan": "auto", "distributed_config": DistributedConfig(enable_expert_parallel=True)}
    return {"tp_plan": "auto"}
