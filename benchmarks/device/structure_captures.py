"""Plain torch.profiler captures of programs that carry no annotation at all, each with its truth recorded at capture
time, for the held-out checks of structure inference (analyze/structure/structure_inference.py): forward passes, prefill and
decode steps, decoder layers, training steps. No kernelscope range is pushed: these are traces as users make them.

Programs (random weights from configs, bfloat16, one GPU):
- compiled_generate: HF `generate` after `model.forward = torch.compile(...)`, record_shapes on;
- loop_shapes / loop_plain: a hand-written greedy loop (`model(ids, past_key_values=cache)`), with and without
  record_shapes;
- training: forward, backward and AdamW, four profiler steps (`prof.step()`);
- moe_generate: HF `generate` of a small Qwen2-MoE;
- triton_loop: a small decoder whose norms, SwiGLU and residual adds are Triton kernels of this file, greedy loop.
Each trace is written as <name>.json.gz with <name>.truth.json beside it. Run from the repository root:

    python3 benchmarks/device/structure_captures.py --out OUT_DIR [--only NAME …]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import time
import traceback
from pathlib import Path

import torch

PROMPT, NEW_TOKENS, LOOP_PASSES, BATCH = 64, 8, 12, 2
# A dry run of the programs' code on a machine without a GPU: KS_CAPTURE_DEVICE=cpu (Triton through its interpreter,
# TRITON_INTERPRET=1). The captures themselves are made on the GPU.
DEVICE = os.environ.get("KS_CAPTURE_DEVICE", "cuda")


def _sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _llama(layers: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=512, intermediate_size=1408, num_hidden_layers=layers, num_attention_heads=8,
                         num_key_value_heads=2, vocab_size=32000, max_position_embeddings=512)
    config._attn_implementation = "sdpa"
    return LlamaForCausalLM(config).to(DEVICE, torch.bfloat16).eval(), config


def _moe(layers: int):
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

    config = Qwen2MoeConfig(hidden_size=512, intermediate_size=1024, moe_intermediate_size=256,
                            shared_expert_intermediate_size=512, num_hidden_layers=layers, num_attention_heads=8,
                            num_key_value_heads=2, num_experts=8, num_experts_per_tok=2, decoder_sparse_step=1,
                            vocab_size=32000, max_position_embeddings=512)
    config._attn_implementation = "sdpa"
    return Qwen2MoeForCausalLM(config).to(DEVICE, torch.bfloat16).eval(), config


def _prompt(vocab: int) -> torch.Tensor:
    return torch.randint(0, vocab, (BATCH, PROMPT), device=DEVICE, generator=torch.Generator(DEVICE).manual_seed(0))


def _profiler(record_shapes: bool, **kwargs):
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEVICE == "cuda" else [])
    return profile(activities=activities, record_shapes=record_shapes, **kwargs)


def _generate_truth(name: str, layers: int, record_shapes: bool, **extra) -> dict:
    return {"program": name, "forward_passes": NEW_TOKENS, "prefill_steps": 1, "decode_steps": NEW_TOKENS - 1,
            "layers": layers, "batch": BATCH, "prompt_tokens": PROMPT, "record_shapes": record_shapes, **extra}


def compiled_generate(out: Path) -> dict:
    model, config = _llama(6)  # six layers: the middle ones repeat once the first and last fuse apart
    model.forward = torch.compile(model.forward, dynamic=True)
    ids = _prompt(config.vocab_size)
    kwargs = {"max_new_tokens": NEW_TOKENS, "min_new_tokens": NEW_TOKENS, "do_sample": False}
    with torch.no_grad():
        model.generate(ids, **kwargs)  # compiles (prefill and decode shapes) outside the capture
        model.generate(ids, **kwargs)
        _sync()
        with _profiler(True) as prof:
            model.generate(ids, **kwargs)
            _sync()
    prof.export_chrome_trace(str(out))
    return _generate_truth("compiled_generate", config.num_hidden_layers, True, compiled="torch.compile(dynamic=True)")


def _greedy_loop(model, ids: torch.Tensor, passes: int) -> None:
    from transformers import DynamicCache

    cache = DynamicCache()
    tokens = ids
    for _ in range(passes):
        logits = model(tokens, past_key_values=cache, use_cache=True).logits
        tokens = logits[:, -1].argmax(-1, keepdim=True)


def _loop(out: Path, record_shapes: bool, name: str) -> dict:
    model, config = _llama(4)
    ids = _prompt(config.vocab_size)
    with torch.no_grad():
        _greedy_loop(model, ids, 3)
        _sync()
        with _profiler(record_shapes) as prof:
            _greedy_loop(model, ids, LOOP_PASSES)
            _sync()
    prof.export_chrome_trace(str(out))
    return {"program": name, "forward_passes": LOOP_PASSES, "prefill_steps": 1, "decode_steps": LOOP_PASSES - 1,
            "layers": config.num_hidden_layers, "batch": BATCH, "prompt_tokens": PROMPT, "record_shapes": record_shapes}


def loop_shapes(out: Path) -> dict:
    return _loop(out, True, "loop_shapes")


def loop_plain(out: Path) -> dict:
    return _loop(out, False, "loop_plain")


def training(out: Path) -> dict:
    from torch.profiler import schedule

    model, config = _llama(4)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    ids = torch.randint(0, config.vocab_size, (BATCH, PROMPT), device=DEVICE)
    steps = 4

    def step() -> None:
        loss = model(ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # optimizer state and autotuning outside the capture
    _sync()
    with _profiler(False, schedule=schedule(wait=0, warmup=0, active=steps, repeat=1)) as prof:
        for _ in range(steps):
            step()
            prof.step()
        _sync()
    prof.export_chrome_trace(str(out))
    return {"program": "training", "training_steps": steps, "layers": config.num_hidden_layers, "batch": BATCH,
            "tokens": PROMPT, "optimizer": "AdamW(foreach)", "record_shapes": False}


def moe_generate(out: Path) -> dict:
    model, config = _moe(4)
    ids = _prompt(config.vocab_size)
    kwargs = {"max_new_tokens": NEW_TOKENS, "min_new_tokens": NEW_TOKENS, "do_sample": False}
    with torch.no_grad():
        model.generate(ids, **kwargs)
        _sync()
        with _profiler(True) as prof:
            model.generate(ids, **kwargs)
            _sync()
    prof.export_chrome_trace(str(out))
    return _generate_truth("moe_generate", config.num_hidden_layers, True, experts=config.num_experts,
                           experts_per_token=config.num_experts_per_tok,
                           experts_implementation=getattr(config, "_experts_implementation", None))


def triton_loop(out: Path) -> dict:
    from benchmarks.device.structure_triton import TritonDecoder

    layers = 4
    model = TritonDecoder(layers=layers, hidden=512, heads=8, vocab=32000).to(DEVICE, torch.bfloat16)
    ids = _prompt(32000)
    with torch.no_grad():
        model.generate(ids, 3)
        _sync()
        with _profiler(True) as prof:
            model.generate(ids, LOOP_PASSES)
            _sync()
    prof.export_chrome_trace(str(out))
    return {"program": "triton_loop", "forward_passes": LOOP_PASSES, "prefill_steps": 1,
            "decode_steps": LOOP_PASSES - 1, "layers": layers, "batch": BATCH, "prompt_tokens": PROMPT,
            "record_shapes": True, "triton_kernels_per_layer": 3}


PROGRAMS = {f.__name__: f for f in (compiled_generate, loop_shapes, loop_plain, training, moe_generate, triton_loop)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", nargs="*", choices=sorted(PROGRAMS))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import transformers
    import triton

    gpu = torch.cuda.get_device_name(0) if DEVICE == "cuda" else DEVICE
    summary = {"torch": torch.__version__, "transformers": transformers.__version__, "triton": triton.__version__,
               "device": gpu, "captures": {}}
    for name in args.only or PROGRAMS:
        torch.manual_seed(0)
        raw = args.out / f"{name}.json"
        started = time.perf_counter()
        try:
            truth = PROGRAMS[name](raw)
            with raw.open("rb") as src, gzip.open(args.out / f"{name}.json.gz", "wb", compresslevel=9) as dst:
                shutil.copyfileobj(src, dst)
            raw.unlink()
            truth.update(torch=torch.__version__, transformers=transformers.__version__, device=gpu)
            (args.out / f"{name}.truth.json").write_text(json.dumps(truth, indent=1) + "\n")
            size = (args.out / f"{name}.json.gz").stat().st_size
            summary["captures"][name] = {"seconds": round(time.perf_counter() - started, 1), "gzip_bytes": size,
                                         "under_2mb": size <= 2 * 1024 * 1024, "truth": truth}
        except Exception as exc:  # one program failing must not cost the others
            summary["captures"][name] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-3000:]}
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
        print(name, json.dumps(summary["captures"][name])[:300], flush=True)
    (args.out / "captures.json").write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
