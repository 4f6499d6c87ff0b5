"""How well kernels without a launch record are costed from the kernel sequence (analyze/costs/sequence_estimates.py).

On traces whose every kernel has its launch record and a cost, the first 30% of the kernels (by start) lose their
launch record and cost, as a trace that began recording its kernels before its CPU side would; the sequence
estimate costs them again and is compared with the cost they had: the share of their device time it costs, the
share whose bytes it gives exactly, and its total bytes and FLOPs over the true ones.

    python benchmarks/sequence_estimate_holdout.py [--corpus /work/corpus] [--out benchmarks/results/...json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from _provenance import commit  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
T = ROOT / "tests" / "data"
TRACES = {
    "kernelscope H200 Llama-3-8B": T / "kineto" / "h200-llama-3-8b-p16-n3.trace.json.gz",
    "kernelscope H200 Qwen2-0.5B": T / "kineto" / "h200-qwen2-0.5b-p16-n4.trace.json.gz",
    "kernelscope H200 DeepSeek-V3 (MoE)": T / "kineto" / "h200-deepseek-v3-p16-n3.trace.json.gz",
    "HF generate, plain": T / "foreign" / "captured" / "hf_generate_plain.json.gz",
}
CORPUS = {"TraceLens H100 Qwen1.5-0.5B (HF)": "tracelens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"}
HIDDEN = 0.3


def holdout(path: Path) -> dict:
    import polars as pl

    from kernelscope.analyze.attribution.attribution import attribute
    from kernelscope.analyze.costs.kernel_costs import kernel_costs
    from kernelscope.analyze.costs.sequence_estimates import estimated_from_sequence
    from kernelscope.load.sources import read_trace

    kernels, ops = attribute(read_trace(path))
    costed = kernel_costs(kernels, ops).sort("start_ns")
    launches = costed.filter(pl.col("kind") == "kernel")
    cut = launches["start_ns"][int(launches.height * HIDDEN)]
    costed = costed.with_columns(((pl.col("kind") == "kernel") & (pl.col("start_ns") < cut)
                                  & pl.col("bytes_moved").is_not_null()).alias("_hidden"))
    hide = pl.col("_hidden")
    columns = ["grid_x", "cost_model", "flops", "bytes_moved", "cost_source"]
    masked = costed.with_columns(*(pl.when(hide).then(None).otherwise(pl.col(c)).alias(c) for c in columns))
    truth = costed.filter(hide).select("kernel_id", pl.col("flops").alias("true_flops"),
                                       pl.col("bytes_moved").alias("true_bytes"))
    again = estimated_from_sequence(masked).filter(hide).join(truth, on="kernel_id")
    got = again.filter(pl.col("bytes_moved").is_not_null())
    exact = got.filter((pl.col("bytes_moved") - pl.col("true_bytes")).abs() <= 1e-9 * pl.col("true_bytes").abs())
    time_all, time_got = again["dur_ns"].sum(), got["dur_ns"].sum()
    true_flops = got["true_flops"].fill_null(0).sum()
    return {"hidden_launches": again.height, "estimated_launches": got.height,
            "estimated_time_share": time_got / time_all if time_all else None,
            "exact_bytes_time_share": exact["dur_ns"].sum() / time_got if time_got else None,
            "bytes_estimated_over_true": got["bytes_moved"].sum() / got["true_bytes"].sum() if got.height else None,
            "flops_estimated_over_true": got["flops"].fill_null(0).sum() / true_flops if true_flops else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    traces = dict(TRACES)
    if args.corpus:
        traces.update({label: args.corpus / p for label, p in CORPUS.items() if (args.corpus / p).exists()})
    results = {}
    for label, path in traces.items():
        results[label] = holdout(path)
        r = results[label]
        print(f"{label:40s} time costed {r['estimated_time_share']:.3f}  exact bytes {r['exact_bytes_time_share']:.3f}"
              f"  bytes {r['bytes_estimated_over_true']:.3f}  FLOPs {r['flops_estimated_over_true'] or 0:.3f}")
    record = {"date": time.strftime("%Y-%m-%d"), "commit": commit(), "hidden": HIDDEN,
              "what": __doc__.splitlines()[0], "traces": results}
    if args.out:
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
