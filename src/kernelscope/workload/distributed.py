"""One rank of a multi-process workload: torch.distributed started by torchrun (NCCL on GPUs, gloo on CPU), and a
model split across the ranks by transformers' own tensor-parallel plan (and its expert-parallel plan for MoE
models). kernelscope adds no parallelism of its own: the split is the one transformers serves with."""

from __future__ import annotations

import dataclasses
import os
import socket
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
    """The model with transformers' plans applied on this rank. Random weights (presets) are made once, on rank
    0, saved to `weights_dir` and loaded by every rank with the plan, so that all ranks hold one model."""
    import transformers

    if source.checkpoint is None:
        if context.rank == 0:
            torch.manual_seed(seed)
            with context.device:  # random weights drawn on the GPU: seconds rather than minutes for large models
                model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
            model.save_pretrained(weights_dir)
            del model
            if context.device.type == "cuda":
                torch.cuda.empty_cache()
        barrier()
        path = weights_dir
    else:
        path = source.checkpoint
    kwargs: dict[str, Any] = {"dtype": dtype, "local_files_only": True}
    if ep > 1:
        kwargs.update(_expert_parallel_arguments(tp, ep))
    elif tp > 1:
        kwargs["tp_plan"] = "auto"
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except (ValueError, NotImplementedError) as exc:
        raise UserError(f"--tp/--ep: transformers cannot split '{source.name}' this way: "
                        f"{str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}") from None
    if tp == 1 and ep == 1:
        model = model.to(context.device)
    model.eval()
    return model


def _expert_parallel_arguments(tp: int, ep: int) -> dict[str, Any]:
    """from_pretrained's arguments for tensor- and expert-parallel loading. transformers' DistributedConfig changed
    within 5.x: newer releases take the whole layout in it (`tp_size`, `tp_plan`, `ep_size`) and refuse a
    separate `tp_plan`; earlier ones take `tp_plan="auto"` beside `DistributedConfig(enable_expert_parallel=True)`."""
    from transformers.distributed import DistributedConfig

    fields = {f.name for f in dataclasses.fields(DistributedConfig)}
    if "ep_size" in fields:
        return {"distributed_config": DistributedConfig(tp_size=tp, tp_plan="auto", ep_size=ep)}
    return {"tp_plan": "auto", "distributed_config": DistributedConfig(enable_expert_parallel=True)}
