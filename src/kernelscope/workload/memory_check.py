"""Refuse, before anything is built, a model whose weights cannot fit where they would live.

The weights are counted exactly (the model built on the meta device: no memory, a second for the largest
presets) and compared with the memory of the device that would hold them: a GPU's total memory, or the memory
the host has available for CPU runs. With several ranks splitting the model each rank needs at least its share
(the lower bound: tensor- and expert-parallel plans leave some weights whole on every rank), so only a model
that cannot fit even then is refused. What transformers cannot build is left to the build to report."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import torch

from kernelscope.errors import UserError
from kernelscope.workload.model import dtype_name
from kernelscope.workload.vision import vision_spec


def parameter_count(config: Any) -> int | None:
    """Parameters of the causal LM `config` describes, or None where it cannot be built here."""
    import transformers

    logging.getLogger("transformers").setLevel(logging.ERROR)
    with _inductor_cache_for_this_call(), contextlib.suppress(Exception), torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
        return sum(p.numel() for p in model.parameters())
    return None


@contextlib.contextmanager
def _inductor_cache_for_this_call() -> Iterator[None]:
    """Importing a transformers model class makes torch create its compile cache folder in the temp dir; the
    parent of a multi-rank profile builds nothing else, so that folder would be all it leaves behind: point
    the cache at a folder of this call's own (unless the user chose one) and remove it afterwards."""
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        yield
        return
    folder = tempfile.mkdtemp(prefix="kernelscope-inductor-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder
    try:
        yield
    finally:
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        shutil.rmtree(folder, ignore_errors=True)


def available_bytes(device: torch.device) -> int | None:
    """A GPU's total memory; for the CPU, MemAvailable of /proc/meminfo. None where unknown."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device.index or 0).total_memory
    with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


def check_weights_fit(model_name: str, config: Any, dtype: torch.dtype, device: torch.device, ranks: int = 1,
                      split: bool = False, ranks_per_host: int = 1) -> None:
    """UserError when the weights cannot fit: per GPU, the model (÷ ranks when split); on the CPU, every rank of
    this host together."""
    if vision_spec(config) is not None:
        return  # the vision presets are a few GB; their classes are built another way
    count = parameter_count(config)
    available = available_bytes(device)
    if count is None or available is None:
        return
    total = count * torch.empty((), dtype=dtype).element_size()
    per_rank = total / ranks if split else total
    needed = per_rank if device.type == "cuda" else per_rank * ranks_per_host
    if needed <= available:
        return
    where = f"each GPU has {available / 1e9:.1f} GB" if device.type == "cuda" else \
        f"this machine has {available / 1e9:.1f} GB of memory available"
    share = f", {per_rank / 1e9:.1f} GB per rank at best over {ranks} ranks" if split and ranks > 1 else ""
    hosts = f" ({ranks_per_host} ranks on this machine)" if device.type != "cuda" and ranks_per_host > 1 else ""
    raise UserError(f"--model {model_name}: its weights take {total / 1e9:.1f} GB in {dtype_name(dtype)} "
                    f"({count / 1e9:.2f} B parameters){share}{hosts}; {where} (fewer --layers, or more --gpus)")
