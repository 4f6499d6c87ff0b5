"""Record the foreign traces that tests/data/foreign holds: torch.profiler traces written the way users write
them (no kernelscope ranges), of HF generate and of a user's own decode loop, eager, compiled, CUDA-graph captured
and replayed, and tensor-parallel on two GPUs. Rebuilds the fixtures on a GPU machine:

    python3 benchmarks/foreign/capture.py --out DIR                      # single-GPU parts
    torchrun --nproc-per-node 2 benchmarks/foreign/capture.py --out DIR --part tp

Random weights from a Qwen2-0.5B-shaped config cut to 4 layers; batch 2, prompt 64, 6 new tokens.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import sys
import time
import traceback
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

BATCH, PROMPT, NEW_TOKENS, LAYERS = 2, 64, 6, 4


def config():
    from transformers import Qwen2Config

    return Qwen2Config(hidden_size=896, intermediate_size=4864, num_hidden_layers=LAYERS, num_attention_heads=14,
                       num_key_value_heads=2, vocab_size=151936, max_position_embeddings=4096,
                       tie_word_embeddings=True)


def build(device: str):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config(), dtype=torch.bfloat16)
    return model.eval()


def activities(device: str):
    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])


def save(prof, out: Path, name: str) -> Path:
    raw = out / f"{name}.json"
    prof.export_chrome_trace(str(raw))
    target = out / f"{name}.json.gz"
    with open(raw, "rb") as src, gzip.open(target, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    print(f"{name}: {target.stat().st_size / 1e6:.2f} MB", flush=True)
    return target


def prompt(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(10, 1000, (BATCH, PROMPT), generator=g).to(device)
    return ids, torch.ones_like(ids)


def generate(model, ids, mask, **kwargs):
    return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                          do_sample=False, pad_token_id=0, eos_token_id=None, **kwargs)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def part_hf(out: Path, device: str) -> None:
    """HF generate with stacks and modules, and the same without (shapes only)."""
    model = build(device)
    ids, mask = prompt(device)
    with torch.no_grad():
        generate(model, ids, mask)
        sync(device)
        for name, stack in (("hf_generate_stack", True), ("hf_generate_plain", False)):
            with profile(activities=activities(device), record_shapes=True, with_stack=stack,
                         with_modules=stack) as prof:
                generate(model, ids, mask)
                sync(device)
            save(prof, out, name)


def part_steps(out: Path, device: str) -> None:
    """A user's own decode loop under a profiler schedule, prof.step() after each forward (ProfilerStep#N ranges),
    shapes only. The schedule's warm-up step runs a forward that is not recorded."""
    model = build(device)
    ids, _ = prompt(device)
    schedule = torch.profiler.schedule(wait=0, warmup=1, active=NEW_TOKENS, repeat=1)
    with torch.no_grad(), profile(activities=activities(device), record_shapes=True, schedule=schedule,
                 on_trace_ready=lambda p: save(p, out, "own_loop_profiler_steps")) as prof:
        model(input_ids=ids, use_cache=True)
        sync(device)
        prof.step()
        past, step_ids = None, ids
        for _ in range(NEW_TOKENS):
            result = model(input_ids=step_ids, past_key_values=past, use_cache=True)
            past = result.past_key_values
            step_ids = result.logits[:, -1:].argmax(-1)
            sync(device)
            prof.step()


def part_compile(out: Path, device: str) -> None:
    """HF generate with a static cache (transformers compiles the decode forward with Inductor)."""
    model = build(device)
    ids, mask = prompt(device)
    with torch.no_grad():
        t0 = time.time()
        for _ in range(2):
            generate(model, ids, mask, cache_implementation="static")
        sync(device)
        print(f"compile warm-up {time.time() - t0:.1f} s", flush=True)
        with profile(activities=activities(device), record_shapes=True) as prof:
            generate(model, ids, mask, cache_implementation="static")
            sync(device)
        save(prof, out, "hf_generate_compiled")


def part_graph(out: Path, device: str) -> None:
    """A decode step captured as a CUDA graph under the profiler (the capture trace, stacks and modules), then a
    trace of an eager prefill, one eager decode step and four replays (the replay trace)."""
    from transformers import StaticCache

    model = build(device)
    ids, _ = prompt(device)
    cache = StaticCache(config=model.config, max_cache_len=PROMPT + NEW_TOKENS + 8)
    with torch.no_grad():
        positions = torch.arange(PROMPT, device=device)
        logits = model(input_ids=ids, past_key_values=cache, cache_position=positions).logits
        token = logits[:, -1:].argmax(-1)
        static_ids = token.clone()
        static_pos = torch.tensor([PROMPT], device=device)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                model(input_ids=static_ids, past_key_values=cache, cache_position=static_pos)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with profile(activities=activities(device), record_shapes=True, with_stack=True,
                     with_modules=True) as prof:
            with torch.cuda.graph(graph):
                static_logits = model(input_ids=static_ids, past_key_values=cache, cache_position=static_pos).logits
            sync(device)
        save(prof, out, "graph_capture")
        cache.reset()
        sync(device)
        with profile(activities=activities(device), record_shapes=True, with_stack=True,
                     with_modules=True) as prof:
            logits = model(input_ids=ids, past_key_values=cache, cache_position=positions).logits
            token = logits[:, -1:].argmax(-1)
            logits = model(input_ids=token, past_key_values=cache, cache_position=static_pos).logits
            token = logits[:, -1:].argmax(-1)
            for i in range(1, NEW_TOKENS - 1):
                static_ids.copy_(token)
                static_pos.fill_(PROMPT + i)
                graph.replay()
                token = static_logits[:, -1:].argmax(-1)
            sync(device)
        save(prof, out, "graph_replay")


def part_tp(out: Path) -> None:
    """Tensor parallel over the ranks torchrun started (transformers' tp_plan), one trace per rank."""
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    rank = int(os.environ["RANK"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    checkpoint = out / "tp_checkpoint"
    if rank == 0:
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(config(), dtype=torch.bfloat16).save_pretrained(checkpoint)
    dist.barrier()
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.bfloat16, tp_plan="auto").eval()
    ids, mask = prompt("cuda")
    with torch.no_grad():
        generate(model, ids, mask)
        torch.cuda.synchronize()
        dist.barrier()
        with profile(activities=activities("cuda"), record_shapes=True, with_stack=True, with_modules=True) as prof:
            generate(model, ids, mask)
            torch.cuda.synchronize()
    save(prof, out, f"tp2_rank{rank}")
    dist.barrier()
    if rank == 0:
        shutil.rmtree(checkpoint, ignore_errors=True)
    dist.destroy_process_group()


PARTS = {"hf": part_hf, "steps": part_steps, "compile": part_compile, "graph": part_graph}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--part", action="append", choices=[*PARTS, "tp"])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.part == ["tp"]:
        part_tp(args.out)
        return 0
    failed = 0
    for part in args.part or list(PARTS):
        t0 = time.time()
        try:
            PARTS[part](args.out, args.device)
            print(f"part {part}: {time.time() - t0:.1f} s", flush=True)
        except Exception:  # one part failing must not lose the others' traces
            traceback.print_exc()
            print(f"part {part}: FAILED", flush=True)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
