"""Engine generate timings of whichever kernelscope is first on PYTHONPATH: prefill (the generate call's prefill
phase) and decode TPOT, CUDA events, a model preset's shape (--model, default qwen2-1.5b) with random weights. Run
it once per source tree in the same device call, alternating, to compare two commits side by side
(benchmarks/engine/device_run.sh PART=compare):

    PYTHONPATH=old/src python benchmarks/engine/side_by_side.py --label before
    PYTHONPATH=src python benchmarks/engine/side_by_side.py --label after

Prints one JSON line. Uses only Engine.generate with a marker, which every engine version has.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics

import torch

from kernelscope.engine.generate import Engine
from kernelscope.workload.model import build_config, resolve_model_source


class Events:
    def __init__(self) -> None:
        self.prefill: tuple[torch.cuda.Event, torch.cuda.Event] | None = None
        self.steps: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    @contextlib.contextmanager
    def _span(self, sink):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        yield
        end.record()
        sink((start, end))

    def phase(self, name: str):
        if name == "prefill":
            return self._span(lambda span: setattr(self, "prefill", span))
        return contextlib.nullcontext()

    def step(self, index: int):
        return self._span(self.steps.append)

    def module(self, qualified_name: str):
        return contextlib.nullcontext()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--label", required=True)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--batch", type=int, default=1, help="sequences per generate call (default 1)")
    parser.add_argument("--model", default="qwen2-1.5b", help="model preset whose shape to build (default qwen2-1.5b)")
    parser.add_argument("--prompts", default="128:64,2048:16",
                        help="prompt:new-token pairs, comma-separated (default 128:64,2048:16)")
    args = parser.parse_args()
    from kernelscope.engine.weights import random_hf_model

    model = random_hf_model(build_config(resolve_model_source(args.model)), "cuda", torch.bfloat16, seed=0)
    engine = Engine.from_hf_model(model, backend="triton", max_seq_len=2304)
    del model
    result: dict[str, object] = {"label": args.label, "model": args.model, "batch": args.batch}
    for prompt, new in (tuple(map(int, pair.split(":"))) for pair in args.prompts.split(",")):
        ids = torch.randint(0, engine.config.vocab_size, (args.batch, prompt),
                            generator=torch.Generator().manual_seed(0))
        for _ in range(2):
            engine.generate(ids, new)
        prefill_ms, step_ms = [], []
        for _ in range(args.repeats):
            events = Events()
            engine.generate(ids, new, marker=events)
            torch.cuda.synchronize()
            prefill_ms.append(events.prefill[0].elapsed_time(events.prefill[1]))
            step_ms += [s.elapsed_time(e) for s, e in events.steps]
        result[f"prefill_{prompt}_ms"] = statistics.median(prefill_ms)
        result[f"tpot_after_{prompt}_ms"] = statistics.median(step_ms)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
