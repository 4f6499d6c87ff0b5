"""Rebuild the fixtures of tests/data/foreign (see its README):

    python3 benchmarks/foreign/fixtures.py --corpus /work/corpus [--captures DIR]

--corpus: the public corpus as benchmarks/corpus/build_corpus.py builds it. Two public vLLM capture traces are over
the 2 MB a fixture may weigh; they are written with their built-in-call frames removed (`<built-in …>` Python
frames: leaves that name no module and no source line), everything else as the file holds it.
--captures: the output directory of benchmarks/foreign/capture.py (run on a GPU machine); its traces are copied.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOREIGN = ROOT / "tests" / "data" / "foreign"
PUBLIC = ROOT / "tests" / "data" / "public" / "tracelens"
INFERENCE = "tracelens/tests/traces/inference"
# Byte for byte, beside the other public fixtures.
COPIED = {
    f"{INFERENCE}/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz":
        "inference__sglang_prefilldecode__sglang_Qwen3-8B_prefilldecode.json.gz",
    "tracelens/tests/traces/b200/eager_trace.json.gz": "traces__b200__eager_trace.json.gz",
}
TRIMMED = {
    f"{INFERENCE}/vllm_decode_full/capture_traces/graph_capture_rank_0.1773709742341309550.pt.trace.json.gz":
        "vllm_decode_full__graph_capture_rank_0.json.gz",
    f"{INFERENCE}/vllm_prefilldecode_piecewise/capture_traces/graph_capture_rank_0.1773709679453551615.pt.trace.json.gz":
        "vllm_prefilldecode_piecewise__graph_capture_rank_0.json.gz",
}
CAPTURED = ["hf_generate_stack", "hf_generate_plain", "hf_generate_compiled", "own_loop_profiler_steps",
            "graph_capture", "graph_replay", "tp2_rank0", "tp2_rank1"]


def trim(source: Path, target: Path) -> None:
    with gzip.open(source) as f:
        document = json.load(f)
    document["traceEvents"] = [e for e in document["traceEvents"]
                               if not (e.get("cat") == "python_function" and e.get("name", "").startswith("<built-in"))]
    with gzip.open(target, "wt", compresslevel=9) as f:
        json.dump(document, f)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--captures", type=Path)
    args = parser.parse_args()
    for path, name in COPIED.items():
        shutil.copyfile(args.corpus / path, PUBLIC / name)
    for path, name in TRIMMED.items():
        trim(args.corpus / path, FOREIGN / "trimmed" / name)
    if args.captures:
        for name in CAPTURED:
            shutil.copyfile(args.captures / f"{name}.json.gz", FOREIGN / "captured" / f"{name}.json.gz")


if __name__ == "__main__":
    main()
