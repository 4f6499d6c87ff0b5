"""Every engine kernel compiles for an H100 (sm_90) with the block sizes the launchers pick at qwen2-1.5b shapes
(the decode GEMVs also at K 4,096), without register spills (alignment as a launch at those shapes sees it).
Compiling needs no GPU (Triton ships ptxas); the interpreter tests cannot catch lowering errors, so this runs the
real compiler in a child process (the test session sets TRITON_INTERPRET).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import pytest

# kernel → (module, constexprs, pointer dtypes other than bf16, num_warps, num_stages), at qwen2-1.5b shapes.
KERNELS = {
    "ks_add": ("elementwise", {"BLOCK": 1024}, {}, 4, 3),
    "ks_embedding": ("elementwise", {"BLOCK_D": 1024, "PDL": True}, {"ids_ptr": "*i64"}, 4, 3),
    "ks_swiglu": ("elementwise", {"BLOCK": 1024}, {}, 4, 3),
    "ks_kv_cache_write": ("elementwise", {"BLOCK": 256}, {}, 4, 3),
    "ks_rms_norm": ("norm", {"HAS_RESIDUAL": True, "BLOCK_D": 2048}, {}, 4, 3),
    "ks_rope": ("rope", {"BLOCK_HALF": 64}, {"pos_ptr": "*i64", "inv_freq_ptr": "*fp32"}, 4, 3),
    "ks_qkv_rope_cache": ("rope", {"BLOCK_HEADS": 16, "BLOCK_HALF": 64}, {"pos_ptr": "*i64", "inv_freq_ptr": "*fp32"}, 4, 3),
    "ks_argmax": ("sampling", {"BLOCK_V": 2048, "BLOCK_P": 128, "PDL": True},
                  {"out_ptr": "*i64", "part_val_ptr": "*fp32", "part_idx_ptr": "*i64", "count_ptr": "*i32"}, 4, 3),
    "ks_sample": ("sampling", {"USE_TOP_K": True, "USE_TOP_P": True, "BLOCK_V": 8192},
                  {"noise_ptr": "*fp32", "out_ptr": "*i64"}, 16, 3),
    "ks_gemm": ("gemm", {"HAS_BIAS": True, "IEEE": False, "GROUP_M": 8, "SPLITS": 1, "SWIGLU": False, "BLOCK_M": 128,
                         "BLOCK_N": 128, "BLOCK_K": 64}, {"part_ptr": "*fp32", "count_ptr": "*i32"}, 8, 3),
    "ks_attn_prefill": ("attention", {"HEAD_DIM": 128, "IEEE": False, "BLOCK_M": 64, "BLOCK_N": 64}, {}, 4, 3),
    # decode_plan at qwen2-1.5b, batch 1 (2 KV heads, 6 heads a group): 36 splits, 8 warps, chunks of 16.
    "ks_attn_decode_split": ("attention", {"HKV": 2, "SPLITS": 36, "GRANULE": 64, "IEEE": False, "BLOCK_G": 16,
                                           "BLOCK_S": 64, "BLOCK_D": 128, "BLOCK_H": 8, "BLOCK_C": 16,
                                           "BLOCK_C_MID": 8, "BLOCK_C_SMALL": 4, "PDL": True},
                             {"len_ptr": "*i64", "part_o_ptr": "*fp32", "part_lse_ptr": "*fp32",
                              "count_ptr": "*i32"}, 8, 2),
}
# The decode GEMVs at batch 1 and 8 with the launcher's own block sizes and splits (kernels/linear.py gemv_plan):
# variant → (kernel, kind of GEMV, rows, K, constexprs, pointers). o_proj and down share ks_gemv with different
# tiles (down split six ways on 128-wide tiles, o_proj unsplit on 256-wide ones).
GEMVS = {
    "ks_gemv": ("ks_gemv", "residual", 1536, 8960, {"HAS_BIAS": False, "HAS_RESIDUAL": True}, {}),
    "ks_gemv_o_proj": ("ks_gemv", "residual", 1536, 1536, {"HAS_BIAS": False, "HAS_RESIDUAL": True}, {}),
    "ks_gemv_head": ("ks_gemv_head", "head", 151936, 1536, {}, {}),
    "ks_gemv_gate_up": ("ks_gemv_gate_up", "gate_up", 8960, 1536, {}, {}),
    "ks_gemv_qkv": ("ks_gemv_qkv", "qkv", 1024, 1536, {"HAS_BIAS": True},
                    {"pos_ptr": "*i64", "inv_freq_ptr": "*fp32"}),
    # K 4,096 (llama-3-8b): one token streams 4,096-wide tiles (2 rows a program), q/k/v 4 pairs a program.
    "ks_gemv_k4096": ("ks_gemv", "residual", 4096, 4096, {"HAS_BIAS": False, "HAS_RESIDUAL": True}, {}),
    "ks_gemv_head_k4096": ("ks_gemv_head", "head", 128256, 4096, {}, {}),
    "ks_gemv_gate_up_k4096": ("ks_gemv_gate_up", "gate_up", 14336, 4096, {}, {}),
    "ks_gemv_qkv_k4096": ("ks_gemv_qkv", "qkv", 3072, 4096, {"HAS_BIAS": False},
                          {"pos_ptr": "*i64", "inv_freq_ptr": "*fp32"}),
}
FLOAT_ARGS = {"eps", "scale_log2", "temperature", "top_p"}
# Integer arguments a real launch at these shapes sees as multiples of 16 (Triton specialises on that).
ALIGNED_ARGS = {"K", "N", "D", "F", "V", "n", "row_len", "split_len", "HALF", "CHUNK", "K_SPLIT"}
# Decode kernels launched with programmatic dependent launch: their PTX must wait on the previous grid.
PDL_KERNELS = {"ks_embedding", "ks_argmax", "ks_attn_decode_split", "ks_attn_decode_split@llama",
               *(f"{name}@B{batch}" for name in GEMVS for batch in (1, 8))}


def variants() -> dict[str, tuple[str, str, dict, dict, int, int]]:
    """name → (module, kernel, constexprs, pointer dtypes, num_warps, num_stages)."""
    import torch

    from kernelscope.engine.kernels.linear import gemv_meta, gemv_plan

    found = {name: (module, name, *rest) for name, (module, *rest) in KERNELS.items()}
    module, constexprs, pointers, warps, stages = KERNELS["ks_gemm"]
    found["ks_gemm@split"] = (module, "ks_gemm", {**constexprs, "SPLITS": 6}, pointers, warps, stages)
    found["ks_gemm@swiglu"] = (module, "ks_gemm", {**constexprs, "SWIGLU": True, "HAS_BIAS": False},
                               pointers, warps, stages)
    found["ks_gemm@skinny"] = (module, "ks_gemm", {**constexprs, "SPLITS": 2, "BLOCK_M": 64, "BLOCK_N": 32,
                                                   "BLOCK_K": 128}, pointers, 4, 4)
    # decode_plan at llama-3-8b, batch 1 (8 KV heads, 4 heads a group): 33 splits, 4 warps, chunks of 16.
    module, constexprs, pointers, warps, stages = KERNELS["ks_attn_decode_split"]
    found["ks_attn_decode_split@llama"] = (module, "ks_attn_decode_split",
                                           {**constexprs, "HKV": 8, "SPLITS": 33, "BLOCK_H": 4},
                                           pointers, 4, stages)
    for name, (kernel, kind, rows, k, constexprs, pointers) in GEMVS.items():
        for batch in (1, 8):
            plan = gemv_plan(kind, batch, rows, k, 132)  # the tiles and split count on an H100
            meta = gemv_meta(plan, batch, torch.bfloat16)
            warps, stages = meta.pop("num_warps"), meta.pop("num_stages")
            found[f"{name}@B{batch}"] = ("gemv", kernel, {**constexprs, **meta, "SPLITS": plan.splits, "PDL": True},
                                         {**pointers, "part_ptr": "*fp32", "count_ptr": "*i32"}, warps, stages)
    return found


def compile_all(workdir: str) -> dict[str, dict]:
    """Compile each kernel for sm_90 and read registers and spill stores from ptxas -v."""
    import importlib
    import re

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    report = {}
    for name, (module, kernel_name, constexprs, pointers, warps, stages) in variants().items():
        kernel = getattr(importlib.import_module(f"kernelscope.engine.kernels.{module}"), kernel_name)
        signature, attrs = {}, {}
        for index, arg in enumerate(kernel.arg_names):
            if arg in constexprs:
                signature[arg] = "constexpr"
                continue
            if arg.endswith("_ptr"):
                signature[arg] = pointers.get(arg, "*bf16")
            else:
                signature[arg] = "fp32" if arg in FLOAT_ARGS else "i32"
            if arg.endswith("_ptr") or arg.startswith("stride") or arg in ALIGNED_ARGS:
                attrs[(index,)] = [["tt.divisibility", 16]]
        compiled = triton.compile(ASTSource(kernel, signature, constexprs, attrs),
                                  target=GPUTarget("cuda", 90, 32), options={"num_warps": warps,
                                                                             "num_stages": stages})
        path = os.path.join(workdir, f"{name.replace('@', '_')}.ptx")
        with open(path, "w") as handle:
            handle.write(compiled.asm["ptx"])
        usage = subprocess.run([ptxas, "-v", "--gpu-name", "sm_90a", path, "-o", os.devnull],
                               capture_output=True, text=True).stderr
        regs = re.search(r"Used (\d+) registers", usage)
        spills = re.search(r"(\d+) bytes spill stores", usage)
        ptx = compiled.asm["ptx"]
        report[name] = {"registers": int(regs.group(1)) if regs else None,
                        "spill_stores": int(spills.group(1)) if spills else None,
                        "waits_for_previous_grid": "griddepcontrol.wait" in ptx}
    return report


@pytest.mark.slow
def test_every_kernel_compiles_for_sm90_without_spills(tmp_path):
    pytest.importorskip("triton")
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "cache")
    done = subprocess.run([sys.executable, __file__, str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(KERNELS) <= set(report) and len(report) == len(KERNELS) + 4 + 2 * len(GEMVS)
    spilling = {name: usage for name, usage in report.items() if usage["spill_stores"] != 0}
    assert not spilling, f"kernels using local memory (spills): {spilling}"
    waiting = {name for name, usage in report.items() if usage["waits_for_previous_grid"]}
    assert waiting == PDL_KERNELS



if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        print(json.dumps(compile_all(sys.argv[1] if len(sys.argv) > 1 else scratch)))
