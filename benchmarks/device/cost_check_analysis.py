"""The analysis half of benchmarks/device/cost_check.py: a device run's launches matched to Nsight Compute's, and
analytic ÷ measured per launch and per kernel class (docs/roofline.md, "Checked against measurement").

Measured bytes: DRAM reads and writes (dram__bytes_read/write.sum) and, where collected, the L2 sectors the SMs read
and write. Nsight Compute flushes the caches before each kernel and the L2 writes back, so a kernel's outputs smaller
than the L2 are not in its DRAM bytes: for pointwise and copy ops the analytic bytes are also split into the output
(the broadcast shape of the op's tensor inputs at the first input's element size, as the pointwise model counts it)
and the reads (the rest), and the reads are compared with DRAM reads.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from pathlib import Path

MEMORY_CLASSES = {"norm", "activation", "elementwise", "copy/cast", "rope", "index/gather/scatter", "concat",
                  "reduction", "softmax", "quantization", "GEMV"}
# L2 sectors (32 bytes) the SMs' L1/TEX units read and write: what a kernel moves beyond its L1
L2_SECTORS = {"l2_read_bytes": "lts__t_sectors_srcunit_tex_op_read.sum",
              "l2_write_bytes": "lts__t_sectors_srcunit_tex_op_write.sum"}
_OUTPUT_MODELS = {"pointwise", "copy"}


def _with_l2(tables):
    """Measured launches with their DRAM reads and writes apart and the L2 traffic from the SMs (bytes; null where
    the run did not collect it)."""
    import polars as pl

    wanted = {"dram__bytes_read.sum": "dram_read_bytes", "dram__bytes_write.sum": "dram_write_bytes",
              **{m: c for c, m in L2_SECTORS.items()}}
    long = tables.metrics.filter(pl.col("metric").is_in(list(wanted)))
    wide = (long.with_columns(pl.col("metric").replace_strict(wanted).alias("column"),
                              pl.when(pl.col("metric").str.starts_with("lts__t_sectors")).then(32.0 * pl.col("value"))
                              .otherwise(pl.col("value")).alias("value"))
            .pivot(on="column", index="launch", values="value", aggregate_function="first"))
    out = tables.launches.join(wide, on="launch", how="left")
    for column in ("dram_read_bytes", "dram_write_bytes", *L2_SECTORS):
        if column not in out.columns:
            out = out.with_columns(pl.lit(None, dtype=pl.Float64).alias(column))
    return out.sort("launch")



def _coverage(run: Path) -> dict:
    summary = json.loads((run / "summary.json").read_text())
    return {"cost_coverage": summary.get("cost_coverage"), "by_source": summary.get("cost_coverage_by_source")}



def _output_bytes(model: str | None, dims_text: str | None, types_text: str | None) -> float | None:
    """A pointwise or copy op's output bytes from its recorded inputs: the broadcast shape of its tensor inputs at the
    first input's element size (None for other models or unreadable shapes)."""
    from kernelscope.analyze.costs.op_inputs import DTYPE_BYTES

    if model not in _OUTPUT_MODELS or not dims_text or not types_text:
        return None
    try:
        dims, types = json.loads(dims_text), json.loads(types_text)
    except ValueError:
        return None
    tensors = [d for d in dims if isinstance(d, list) and d and all(isinstance(x, int) for x in d)]
    elem = DTYPE_BYTES.get(types[0]) if types else None
    if not tensors or not dims or dims[0] not in tensors or elem is None:
        return None
    rank = max(len(t) for t in tensors)
    shape = [max(col) for col in zip(*[[1] * (rank - len(t)) + t for t in tensors], strict=True)]
    return float(math.prod(shape) * elem)


def compare(run: Path, measured) -> dict:
    """Per measured launch matched to the run's launch of the same kernel (by name, in launch order over the
    prefill and first decode step), analytic ÷ measured; then per class."""
    import polars as pl

    from kernelscope.analyze.costs.catalog import normalize

    kernels = (pl.read_parquet(run / "kernels.parquet")
               .filter((pl.col("kind") == "kernel") & ((pl.col("phase") == "prefill")
                                                      | ((pl.col("phase") == "decode") & (pl.col("step") == 0))))
               .sort("start_ns"))
    shapes = pl.read_parquet(run / "ops.parquet").select(
        pl.col("op_id").alias("cost_op_id"), pl.col("name").alias("op_name"), pl.col("input_dims").cast(pl.String),
        pl.col("input_types").cast(pl.String))
    kernels = kernels.join(shapes, on="cost_op_id", how="left", maintain_order="left")
    config = json.loads((run / "run.json").read_text()).get("model", {}).get("config") or {}
    experts = config.get("num_experts") or config.get("n_routed_experts") or config.get("num_local_experts")
    ours = [_base_name(normalize(n)) for n in kernels["name"].to_list()]
    theirs = [_base_name(normalize(n)) for n in measured["kernel_name"].to_list()]
    blocks = difflib.SequenceMatcher(None, ours, theirs, autojunk=False).get_matching_blocks()
    pairs = [(b.a + j, b.b + j) for b in blocks for j in range(b.size)]
    rows = []
    for i, j in pairs:
        k, m = kernels.row(i, named=True), measured.row(j, named=True)
        output = _output_bytes(k["cost_model"], k["input_dims"], k["input_types"])
        rows.append({
            "name": k["name"][:160], "category": k["category"], "cost_model": k["cost_model"],
            "cost_source": k["cost_source"], "phase": k["phase"], "gemm": [k["gemm_m"], k["gemm_n"], k["gemm_k"]],
            "analytic_bytes": k["bytes_moved"], "measured_bytes": m.get("dram_bytes"),
            "analytic_read_bytes": None if output is None or k["bytes_moved"] is None else k["bytes_moved"] - output,
            "dram_read_bytes": m.get("dram_read_bytes"), "dram_write_bytes": m.get("dram_write_bytes"),
            "l2_bytes": None if m.get("l2_read_bytes") is None else m["l2_read_bytes"] + (m.get("l2_write_bytes") or 0),
            "analytic_flops": k["flops"], "measured_flops": m.get("flops"), "duration_us": m.get("duration_us"),
            "op": k["op_name"], "l2_read_bytes": m.get("l2_read_bytes"), "l2_write_bytes": m.get("l2_write_bytes"),
            "tensor_flops": m.get("flops_tensor"),
            "cuda_core_flops": sum(m.get(f"flops_{p}") or 0 for p in ("fp32", "fp16", "fp64")),
            **_gemm_padding(k, m, experts),
        })
    return {"kernels_in_run": len(ours), "launches_measured": len(theirs), "matched": len(pairs),
            "classes": _classes(rows), "checks": _checks(rows), "launches": rows}


def _gemm_padding(k: dict, m: dict, experts: int | None) -> dict:
    """For a GEMM launch on the tensor cores: the whole-tile FLOPs its kernel's tile implies (cost_check_tiles.py),
    and for a grouped GEMM whether the measured count is whole tiles of rows (groups: the stacked weights' leading
    dimension, else the model config's experts)."""
    from cost_check_tiles import grouped_padding, nvjet_tile_flops

    shape = (k["gemm_m"], k["gemm_n"], k["gemm_k"])
    if k["category"] != "GEMM" or None in shape or not m.get("flops_tensor"):
        return {}
    name = m["kernel_name"]
    grid = (int(m["grid_x"] or 1), int(m["grid_y"] or 1), int(m["grid_z"] or 1))
    out: dict = {"grid": list(grid), "tile_flops": nvjet_tile_flops(name, *shape, grid)}
    grouped = grouped_padding(name, *shape, _groups(k["input_dims"]) or experts, m["flops_tensor"])
    if grouped is not None:
        out["grouped"] = grouped
    return out


def _groups(dims_text: str | None) -> int | None:
    """A grouped GEMM's groups: the leading dimension of its stacked (3-d) weights."""
    try:
        dims = json.loads(dims_text or "")
    except ValueError:
        return None
    stacked = [d for d in dims if isinstance(d, list) and len(d) == 3]
    return stacked[0][0] if stacked else None


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
        measured = _with_l2(read_ncu_csv(work / "ncu-raw.csv"))
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
    l2 = [r for r in rows if r.get("l2_bytes")]
    tensor = [r for r in rows if r.get("tensor_flops")]
    return {"launches": len(rows), "bytes_ratio": _ratio(total("analytic_bytes"), total("measured_bytes")),
            "bytes_ratio_l2": _ratio(sum(r["analytic_bytes"] or 0 for r in l2), sum(r["l2_bytes"] for r in l2)),
            "dram_write_share": _ratio(total("dram_write_bytes"), total("measured_bytes")),
            "flops_ratio": _ratio(total("analytic_flops"), total("measured_flops")),
            "flops_ratio_tensor": _ratio(sum(r["analytic_flops"] or 0 for r in tensor), total("tensor_flops")),
            "bytes_ratio_min": per[0] if per else None, "bytes_ratio_median": per[len(per) // 2] if per else None,
            "bytes_ratio_max": per[-1] if per else None}


def _checks(rows: list[dict]) -> dict:
    memory = [r for r in rows if r["category"] in MEMORY_CLASSES and r["analytic_bytes"] and r["measured_bytes"]
              and r["measured_bytes"] > 1 << 20]  # a megabyte at least: smaller ones live in L2
    within = [r for r in memory if abs(r["analytic_bytes"] / r["measured_bytes"] - 1) <= 0.15]
    l2 = [r for r in memory if r.get("l2_bytes")]
    within_l2 = [r for r in l2 if abs(r["analytic_bytes"] / r["l2_bytes"] - 1) <= 0.15]
    reads = [r for r in rows if r.get("analytic_read_bytes") and (r.get("dram_read_bytes") or 0) > 1 << 20]
    reads_within = [r for r in reads if abs(r["analytic_read_bytes"] / r["dram_read_bytes"] - 1) <= 0.15]
    gemms = [r for r in rows if r["category"] == "GEMM" and r["gemm"][0] and r["gemm"][0] >= 128
             and r["analytic_flops"] and r["measured_flops"]]
    exact = [r for r in gemms if abs(r["analytic_flops"] / r["measured_flops"] - 1) <= 0.01]
    return {**_gemm_checks(rows), "memory_bound_launches": len(memory), "bytes_within_15pct": len(within),
            "with_l2_traffic": len(l2), "bytes_within_15pct_of_l2": len(within_l2),
            "pointwise_copy_reading_1mb": len(reads), "reads_within_15pct_of_dram_reads": len(reads_within),
            "analytic_reads_over_dram_reads": _ratio(sum(r["analytic_read_bytes"] for r in reads),
                                                     sum(r["dram_read_bytes"] for r in reads)),
            "full_tile_gemm_launches": len(gemms), "flops_within_1pct": len(exact)}


def _near(a: float | None, b: float | None, within: float = 0.01) -> bool:
    return bool(a) and bool(b) and abs(a / b - 1) <= within


def _gemm_checks(rows: list[dict]) -> dict:
    """GEMM FLOPs against the tensor pipes' count: exact where the problem fills its kernel's tiles; elsewhere the
    count must be the whole tiles the kernel's tile implies (nvjet), or whole tiles of rows within the groups'
    bounds (grouped GEMMs); what neither explains is listed."""
    gemms = [r for r in rows if r["category"] == "GEMM" and r["analytic_flops"] and r.get("tensor_flops")]
    filling = [r for r in gemms
               if r.get("tile_flops") is not None and _near(r["tile_flops"], r["analytic_flops"], 1e-9)]
    padded = [r for r in gemms if r.get("tile_flops") is not None and r not in filling]
    grouped = [r for r in gemms if r.get("grouped")]
    explained = ([r for r in filling if _near(r["analytic_flops"], r["tensor_flops"])]
                 + [r for r in padded if _near(r["tile_flops"], r["tensor_flops"])]
                 + [r for r in grouped if r["grouped"]["whole_tiles_within_bounds"]])
    other = [r for r in gemms if r.get("tile_flops") is None and not r.get("grouped")]
    unexplained = [r for r in gemms if r not in explained and r not in other]
    return {"tensor_gemm_launches": len(gemms), "filling_tiles": len(filling),
            "filling_tiles_exact": sum(_near(r["analytic_flops"], r["tensor_flops"]) for r in filling),
            "padded_to_tiles": len(padded),
            "padded_count_exact": sum(_near(r["tile_flops"], r["tensor_flops"]) for r in padded),
            "grouped": len(grouped),
            "grouped_whole_tiles": sum(r["grouped"]["whole_tiles_within_bounds"] for r in grouped),
            "other_tile_unknown": len(other),
            "other_within_1pct": sum(_near(r["analytic_flops"], r["tensor_flops"]) for r in other),
            "unexplained": [f"{r['name'][:60]} {r['gemm']}" for r in unexplained]}


def _headline(results: dict) -> dict:
    out = {}
    for name, w in results["workloads"].items():
        out[name] = {"error": w["error"]} if "error" in w else {
            "coverage": {k: v["cost_coverage"] for k, v in w.get("imports", {}).items()},
            **{src: w[src]["checks"] for src in ("op_shapes", "model_config") if src in w}}
    return out

