"""Analytic costs against Nsight Compute, per kernel class (docs/roofline.md, "Checked against measurement").

Workloads (random weights, built from configs, bf16; each a prefill and decode steps of HF generate, or a loop):
  dense     a Qwen2-0.5B-shaped model cut to 4 layers, batch 4, prompt 128 (eager: SDPA, RMSNorm, rotary, SiLU)
  moe       a Qwen3-MoE-shaped model, 2 layers, 16 experts, top 4 (transformers' own experts implementation)
  fp8_gemm  torch._scaled_mm, FP8 e4m3 with per-tensor scales, M = 4096 (prefill) and 16 (decode), N = K = 4096
Each is run twice in child processes: once under torch.profiler (record_shapes) → imported with kernelscope (and
the dense and MoE traces once more without their shapes, given the model's config.json: the `model_config` costs);
once under Nsight Compute, gated on the prefill and first decode step's NVTX ranges, with the DRAM byte and FLOP
counters. The launches of both are aligned by kernel name in launch order; per launch and per kernel class
(catalog category, cost model, cost source) the analytic ÷ measured ratios of bytes and FLOPs go to
$OUT/cost_check.json, with the checks: bytes within ±15% for memory-bound classes, FLOPs within 1% for GEMMs whose
rows fill the tensor cores' tiles (M ≥ 128).

    python3 benchmarks/device/cost_check.py --out DIR              # on the GPU machine (cost_check.sh)
    python3 benchmarks/device/cost_check.py --out DIR --cpu        # the trace and import half on CPU, tiny sizes
    python3 benchmarks/device/cost_check.py --child NAME --mode trace|ncu --dir DIR [--cpu]
"""

from __future__ import annotations

import argparse
import difflib
import gzip
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
NCU = os.environ.get("NCU", "/usr/local/cuda/bin/ncu")
PHASES = ("ks.phase:prefill/", "ks.phase:decode:0/")
SHAPE_ARGS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")
MEMORY_CLASSES = {"norm", "activation", "elementwise", "copy/cast", "rope", "index/gather/scatter", "concat",
                  "reduction", "softmax", "quantization", "GEMV"}


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
    inputs = {m: torch.randn(m, k, device=device).to(torch.float8_e4m3fn) for m in (4096, 16)}

    def run(annotate: bool) -> None:
        stack = RangeStack(nvtx=annotate and device == "cuda")
        for phase, m in (("ks.phase:prefill", 4096), ("ks.phase:decode:0", 16)):
            if annotate:
                stack.push(phase)
            torch._scaled_mm(inputs[m], w.t(), scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)
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
    parser.add_argument("--workloads", default="dense,moe,fp8_gemm")
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
    for name in args.workloads.split(","):
        if args.cpu and name == "fp8_gemm":
            continue
        started = time.time()
        try:
            results["workloads"][name] = one_workload(name, out / name, args.cpu)
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


def one_workload(name: str, work: Path, cpu: bool) -> dict:
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

    metrics = ["gpu__time_duration.sum", *nc.choose_metrics(nc.available_metrics(NCU))]
    _run([NCU, "--clock-control", "none", "--target-processes", "all", "--nvtx",
          *[a for p in PHASES for a in ("--nvtx-include", p)], "--metrics", ",".join(metrics),
          "--export", str(rep), "--force-overwrite", *me, "--mode", "ncu"], log, 420)
    raw = nc.export_csv(NCU, rep, "raw", work / "ncu-raw.csv")
    from kernelscope.load.ncu import read_ncu_csv

    measured = read_ncu_csv(raw).launches.sort("launch")
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


def _coverage(run: Path) -> dict:
    summary = json.loads((run / "summary.json").read_text())
    return {"cost_coverage": summary.get("cost_coverage"), "by_source": summary.get("cost_coverage_by_source")}


def compare(run: Path, measured) -> dict:
    """Per measured launch matched to the run's launch of the same kernel (by name, in launch order over the
    prefill and first decode step), analytic ÷ measured; then per class."""
    import polars as pl

    from kernelscope.analyze.costs.kernel_spelling import normalize

    kernels = (pl.read_parquet(run / "kernels.parquet")
               .filter((pl.col("kind") == "kernel") & ((pl.col("phase") == "prefill")
                                                      | ((pl.col("phase") == "decode") & (pl.col("step") == 0))))
               .sort("start_ns"))
    ours = [_base_name(normalize(n)) for n in kernels["name"].to_list()]
    theirs = [_base_name(normalize(n)) for n in measured["kernel_name"].to_list()]
    blocks = difflib.SequenceMatcher(None, ours, theirs, autojunk=False).get_matching_blocks()
    pairs = [(b.a + j, b.b + j) for b in blocks for j in range(b.size)]
    rows = []
    for i, j in pairs:
        k, m = kernels.row(i, named=True), measured.row(j, named=True)
        rows.append({
            "name": k["name"][:160], "category": k["category"], "cost_model": k["cost_model"],
            "cost_source": k["cost_source"], "phase": k["phase"], "gemm": [k["gemm_m"], k["gemm_n"], k["gemm_k"]],
            "analytic_bytes": k["bytes_moved"], "measured_bytes": m.get("dram_bytes"),
            "analytic_flops": k["flops"], "measured_flops": m.get("flops"), "duration_us": m.get("duration_us"),
        })
    return {"kernels_in_run": len(ours), "launches_measured": len(theirs), "matched": len(pairs),
            "classes": _classes(rows), "checks": _checks(rows), "launches": rows}


def _base_name(name: str) -> str:
    """The kernel's function name without namespaces, template arguments or parameters: Nsight Compute spells
    ATen's kernels without `native::` (and CUTLASS's with other template text) where the profiler keeps them."""
    head = re.split(r"[<(]", name, maxsplit=1)[0].strip()
    return head.rsplit("::", 1)[-1].removeprefix("void ").strip()


def analyse_again(folder: Path) -> dict:
    """The comparison of a device run redone from what it left (the runs and the Nsight Compute raw CSVs)."""
    from kernelscope.load.ncu import read_ncu_csv

    results: dict = {}
    for work in sorted(p for p in folder.iterdir() if (p / "ncu-raw.csv").is_file()):
        measured = read_ncu_csv(work / "ncu-raw.csv").launches.sort("launch")
        results[work.name] = {"imports": {k: _coverage(work / d) for k, d in (("op_shapes", "run"),
                                                                             ("model_config", "run-config"))
                                          if (work / d).is_dir()}}
        for source, run in (("op_shapes", work / "run"), ("model_config", work / "run-config")):
            if run.is_dir():
                results[work.name][source] = compare(run, measured)
    return {"workloads": results, "headline": _headline({"workloads": results})}


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def _classes(rows: list[dict]) -> dict:
    out: dict = {}
    for key in ("category", "cost_model", "cost_source"):
        groups: dict = {}
        for r in rows:
            groups.setdefault(str(r[key]), []).append(r)
        out[key] = {g: _summary(rs) for g, rs in sorted(groups.items())}
    return out


def _summary(rows: list[dict]) -> dict:
    def total(field: str) -> float:
        return sum(r[field] or 0 for r in rows)

    per = sorted(x for r in rows if (x := _ratio(r["analytic_bytes"], r["measured_bytes"])) is not None)
    return {"launches": len(rows), "bytes_ratio": _ratio(total("analytic_bytes"), total("measured_bytes")),
            "flops_ratio": _ratio(total("analytic_flops"), total("measured_flops")),
            "bytes_ratio_min": per[0] if per else None, "bytes_ratio_median": per[len(per) // 2] if per else None,
            "bytes_ratio_max": per[-1] if per else None}


def _checks(rows: list[dict]) -> dict:
    memory = [r for r in rows if r["category"] in MEMORY_CLASSES and r["analytic_bytes"] and r["measured_bytes"]
              and r["measured_bytes"] > 1 << 20]  # a megabyte at least: smaller ones live in L2
    within = [r for r in memory if abs(r["analytic_bytes"] / r["measured_bytes"] - 1) <= 0.15]
    gemms = [r for r in rows if r["category"] == "GEMM" and r["gemm"][0] and r["gemm"][0] >= 128
             and r["analytic_flops"] and r["measured_flops"]]
    exact = [r for r in gemms if abs(r["analytic_flops"] / r["measured_flops"] - 1) <= 0.01]
    return {"memory_bound_launches": len(memory), "bytes_within_15pct": len(within),
            "full_tile_gemm_launches": len(gemms), "flops_within_1pct": len(exact)}


def _headline(results: dict) -> dict:
    out = {}
    for name, w in results["workloads"].items():
        out[name] = {"error": w["error"]} if "error" in w else {
            "coverage": {k: v["cost_coverage"] for k, v in w.get("imports", {}).items()},
            **{src: w[src]["checks"] for src in ("op_shapes", "model_config") if src in w}}
    return out


if __name__ == "__main__":
    sys.exit(main())
