"""Re-run a run's workload once, with its phase and module ranges as NVTX ranges, for an external profiler
(`kernelscope ncu` starts it under Nsight Compute): python -m kernelscope.commands.replay RUN."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from kernelscope.errors import UserError
from kernelscope.load import rundir
from kernelscope.workload.annotate import GenerationAnnotator
from kernelscope.workload.generation import GenerationSettings, make_prompt, timed_generate
from kernelscope.workload.model import build_config, build_model, parse_dtype, resolve_model_source


def replay(run_path: Path, warmup: int = 1) -> None:
    run = rundir.read_run_json(run_path)
    workload = run.get("workload")
    if run.get("source") != "profile" or not workload:
        raise UserError(f"{run_path}: only runs made by `kernelscope profile` can be re-run")
    source = resolve_model_source(workload.get("model_path") or workload["model"])
    device = torch.device(workload["device"])
    config = build_config(source)
    torch.manual_seed(workload["seed"])
    model = build_model(source, config, device, parse_dtype(workload["dtype"]))
    settings = GenerationSettings(workload["batch_size"], workload["prompt_len"], workload["new_tokens"],
                                  workload["seed"])
    ids = make_prompt(settings, config.vocab_size, device)
    for _ in range(warmup):  # without ranges: NVTX filters select only the annotated generation
        timed_generate(model, ids, settings)
    timed_generate(model, ids, settings, GenerationAnnotator(model, nvtx=True))
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
