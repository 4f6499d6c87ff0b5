"""Re-run a run's workload once, with its phase and module ranges as NVTX ranges, for an external profiler
(`kernelscope ncu` starts it under Nsight Compute): python -m kernelscope.commands.replay RUN."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from kernelscope.errors import UserError
from kernelscope.load import rundir
from kernelscope.workload.annotate import GenerationAnnotator
from kernelscope.workload.engine_backend import EngineWorkload
from kernelscope.workload.generation import GenerationSettings, make_prompt, timed_generate
from kernelscope.workload.inputs import ImageRequest, vision_inputs
from kernelscope.workload.model import build_config, build_model, parse_dtype, resolve_model_source
from kernelscope.workload.vision import stage_modules, vision_spec


def replay(run_path: Path, warmup: int = 1) -> None:
    """The run's generation again; on a run of one generation per image, the first image's only (its kernels
    come first in every phase of the run, which is what Nsight Compute's measurements are matched against)."""
    info = rundir.read_run_info(run_path)
    workload = info.workload
    if info.source != "profile" or workload is None or workload.model is None:
        raise UserError(f"{run_path}: only runs made by `kernelscope profile` can be re-run")
    source = resolve_model_source(workload.model_path or workload.model)
    device = torch.device(workload.device or "cpu")
    dtype = parse_dtype(workload.dtype or "float32")
    config = build_config(source)
    settings = GenerationSettings(workload.batch_size or 1, workload.prompt_len or 1, workload.new_tokens or 1,
                                  workload.seed, workload.temperature, workload.no_repeat_ngram_size)
    spec = vision_spec(config)
    if spec is not None and workload.image_list:
        inputs = vision_inputs(spec, config, source.checkpoint, ImageRequest.from_workload(workload),
                               workload.seed, device, dtype, limit=1).generations[0]
    else:
        inputs = make_prompt(settings, config.vocab_size, device)
    torch.manual_seed(workload.seed)
    if workload.backend == "engine":
        _replay_engine(source, config, device, dtype, inputs, settings, warmup)
        return
    model = build_model(source, config, device, dtype)
    stages = stage_modules(model, spec) if spec is not None else {}
    for _ in range(warmup):  # without ranges: NVTX filters select only the annotated generation
        timed_generate(model, inputs, settings)
    generation = 0 if stages else None
    timed_generate(model, inputs, settings, GenerationAnnotator(model, nvtx=device.type == "cuda", stages=stages,
                                                                generation=generation))
    if device.type == "cuda":
        torch.cuda.synchronize()


def _replay_engine(source: Any, config: Any, device: torch.device, dtype: torch.dtype, input_ids: torch.Tensor,
                   settings: GenerationSettings, warmup: int) -> None:
    """An engine run again, as `profile --backend engine` ran it: warm-up without ranges, then one generation with
    its NVTX ranges (eager decode step 0, then graph replays), so NVTX filters select what the run recorded."""
    workload = EngineWorkload.build(source, config, device, dtype, settings.prompt_len + settings.new_tokens)
    for _ in range(warmup):
        workload.generate(input_ids, settings, annotated=False)
    workload.generate(input_ids, settings, annotated=True)
    if device.type == "cuda":
        torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m kernelscope.commands.replay RUN", file=sys.stderr)
        return 2
    try:
        replay(Path(args[0]))
    except UserError as exc:
        print(f"kernelscope: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
