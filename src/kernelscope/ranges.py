"""Names of the ranges kernelscope pushes around phases and modules.

This is a contract between the workload (which pushes the ranges, as profiler and NVTX ranges) and
the analysis (which reads them back from any trace). Nsight tools can gate on the same names, e.g.
`ncu --nvtx --nvtx-include "regex:ks.phase:decode/"`.
"""

from __future__ import annotations

import re

PHASE_PREFIX = "ks.phase:"
MODULE_PREFIX = "ks.module:"
# A module's layer: the first purely numeric part of its name (`model.layers.3.mlp` is layer 3), whatever gave it.
LAYER_IN_MODULE = r"(?:^|\.)(\d+)(?:\.|$)"
GENERATION_PREFIX = "ks.generation:"
# Around one engine kernel launch, declaring its exact cost: `ks.cost|<kernel>|flops=…|bytes=…|precision=…`
# (pushed through kernelscope.engine_costs, read by analyze.kernel_costs).
COST_PREFIX = "ks.cost|"
COST_DEFAULT_PRECISION = "fp32"

PREFILL = "prefill"
DECODE = "decode"
UNKNOWN = "unknown"
# Phases of steps inferred from serving engines' annotations (analyze/structure/step_inference.py): a step that batches
# prefill and decode requests together, and one that ran the model with no request.
MIXED = "mixed"
IDLE = "idle"
# The phases of the language model itself; any other phase name is a model stage (a vision encoder, a projector).
STEP_PHASES = (PREFILL, MIXED, DECODE, IDLE)

# Non-model work of a generation step (logits processing, token selection, stopping checks).
GENERATE_MODULE = "generate"


def phase_range(phase: str, step: int | None = None) -> str:
    return f"{PHASE_PREFIX}{phase}" if step is None else f"{PHASE_PREFIX}{phase}:{step}"


def module_range(qualified_name: str) -> str:
    return f"{MODULE_PREFIX}{qualified_name}"


def generation_range(index: int) -> str:
    """Around one generate() call of a profiled run that holds several (one per input image)."""
    return f"{GENERATION_PREFIX}{index}"


def cost_range(kernel: str, flops: int, nbytes: int, precision: str) -> str:
    return f"{COST_PREFIX}{kernel}|flops={int(flops)}|bytes={int(nbytes)}|precision={precision}"


def cost_field_pattern(key: str) -> str:
    """A regex whose first group is one field (flops, bytes, precision) of a cost range name."""
    return rf"\|{key}=([^|]+)"


def parse_cost_range(name: str) -> tuple[str, float, float, str] | None:
    """(kernel, flops, bytes, precision) from a range name, or None when the name is not a cost declaration."""
    if not name.startswith(COST_PREFIX):
        return None
    fields = {key: re.search(cost_field_pattern(key), name) for key in ("flops", "bytes", "precision")}
    try:
        flops, nbytes = float(fields["flops"].group(1)), float(fields["bytes"].group(1))
    except (AttributeError, ValueError):
        return None
    precision = fields["precision"].group(1) if fields["precision"] else COST_DEFAULT_PRECISION
    return name[len(COST_PREFIX):].split("|", 1)[0], flops, nbytes, precision


def stage_phase(qualified_name: str) -> str:
    """Phase name of a model stage (a vision encoder, a projector): the module's own attribute name, e.g.
    'sam_encoder' for 'model.vision_tower.sam_encoder'. Phase names hold no ':' (it separates the step)."""
    return qualified_name.rsplit(".", 1)[-1].replace(":", "_")


_LAYER_INDEX = re.compile(r"(?:^|\.)(\d+)(?:\.|$)")


def layer_index(module_name: str) -> int | None:
    """The decoder layer a module belongs to: the first purely numeric part of its qualified name."""
    match = _LAYER_INDEX.search(module_name)
    return int(match.group(1)) if match else None


def layer_prefix(module_name: str) -> str | None:
    """Qualified name of the layer module itself, e.g. 'model.layers.3' for 'model.layers.3.mlp.up_proj'."""
    match = _LAYER_INDEX.search(module_name)
    return module_name[: match.end(1)] if match else None
