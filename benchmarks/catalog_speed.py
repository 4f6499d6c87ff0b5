"""Kernel catalog speed: classify 100,000 distinct realistic kernel names, and 100,000-character names.

    python benchmarks/catalog_speed.py [--names 100000] [--repeats 3]

Targets: 100,000 distinct names in at most 2 s; a 100,000-character name in at most 50 ms.
The names are variants of real ones: every kernel name of the committed fixtures (H200 captures, the
qwen2-1.5b kernel list, the seed tables) with its numbers redrawn (tile sizes, vector widths, template
values) and its element type swapped, until 100,000 distinct names exist. Each repeat classifies them with
a cold cache, once through the engine (`Catalog.classify`) and once through the table API (`classify_frame`,
which is what a run uses). The long names are pathological shapes aimed at each rule family plus a real
signature padded to 100,000 characters. Results go to benchmarks/results/catalog-speed-<date>.json.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import random
import re
import statistics
import time
from datetime import date
from pathlib import Path

import polars as pl
from _provenance import commit  # benchmarks/ is on sys.path when run as a script

from kernelscope.analyze.costs.catalog import classify_frame, clear_cache, load_catalog
from kernelscope.load.kineto import load_kineto

ROOT = Path(__file__).resolve().parents[1]
NAMES = ROOT / "tests/data/kernel_names"
DISTINCT_TARGET_S = 2.0
LONG_TARGET_MS = 50.0
_NUMBER = re.compile(r"\d+")
_DTYPES = ["c10::BFloat16", "c10::Half", "float", "__nv_bfloat16", "__half"]
_SIZES = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]


def real_names() -> list[str]:
    names: list[str] = []
    with (NAMES / "h200-qwen2-1.5b-default.csv").open() as handle:
        names += [row["name"] for row in csv.DictReader(handle)]
    for path in sorted((ROOT / "tests/data/kineto").glob("h200-*.trace.json.gz")):
        names += load_kineto(path).kernels["name"].unique().to_list()
    with (NAMES / "seed001_signatures.tsv").open() as handle:
        names += [row["signature"] for row in csv.DictReader(handle, delimiter="\t")]
    for file in ("seed004_names.txt", "seed002_names.txt"):
        names += [line for line in (NAMES / file).read_text().splitlines() if line and not line.startswith("#")]
    return list(dict.fromkeys(names))


def variants(bases: list[str], count: int, seed: int = 0) -> list[str]:
    """`count` distinct names made from `bases` by redrawing some numbers and swapping the element type."""
    rng = random.Random(seed)
    out: dict[str, None] = dict.fromkeys(bases)
    while len(out) < count:
        name = rng.choice(bases)
        name = _NUMBER.sub(lambda m: str(rng.choice(_SIZES)) if rng.random() < 0.4 else m.group(), name)
        for dtype in _DTYPES:
            if dtype in name and rng.random() < 0.3:
                name = name.replace(dtype, rng.choice(_DTYPES))
        out[name] = None
    return list(out)[:count]


def long_names() -> dict[str, str]:
    signature = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, "
                 "c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, "
                 "std::array<char*, 3ul> >(int, ")
    n = 100_000
    return {
        "real signature, argument list padded": (signature + "at::native::BinaryFunctor<c10::BFloat16>, " * n)[:n],
        "ATen loop, one long template argument": ("void at::native::vectorized_elementwise_kernel<" + "a" * n)[:n],
        "nvjet, repeated tile fields": ("nvjet_sm90_" + "1x" * n)[:n],
        "FlashInfer rope, repeated words": ("void flashinfer::BatchQKApply" + "Rotary" * n)[:n],
        "Inductor, repeated index suffixes": ("triton_poi_" + "_1" * n)[:n - 1] + "!",
        "cuBLAS arch GEMM, long word": ("ampere_" + "a" * n)[:n],
        "cuBLAS xmma GEMM, long word": ("sm80_xmma_gemm_" + "a" * n)[:n],
        "nested namespaces": ("void " + "a::" * n)[:n],
        "open brackets": "<" * n,
        "open parentheses": "(" * n,
        "bad mangled name": ("_Z" + "N" * n)[:n],
        "plain identifier": "a" * n,
    }


def time_distinct(names: list[str], repeats: int) -> dict:
    catalog = load_catalog()
    engine, frame = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        for name in names:
            catalog.classify(name)
        engine.append(time.perf_counter() - start)
        clear_cache()
        series = pl.Series("name", names)
        start = time.perf_counter()
        classify_frame(series)
        frame.append(time.perf_counter() - start)
        clear_cache()
    return {"engine_s": engine, "classify_frame_s": frame, "engine_best_s": min(engine),
            "engine_median_s": statistics.median(engine), "classify_frame_best_s": min(frame),
            "classify_frame_median_s": statistics.median(frame)}


def time_long(repeats: int) -> dict[str, float]:
    catalog = load_catalog()
    result = {}
    for label, name in long_names().items():
        runs = []
        for _ in range(repeats):
            start = time.perf_counter()
            catalog.classify(name)
            runs.append(time.perf_counter() - start)
        result[label] = round(1000 * min(runs), 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--names", type=int, default=100_000, help="distinct names to classify (default 100000)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats; best and median are kept (default 3)")
    parser.add_argument("--out", type=Path, help="results JSON (default benchmarks/results/catalog-speed-<date>.json)")
    args = parser.parse_args()

    start = time.perf_counter()
    load_catalog()
    compile_s = time.perf_counter() - start
    bases = real_names()
    names = variants(bases, args.names)
    distinct = time_distinct(names, args.repeats)
    long = time_long(args.repeats)
    result = {
        "benchmark": "catalog-speed",
        "date": date.today().isoformat(),
        "commit": commit(),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "python": platform.python_version()},
        "rules": len(load_catalog().rules),
        "compile_catalog_s": round(compile_s, 4),
        "distinct_names": {"count": len(names), "real_bases": len(bases),
                           "mean_length": round(sum(map(len, names)) / len(names), 1), **distinct,
                           "target_s": DISTINCT_TARGET_S,
                           "meets_target": distinct["classify_frame_best_s"] <= DISTINCT_TARGET_S},
        "long_names_ms": {"length": 100_000, "best_of": args.repeats, "by_shape": long,
                          "max_ms": max(long.values()), "target_ms": LONG_TARGET_MS,
                          "meets_target": max(long.values()) <= LONG_TARGET_MS},
    }
    out = args.out or ROOT / "benchmarks/results" / f"catalog-speed-{date.today().isoformat()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("distinct_names", "long_names_ms")}, indent=2))
    print(out)


if __name__ == "__main__":
    main()
