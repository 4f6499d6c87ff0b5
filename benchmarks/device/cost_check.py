"""Analytic costs against Nsight Compute, per kernel class (docs/roofline.md, "Checked against measurement").

Workloads (random weights, built from configs, bf16; each a prefill and decode steps of HF generate, or a loop):
  dense     a Qwen2-0.5B-shaped model cut to 4 layers, batch 4, prompt 128 (eager: SDPA, RMSNorm, rotary, SiLU)
  moe       a Qwen3-MoE-shaped model, 2 layers, 16 experts, top 4 (transformers' own experts implementation)
  fp8_gemm  torch._scaled_mm, FP8 e4m3, per-tensor and row-wise scales, M = 2048 (prefill) and 16 (decode),
            N = K = 4096; run first (a few seconds under Nsight Compute), so a slow pass never costs it
Each is run twice in child processes: once under torch.profiler (record_shapes) → imported with kernelscope (and
the dense and MoE traces once more without their shapes, given the model's config.json: the `model_config` costs);
once under Nsight Compute, gated on NVTX ranges (the prefill and first decode step; the MoE's prefill only, to keep
the run within its time), with the DRAM byte and FLOP counters and, where the device has them, the L2 sectors the
SMs read and write (lts__t_sectors_srcunit_tex_op_read/write: every byte a kernel moves past its L1, whether the L2
holds it or not). Nsight Compute flushes the caches before each kernel and the L2 writes back: a kernel reads its
inputs from DRAM but its outputs stay in the L2 (DRAM writes ≈ 0 below the L2's size), so analytic bytes (reads +
writes) are checked against the L2 traffic, and DRAM reads are recorded apart. The launches of both are aligned by
kernel name in launch order; per launch and per kernel class (catalog category, cost model, cost source) the
analytic ÷ measured ratios of bytes and FLOPs go to $OUT/cost_check.json, with the checks: bytes within ±15% of the
L2 traffic for memory-bound classes, FLOPs within 1% for GEMMs whose rows fill the tensor cores' tiles (M ≥ 128).

    python3 benchmarks/device/cost_check.py --out DIR              # on the GPU machine (cost_check.sh)
    python3 benchmarks/device/cost_check.py --out DIR --cpu        # the trace and import half on CPU, tiny sizes
    python3 benchmarks/device/cost_check.py --child NAME --mode trace|ncu --dir DIR [--cpu]
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cost_check_analysis import L2_SECTORS, _coverage, _headline, _with_l2, analyse_again, compare  # noqa: E402

NCU = os.environ.get("NCU", "/usr/local/cuda/bin/ncu")
PHASES = {"dense": ("ks.phase:prefill/", "ks.phase:decode:0/"), "moe": ("ks.phase:prefill/",),
          "fp8_gemm": ("ks.phase:prefill/", "ks.phase:decode:0/")}
DEADLINE_S = float(os.environ.get("COST_CHECK_SECONDS", "420"))  # the whole run, all workloads
SHAPE_ARGS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")


def configs(cpu: bool) -> dict[str, dict]:
    dense = dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"], hidden_size=896, intermediate_size=4864,
                 num_hidden_layers=4, num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                 max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=True, torch_dtype="bfloat16")
    moe = dict(model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], hidden_size=1024, intermediate_size=3072,
               moe_intermediate_size=512, num_hidden_layers=2, num_attention_heads=16, num_key_value_heads=4,
               head_dim=64, num_experts=16, num_experts_per_tok=4, decoder_sparse_step=1, norm_topk_prob=True,
               vocab_size=32768, max_position_embeddings=4096, rms_norm_eps=1e-6, torch_dtype="bfloat16")
    if cpu:  # the CPU run checks the plumbing only
        dense.update(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                     num_hidden_layers=2, vocab_size=512)
        moe.update(hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=16, num_experts=4, num_experts_per_tok=2, vocab_size=512)
    return {"dense": dense, "moe": moe}


BATCH, PROMPT, NEW = 4, 128, 3


# ---------------------------------------------------------------- the child: one workload, traced or under ncu
def child(name: str, mode: str, out: Path, cpu: bool) -> None:
    import torch

    device = "cpu" if cpu else "cuda"
    torch.manual_seed(0)
    if name == "fp8_gemm":
        run = _fp8_workload(device, torch)
    else:
        run = _hf_workload(name, configs(cpu)[name], device, out, cpu, torch)
    run(annotate=False)  # warm-up: libraries load, kernels are chosen
    if device == "cuda":
        torch.cuda.synchronize()
    if mode == "ncu":
        run(annotate=True)
        if device == "cuda":
            torch.cuda.synchronize()
        return
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([] if cpu else [ProfilerActivity.CUDA])
    with profile(activities=activities, record_shapes=True) as prof:
        run(annotate=True)
        if device == "cuda":
            torch.cuda.synchronize()
    prof.export_chrome_trace(str(out / "trace.json"))


def _hf_workload(name: str, config: dict, device: str, out: Path, cpu: bool, torch):
    from transformers import AutoConfig, AutoModelForCausalLM

    from kernelscope.workload.annotate import GenerationAnnotator

    cfg = AutoConfig.for_model(**{k: v for k, v in config.items() if k not in ("architectures", "torch_dtype")})
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).eval()
    (out / "config.json").write_text(json.dumps(config, indent=1))
    batch, prompt = (2, 8) if cpu else (BATCH, PROMPT)
    ids = torch.randint(0, config["vocab_size"], (batch, prompt), device=device)

    def run(annotate: bool) -> None:
        kwargs = dict(max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, pad_token_id=0)
        with torch.inference_mode():
            if not annotate:
                model.generate(ids, **kwargs)
                return
            with GenerationAnnotator(model, nvtx=not cpu) as marks:
                marks.begin()
                model.generate(ids, **kwargs)
                marks.end()

    return run


def _fp8_workload(device: str, torch):
    from kernelscope.workload.annotate import RangeStack

    n = k = 4096
    w = torch.randn(n, k, device=device).to(torch.float8_e4m3fn)
    scale = torch.ones((), device=device)
    inputs = {m: torch.randn(m, k, device=device).to(torch.float8_e4m3fn) for m in (2048, 16)}
    row_scales = {m: (torch.ones(m, 1, device=device), torch.ones(1, n, device=device)) for m in inputs}

    def run(annotate: bool) -> None:
        stack = RangeStack(nvtx=annotate and device == "cuda")
        for phase, m in (("ks.phase:prefill", 2048), ("ks.phase:decode:0", 16)):
            if annotate:
                stack.push(phase)
            torch._scaled_mm(inputs[m], w.t(), scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)
            # row-wise scales (one per row of A, one per column of B): cuBLASLt on Hopper and later
            with contextlib.suppress(RuntimeError, ValueError):
                torch._scaled_mm(inputs[m], w.t(), scale_a=row_scales[m][0], scale_b=row_scales[m][1],
                                 out_dtype=torch.bfloat16)
            if annotate:
                stack.pop()

    return run


# ---------------------------------------------------------------- the parent
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--cpu", action="store_true", help="trace and import on CPU (no Nsight Compute)")
    parser.add_argument("--child")
    parser.add_argument("--mode", choices=["trace", "ncu"])
    parser.add_argument("--dir", type=Path)
    parser.add_argument("--workloads", default="fp8_gemm,dense,moe")
    parser.add_argument("--analyse", type=Path, metavar="DIR",
                        help="compare again the runs and Nsight Compute CSVs a device run left in DIR (its results)")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.mode, args.dir, args.cpu)
        return 0
    if args.analyse:
        print(json.dumps(analyse_again(args.analyse), indent=1))
        return 0
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    results: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "commit": os.environ.get("KS_COMMIT"),
                     "cpu": args.cpu, "workloads": {}}
    deadline = time.time() + DEADLINE_S
    for name in args.workloads.split(","):
        if args.cpu and name == "fp8_gemm":
            continue
        started = time.time()
        try:
            results["workloads"][name] = one_workload(name, out / name, args.cpu, deadline)
        except Exception as exc:  # noqa: BLE001 - one workload's failure is recorded, the others still run
            results["workloads"][name] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
        results["workloads"][name]["seconds"] = round(time.time() - started, 1)
        (out / "cost_check.json").write_text(json.dumps(results, indent=1))
    print(json.dumps(_headline(results), indent=1))
    return 0


def _run(cmd: list[str], log: Path, timeout: float) -> None:
    with log.open("a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        # The checkout's sources first, then whatever the caller put on the path (the wheels carried to the device)
        path = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
        done = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout, check=False,
                              env={**os.environ, "PYTHONPATH": path})
    if done.returncode != 0:
        tail = log.read_text().strip().splitlines()[-3:]
        raise RuntimeError(f"{cmd[:4]} exited {done.returncode}: {' | '.join(tail)}")


def one_workload(name: str, work: Path, cpu: bool, deadline: float) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    log = work / "log.txt"
    me = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--dir", str(work)] + (["--cpu"] if cpu else [])
    _run([*me, "--mode", "trace"], log, 300)
    trace = work / "trace.json.gz"
    with (work / "trace.json").open("rb") as src, gzip.open(trace, "wb") as dst:
        dst.write(src.read())
    (work / "trace.json").unlink()
    ks = [sys.executable, "-m", "kernelscope", "-q", "import"]
    _run([*ks, str(trace), "--out", str(work / "run"), "--no-report"], log, 300)
    imports = {"op_shapes": work / "run"}
    if (work / "config.json").exists():
        shapeless = work / "trace.shapeless.json.gz"
        _strip_shapes(trace, shapeless)
        batch, prompt = ("2", "8") if cpu else (str(BATCH), str(PROMPT))
        _run([*ks, str(shapeless), "--model-config", str(work / "config.json"), "--batch-size", batch,
              "--prompt-len", prompt, "--out", str(work / "run-config"), "--no-report"], log, 300)
        imports["model_config"] = work / "run-config"
    result: dict = {"imports": {k: _coverage(v) for k, v in imports.items()}}
    if cpu:
        return result
    rep = work / "ncu.ncu-rep"
    from kernelscope.capture import nsight_compute as nc

    available = nc.available_metrics(NCU)
    metrics = ["gpu__time_duration.sum", *nc.choose_metrics(available),
               *(m for m in L2_SECTORS.values() if m.split(".")[0] in available)]
    left = deadline - time.time()
    if left < 30:
        raise RuntimeError(f"no time left for Nsight Compute ({left:.0f} s)")
    _run([NCU, "--clock-control", "none", "--target-processes", "all", "--nvtx",
          *[a for p in PHASES[name] for a in ("--nvtx-include", p)], "--metrics", ",".join(metrics),
          "--export", str(rep), "--force-overwrite", *me, "--mode", "ncu"], log, left)
    raw = nc.export_csv(NCU, rep, "raw", work / "ncu-raw.csv")
    from kernelscope.load.ncu import read_ncu_csv

    measured = _with_l2(read_ncu_csv(raw))
    for source, run in imports.items():
        result[source] = compare(run, measured)
    return result


def _strip_shapes(src: Path, dst: Path) -> None:
    with gzip.open(src, "rt") as f:
        trace = json.load(f)
    for event in trace["traceEvents"]:
        args = event.get("args")
        if isinstance(args, dict):
            for key in SHAPE_ARGS:
                args.pop(key, None)
    with gzip.open(dst, "wt") as f:
        json.dump(trace, f)



if __name__ == "__main__":
    sys.exit(main())
