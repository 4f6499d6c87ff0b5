"""Cost coverage of LLM-inference traces: the share of device time with analytic FLOPs and bytes, per cost source.

The committed traces (public serving windows with their capture traces, our own HF and kernelscope captures, one
without its shapes given the model's config) and, with --corpus, the public corpus's other LLM-inference traces.
Each is imported with `kernelscope import --no-report` (a model of the catalog recognised from the trace costs it
where no --model-config is given); summary.json gives the figures and the model recognised. Where one was, the
trace is imported again with --no-model-recognition and that coverage is recorded beside
(`without_recognition`).

    python benchmarks/cost_coverage.py [--corpus /work/corpus] [--out benchmarks/results/cost-coverage-DATE.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from _provenance import commit  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
T = ROOT / "tests" / "data"
CASES: dict[str, list[str]] = {
    "sglang decode + capture": [f"{T}/public/tracelens/inference__sglang_decode__sglang_Qwen3-8B_decode.json.gz",
                                "--capture", f"{T}/public/tracelens/sglang_decode__capture_traces__bs_32_rank0.json.gz"],
    "vllm decode, full graphs + capture": [
        f"{T}/public/tracelens/inference__vllm_decode_full__graph_execution.json.gz",
        "--capture", f"{T}/foreign/trimmed/vllm_decode_full__graph_capture_rank_0.json.gz"],
    "vllm prefill+decode, piecewise + capture": [
        f"{T}/public/tracelens/inference__vllm_prefilldecode_piecewise__graph_execution.json.gz",
        "--capture", f"{T}/foreign/trimmed/vllm_prefilldecode_piecewise__graph_capture_rank_0.json.gz"],
    "sglang prefill+decode": [f"{T}/public/tracelens/inference__sglang_prefilldecode__sglang_Qwen3-8B_prefilldecode.json.gz"],
    "vllm B200 eager, TP (gpt-oss MoE)": [f"{T}/public/tracelens/traces__b200__eager_trace.json.gz",
                                          "--no-model-recognition"],
    "vllm B200 eager, TP (gpt-oss MoE), model recognised from the trace": [
        f"{T}/public/tracelens/traces__b200__eager_trace.json.gz"],
    "vllm B200 eager, TP (gpt-oss MoE) + --model-config": [
        f"{T}/public/tracelens/traces__b200__eager_trace.json.gz", "--model-config",
        f"{T}/configs/gpt-oss-120b/config.json"],
    "HF generate, stacks": [f"{T}/foreign/captured/hf_generate_stack.json.gz"],
    "HF generate, plain": [f"{T}/foreign/captured/hf_generate_plain.json.gz"],
    "HF generate, compiled (replays, no capture)": [f"{T}/foreign/captured/hf_generate_compiled.json.gz"],
    "HF generate, compiled (replays, no capture) + --model-config": [
        f"{T}/foreign/captured/hf_generate_compiled.json.gz", "--model-config",
        f"{T}/configs/qwen2-0.5b-4l/config.json", "--batch-size", "2", "--prompt-len", "64"],
    "HF profiler-step loop": [f"{T}/foreign/captured/own_loop_profiler_steps.json.gz"],
    "HF graph replay + capture": [f"{T}/foreign/captured/graph_replay.json.gz", "--capture",
                                  f"{T}/foreign/captured/graph_capture.json.gz"],
    "HF tensor parallel, 2 ranks": [f"{T}/foreign/captured/tp2_rank0.json.gz", f"{T}/foreign/captured/tp2_rank1.json.gz"],
    "kernelscope H200 Llama-3-8B": [f"{T}/kineto/h200-llama-3-8b-p16-n3.trace.json.gz"],
    "kernelscope H200 Qwen2-0.5B": [f"{T}/kineto/h200-qwen2-0.5b-p16-n4.trace.json.gz"],
    "kernelscope H100 Qwen2-0.5B": [f"{T}/kineto/h100-qwen2-0.5b-p16-n4.trace.json.gz"],
    "kernelscope H200 Qwen2-1.5B batch 8": [f"{T}/kineto/h200-qwen2-1.5b-b8-p16-n3.trace.json.gz"],
    "kernelscope H200 DeepSeek-V3 (MoE)": [f"{T}/kineto/h200-deepseek-v3-p16-n3.trace.json.gz"],
    "kernelscope DeepSeek-V3, expert parallel 2 ranks": [f"{T}/multi_gpu/deepseek_v3_ep2_rank0.json.gz",
                                                          f"{T}/multi_gpu/deepseek_v3_ep2_rank1.json.gz"],
    "TraceLens MI300X Qwen1.5-0.5B (HF)": [f"{T}/public/tracelens/traces__mi300__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"],
    "torch.compile (Inductor Triton)": [f"{T}/public/tracelens/traces__torch_compile_triton__trace.json.gz"],
    "Qwen2-0.5B without shapes": [f"{T}/kineto/h200-qwen2-0.5b-p16-n4.shapeless.trace.json.gz"],
    "Qwen2-0.5B without shapes + --model-config": [
        f"{T}/kineto/h200-qwen2-0.5b-p16-n4.shapeless.trace.json.gz", "--model-config",
        f"{T}/configs/qwen2-0.5b/config.json", "--batch-size", "1", "--prompt-len", "16"],
    "4-layer Llama forward, DTensor over 2 GPUs, shapes (tokenomics)": [
        f"{T}/public/tokenomics/traces__llama_trace_4layers0_dim_1024.json.gz"],
    "4-layer Llama, FSDP, no shapes (tokenomics)": [f"{T}/public/tokenomics/llama_trace_4layers0_with_annotations.json.gz"],
}
CORPUS = {  # corpus path → label (benchmarks/corpus/manifest.toml)
    "tracelens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz": "TraceLens H100 Qwen1.5-0.5B (HF)",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from kernelscope.cli import main as kernelscope

    cases = dict(CASES)
    if args.corpus:
        cases.update({label: [str(args.corpus / path)] for path, label in CORPUS.items()
                      if (args.corpus / path).exists()})
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, argv) in enumerate(cases.items()):
            out = Path(tmp) / str(i)
            started = time.perf_counter()
            code = kernelscope(["-q", "import", *argv, "--out", str(out), "--no-report"])
            summary = json.loads((out / "summary.json").read_text()) if code == 0 else {}
            results[label] = {"cost_coverage": summary.get("cost_coverage"),
                              "by_source": {k: v for k, v in (summary.get("cost_coverage_by_source") or {}).items() if v},
                              "seconds": round(time.perf_counter() - started, 2), "exit": code}
            recognised = summary.get("recognised_model")
            if recognised:
                plain = Path(tmp) / f"{i}-plain"
                kernelscope(["-q", "import", *argv, "--no-model-recognition", "--out", str(plain), "--no-report"])
                results[label] |= {"recognised_model": recognised, "without_recognition": json.loads(
                    (plain / "summary.json").read_text()).get("cost_coverage")}
            print(f"{label:55s} {100 * (summary.get('cost_coverage') or 0):6.2f}% {recognised or ''}", flush=True)
    record = {"date": time.strftime("%Y-%m-%d"), "commit": commit(), "traces": results}
    if args.out:
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
