"""What the cost-coverage tests share: the real LLM-inference traces they import (CASES), a fixture that imports
each once per session, and the plain-json reading of the trace files that the hand counts are made from."""

from __future__ import annotations

import gzip
import json
import re
from functools import cache
from pathlib import Path

import polars as pl
import pytest

from kernelscope.cli import main

DATA = Path(__file__).resolve().parents[1] / "data"
TRACELENS = DATA / "public" / "tracelens"
TRIMMED = DATA / "foreign" / "trimmed"
CAPTURED = DATA / "foreign" / "captured"
KINETO = DATA / "kineto"
DEVICE = {"kernel", "gpu_memcpy", "gpu_memset"}
GRAPH_LAUNCH = {"cudaGraphLaunch", "hipGraphLaunch"}

SGLANG_DECODE = TRACELENS / "inference__sglang_decode__sglang_Qwen3-8B_decode.json.gz"
SGLANG_CAPTURE = TRACELENS / "sglang_decode__capture_traces__bs_32_rank0.json.gz"
VLLM_FULL = TRACELENS / "inference__vllm_decode_full__graph_execution.json.gz"
VLLM_FULL_CAPTURE = TRIMMED / "vllm_decode_full__graph_capture_rank_0.json.gz"
VLLM_PIECEWISE = TRACELENS / "inference__vllm_prefilldecode_piecewise__graph_execution.json.gz"
VLLM_PIECEWISE_CAPTURE = TRIMMED / "vllm_prefilldecode_piecewise__graph_capture_rank_0.json.gz"
SGLANG_PREFILL = TRACELENS / "inference__sglang_prefilldecode__sglang_Qwen3-8B_prefilldecode.json.gz"
QWEN = KINETO / "h200-qwen2-0.5b-p16-n4.trace.json.gz"
QWEN_SHAPELESS = KINETO / "h200-qwen2-0.5b-p16-n4.shapeless.trace.json.gz"
QWEN_CONFIG = DATA / "configs" / "qwen2-0.5b" / "config.json"

CASES = {
    "sglang-decode": [SGLANG_DECODE, "--capture", SGLANG_CAPTURE],
    "vllm-decode-full": [VLLM_FULL, "--capture", VLLM_FULL_CAPTURE],
    "vllm-piecewise": [VLLM_PIECEWISE, "--capture", VLLM_PIECEWISE_CAPTURE],
    "sglang-prefill-decode": [SGLANG_PREFILL],
    "hf-generate-stack": [CAPTURED / "hf_generate_stack.json.gz"],
    "hf-generate-plain": [CAPTURED / "hf_generate_plain.json.gz"],
    "hf-profiler-steps": [CAPTURED / "own_loop_profiler_steps.json.gz"],
    "hf-graph-replay": [CAPTURED / "graph_replay.json.gz", "--capture", CAPTURED / "graph_capture.json.gz"],
    "hf-tp2": [CAPTURED / "tp2_rank0.json.gz", CAPTURED / "tp2_rank1.json.gz"],
    "llama-3-8b": [KINETO / "h200-llama-3-8b-p16-n3.trace.json.gz"],
    "qwen2-0.5b": [QWEN],
    "qwen2-1.5b-b8": [KINETO / "h200-qwen2-1.5b-b8-p16-n3.trace.json.gz"],
    "deepseek-v3-moe": [KINETO / "h200-deepseek-v3-p16-n3.trace.json.gz"],
    "deepseek-v3-ep2": [DATA / "multi_gpu" / "deepseek_v3_ep2_rank0.json.gz",
                        DATA / "multi_gpu" / "deepseek_v3_ep2_rank1.json.gz"],
    "qwen3-moe-grouped-gemm": [KINETO / "h200-qwen3moe-2l-b4-p128-n3.trace.json.gz"],
    "shapeless-with-config": [QWEN_SHAPELESS, "--model-config", QWEN_CONFIG, "--batch-size", "1",
                              "--prompt-len", "16"],
}


_MADE: dict[str, Path] = {}  # case → its run, kept for the session: both test modules use the same imports


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    def run(case: str) -> Path:
        if case not in _MADE:
            out = tmp_path_factory.mktemp(case) / "run"
            assert main(["-q", "import", *map(str, CASES[case]), "--out", str(out), "--no-report"]) == 0
            _MADE[case] = out
        return _MADE[case]

    return run



def _kernels(run: Path) -> pl.DataFrame:
    return pl.read_parquet(run / "kernels.parquet")


# ---------------------------------------------------------------- reading the files independently
@cache
def _events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def _ops(events: list[dict]) -> dict[int, list[dict]]:
    by_tid: dict[int, list[dict]] = {}
    for e in events:
        if e.get("cat") == "cpu_op":
            by_tid.setdefault(e["tid"], []).append(e)
    return by_tid


def _innermost(ops: list[dict], ts: float, name: str | None = None) -> dict | None:
    best = None
    for o in ops:
        if o["ts"] <= ts <= o["ts"] + o["dur"] and (name is None or o["name"] == name) and (
                best is None or o["dur"] < best["dur"]):
            best = o
    return best


def _captured_launches(path: Path) -> list[tuple[dict, dict | None]]:
    """The capture trace's launch calls that ran nothing (captured), in order, each with the innermost CPU op
    open at the call on its thread."""
    events = _events(path)
    ran = {e["args"]["correlation"] for e in events if e.get("cat") in DEVICE}
    calls = sorted((e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                    and re.search(r"LaunchKernel|MemsetAsync|MemcpyAsync", e["name"])
                    and e["args"].get("correlation") not in ran), key=lambda e: e["ts"])
    ops = _ops(events)
    return [(c, _innermost(ops.get(c["tid"], []), c["ts"])) for c in calls]


def _first_replay(path: Path) -> tuple[int, list[dict]]:
    """The first graph launch of a replay trace: its correlation id and its kernels in order."""
    events = _events(path)
    launch = min((e for e in events if e["name"] in GRAPH_LAUNCH), key=lambda e: e["ts"])
    kernels = sorted((e for e in events if e.get("cat") in DEVICE
                      and e["args"].get("correlation") == launch["args"]["correlation"]), key=lambda e: e["ts"])
    return launch["args"]["correlation"], kernels


def _pairs(label: str) -> tuple[int, int, float]:
    """(query tokens, key/value tokens, causal query-key pairs) of a step from its execute annotation: per part
    (context, generation) sq = Σ query tokens, sk = Σ key tokens, sqsq = Σ sq², sqsk = Σ sq·sk; a sequence of sq
    queries ending its sk keys computes sq·sk − sq(sq − 1)/2 pairs."""
    parts = re.findall(r"\(sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)\)", label)
    assert len(parts) == 2, label
    q = sum(int(p[0]) for p in parts)
    kv = sum(int(p[1]) for p in parts)
    pairs = sum(int(p[3]) - (int(p[2]) - int(p[0])) / 2 for p in parts)
    return q, kv, pairs


def _annotation(path: Path) -> str:
    return next(e["name"] for e in _events(path) if e.get("cat") == "user_annotation"
                and e["name"].startswith("execute_"))


ELEMENT = {"c10::BFloat16": 2, "c10::Half": 2, "float": 4, "unsigned char": 1, "long int": 8, "int": 4}


def _size(dims: list[int], dtype: str) -> int:
    n = ELEMENT[dtype]
    for d in dims:
        n *= d
    return n
