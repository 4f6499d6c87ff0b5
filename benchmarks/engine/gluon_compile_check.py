"""Compile every kernel configuration of the Gluon streaming probe for sm_90a without a GPU, and print what each
compiled to: shared memory (the compiler's figure and the ring + staged-x estimate), registers and spills
(cuobjdump), PTX and cubin size, the TMA box the host descriptor must carry, and how many bulk tensor copies,
mbarrier waits and cp.async copies the PTX holds.

    python benchmarks/engine/gluon_compile_check.py [--quick | --decode] [--json FILE]

--decode: the persistent decode step of gluon_decode_kernels.py (qwen2-1.5b) in each of its configurations.

Runs with triton 3.6 alone (no torch, no GPU). Exit status 1 if a configuration fails to compile or needs more
shared memory than a Hopper block may use.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gluon_configs as gc  # noqa: E402
import gluon_kernels as gk  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)  # what the runtime reports on an H100/H200
POINTERS = {"x_ptr": "*bf16", "y_ptr": "*bf16", "act_ptr": "*bf16", "table_ptr": "*i32", "counter_ptr": "*i32",
            "err_ptr": "*i32", "h_ptr": "*bf16", "qkv_ptr": "*bf16", "gu_ptr": "*bf16", "logits_ptr": "*bf16",
            "po_ptr": "*fp32", "lse_ptr": "*fp32", "kc_ptr": "*bf16", "vc_ptr": "*bf16", "bias_ptr": "*bf16",
            "in_norm_ptr": "*bf16", "post_norm_ptr": "*bf16", "final_norm_ptr": "*bf16", "inv_freq_ptr": "*fp32",
            "pos_ptr": "*i32"}
SCALARS = {"layers": "i32", "max_spins": "i32", "cap": "i32", "eps": "fp32", "scale_log2": "fp32"}


def descriptor_type(cfg: gc.Config) -> str:
    """How the runtime spells a Gluon host TensorDescriptor argument in a kernel signature."""
    return f"tensordesc<bf16[{cfg.bn}, {cfg.bk}],{gc.weight_smem_layout(cfg)!r}>"


def source(fn, cfg: gc.Config, constexprs: dict) -> GluonASTSource:
    """The kernel with the signature a launch from gluon_probe.py would give it: descriptors, 16-byte aligned
    pointers (the runtime's `tt.divisibility` specialisation), 32-bit scalars, constexprs."""
    signature, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in constexprs:
            signature[name] = "constexpr"
        elif name in POINTERS:
            signature[name] = POINTERS[name]
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif name in SCALARS:
            signature[name] = SCALARS[name]
        else:
            signature[name] = descriptor_type(cfg)
    return GluonASTSource(fn, signature, constexprs, attrs)


def cuobjdump() -> Path | None:
    path = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return path if path.exists() else None


def resource_usage(cubin: bytes) -> dict:
    """REG and LOCAL (spill stack) of the kernel from `cuobjdump -res-usage`."""
    tool = cuobjdump()
    if tool is None:
        return {}
    with tempfile.NamedTemporaryFile(suffix=".cubin") as handle:
        handle.write(cubin)
        handle.flush()
        out = subprocess.run([str(tool), "-res-usage", handle.name], capture_output=True, text=True).stdout
    found = dict(re.findall(r"(REG|LOCAL|STACK):(\d+)", out))
    return {"registers": int(found.get("REG", 0)), "local_bytes": int(found.get("LOCAL", 0)),
            "stack_bytes": int(found.get("STACK", 0))}


def compile_one(fn, cfg: gc.Config, constexprs: dict, k: int, estimate: int | None = None) -> dict:
    t0 = time.time()
    kernel = triton.compile(source(fn, cfg, constexprs), target=TARGET, options=gc.launch_options(cfg))
    ptx = kernel.asm["ptx"]
    cubin = kernel.asm["cubin"]
    meta = kernel.metadata
    row = {"compile_s": round(time.time() - t0, 2), "shared_bytes": meta.shared,
           "shared_estimate": estimate or gc.smem_estimate(cfg, k), "num_warps_total": meta.num_warps,
           "ptx_bytes": len(ptx), "cubin_bytes": len(cubin),
           "tma_boxes": [m["block_size"] for m in (getattr(meta, "tensordesc_meta", None) or [])],
           "ptx_tma_copies": ptx.count("cp.async.bulk.tensor"), "ptx_mbarrier_waits": ptx.count("try_wait.parity"),
           "ptx_cp_async": ptx.count("cp.async.cg") + ptx.count("cp.async.ca"),
           "ptx_setmaxnreg": ptx.count("setmaxnreg"), **resource_usage(cubin)}
    row["fits"] = row["shared_bytes"] <= gc.SMEM_LIMIT
    row["box_ok"] = all(box == [cfg.bn, cfg.bk] for box in row["tma_boxes"])
    return row


def targets(cfg: gc.Config) -> list[tuple[str, object, dict, int]]:
    """(label, kernel, constexprs, longest K staged) of every kernel a configuration launches."""
    if cfg.kernel == "chain_ws":
        return [("chain", gk.chain_ws, gc.chain_constexprs(cfg), gc.K_MAX)]
    fn = gk.gemv_ws if cfg.kernel == "gemv_ws" else gk.gemv_pipe
    return [(kind, fn, gc.gemv_constexprs(cfg, kind), gc.SHAPES[kind][1]) for kind in gc.KINDS]


def decode_check(json_path: str | None) -> int:
    """Compile the persistent decode step for qwen2-1.5b in each configuration of gluon_decode_configs.py."""
    import gluon_decode_configs as dc
    import gluon_decode_kernels as dk

    shape, rows, failures = dc.QWEN2_1_5B, [], 0
    print(f"triton {triton.__version__}, target {TARGET}, decode step of {shape}")
    # The first configuration also with the timing probes' ABLATE bits (gluon_decode.py's ABLATIONS).
    variants = [(cfg, 0) for cfg in dc.CONFIGS] + [(dc.CONFIGS[0], bits) for bits in (1, 2, 4, 3, 7)]
    for cfg, ablate in variants:
        try:
            row = compile_one(dk.decode_step, cfg.ring, {**dc.constexprs(cfg, shape), "ABLATE": ablate}, shape.ffn,
                              dc.smem_estimate(cfg, shape))
            ok = row["fits"] and row["box_ok"] and dc.valid(cfg, shape) is None
            failures += not ok
            print(f"{cfg.name + (f'|ablate{ablate}' if ablate else ''):40} smem {row['shared_bytes']} (est {row['shared_estimate']}) regs "
                  f"{row.get('registers')} spill {row.get('local_bytes')} stack {row.get('stack_bytes')} warps "
                  f"{row['num_warps_total']} TMA {row['ptx_tma_copies']} boxes {row['tma_boxes']} setmaxnreg "
                  f"{row['ptx_setmaxnreg']} {row['compile_s']} s" + ("" if ok else "  <-- not ok"), flush=True)
        except Exception as error:  # noqa: BLE001 (reported in full, the other configurations still compile)
            failures += 1
            row = {"error": f"{type(error).__name__}: {error}", "trace": traceback.format_exc()}
            print(f"{cfg.name:40} FAILED\n{row['trace']}", flush=True)
        rows.append({**cfg.record(), **row})
    if json_path:
        Path(json_path).write_text(json.dumps({"triton": triton.__version__, "target": str(TARGET), "rows": rows},
                                              indent=1) + "\n")
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one configuration of each kernel kind")
    parser.add_argument("--decode", action="store_true", help="the persistent decode step instead of the probe")
    parser.add_argument("--json", help="write every row to this file")
    args = parser.parse_args()
    if args.decode:
        return decode_check(args.json)
    configs = gc.all_configs()
    if args.quick:
        seen, picked = set(), []
        for cfg in configs:
            key = (cfg.kernel, cfg.sync, cfg.batch, cfg.mma)
            if key not in seen:
                seen.add(key)
                picked.append(cfg)
        configs = picked
    print(f"triton {triton.__version__}, target {TARGET}, {len(configs)} configurations")
    print(f"{'configuration':52} {'kernel':8} {'smem':>7} {'est':>7} {'regs':>4} {'spill':>5} {'ptx KB':>7} "
          f"{'cubin KB':>8} {'TMA':>4} {'box':>10} {'s':>5}")
    rows, failures = [], 0
    for cfg in configs:
        for label, fn, constexprs, k in targets(cfg):
            try:
                row = compile_one(fn, cfg, constexprs, k)
                ok = row["fits"] and row["box_ok"]
                failures += not ok
                box = "x".join(map(str, row["tma_boxes"][0])) if row["tma_boxes"] else "-"
                print(f"{cfg.name:52} {label:8} {row['shared_bytes']:7d} {row['shared_estimate']:7d} "
                      f"{row.get('registers', -1):4d} {row.get('local_bytes', -1):5d} {row['ptx_bytes'] / 1024:7.0f} "
                      f"{row['cubin_bytes'] / 1024:8.0f} {row['ptx_tma_copies']:4d} {box:>10} {row['compile_s']:5.1f}"
                      + ("" if ok else "  <-- does not fit / wrong box"), flush=True)
            except Exception as error:  # noqa: BLE001 (a failed configuration is reported, the rest still run)
                failures += 1
                row = {"error": f"{type(error).__name__}: {error}", "trace": traceback.format_exc()}
                print(f"{cfg.name:52} {label:8} FAILED\n{row['trace']}", flush=True)  # in full: the log keeps it
            rows.append({**cfg.record(), "target": label, **row})
    print(f"{len(rows) - failures}/{len(rows)} kernels compiled and fit")
    if args.json:
        Path(args.json).write_text(json.dumps({"triton": triton.__version__, "target": str(TARGET), "rows": rows},
                                              indent=1) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
