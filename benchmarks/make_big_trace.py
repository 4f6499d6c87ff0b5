"""Build a large Kineto trace from a small real one by repeating its decode steps.

The source is a trace written by `kernelscope profile` on the GPU machine (tests/data/kineto/). Its decode
steps (every event from the first decode phase range on, with the kernels launched there) are repeated,
shifted in time, with fresh correlation ids, External ids, flow ids and step numbers, until the output
reaches the requested size. The layout is Kineto's own: one event per entry of "traceEvents".
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

DEFAULT_SOURCE = Path(__file__).resolve().parents[1] / "tests/data/kineto/h200-qwen2-0.5b-p16-n4.trace.json.gz"
PHASE = "ks.phase:decode:"


def _read(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def build(source: Path, out: Path, target_bytes: int, copies_wanted: int | None = None) -> dict:
    """`source`'s decode steps repeated until the output reaches `target_bytes` (or, given `copies_wanted`, exactly
    that many times: ranks built from different sources then hold the same steps and collectives)."""
    trace = _read(source)
    events = trace.pop("traceEvents")
    decode_start = min(e["ts"] for e in events if e.get("name", "").startswith(PHASE))
    runtime_ts = {
        e["args"]["correlation"]: e["ts"]
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }

    def in_decode(e: dict) -> bool:
        if e.get("ph") == "M" or "ts" not in e:
            return False
        corr = e.get("args", {}).get("correlation")
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and corr in runtime_ts:
            return runtime_ts[corr] >= decode_start
        return e["ts"] >= decode_start

    steady = [e for e in events if in_decode(e)]
    head = [e for e in events if not in_decode(e)]
    span = max(e["ts"] + e.get("dur", 0) for e in steady) - decode_start + 10.0
    steps = 1 + max(int(e["name"][len(PHASE):]) for e in steady if e.get("name", "").startswith(PHASE))
    max_corr = max((e.get("args", {}).get("correlation", 0) for e in events), default=0) + 1
    max_ext = max((e.get("args", {}).get("External id", 0) for e in events), default=0) + 1
    max_flow = max((e.get("id", 0) for e in events if isinstance(e.get("id"), int)), default=0) + 1

    out.parent.mkdir(parents=True, exist_ok=True)
    written, copies = 0, 0
    with out.open("w", encoding="utf-8") as f:
        opening = json.dumps(trace, indent=2)[:-2].rstrip() + ',\n  "traceEvents": [\n'
        f.write(opening)
        first = True

        def emit(e: dict) -> int:
            nonlocal first
            text = ("  " if first else ",\n  ") + json.dumps(e)
            first = False
            f.write(text)
            return len(text)

        written += len(opening)
        for e in head:
            written += emit(e)
        while (copies < copies_wanted) if copies_wanted is not None else (written < target_bytes):
            copies += 1
            shift = span * copies
            for e in steady:
                c = dict(e)
                c["ts"] = round(e["ts"] + shift, 3)
                args = e.get("args")
                if args:
                    args = dict(args)
                    if "correlation" in args:
                        args["correlation"] += max_corr * copies
                    if "External id" in args:
                        args["External id"] += max_ext * copies
                    c["args"] = args
                if isinstance(e.get("id"), int):
                    c["id"] = e["id"] + max_flow * copies
                name = e.get("name", "")
                if name.startswith(PHASE):
                    c["name"] = f"{PHASE}{int(name[len(PHASE):]) + steps * copies}"
                written += emit(c)
        f.write('\n  ],\n  "traceName": "synthetic"\n}\n')
    return {"source": str(source), "bytes": out.stat().st_size, "decode_copies": copies,
            "decode_steps": steps * (copies + 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--mb", type=float, default=520.0, help="target size in MB (default 520)")
    args = parser.parse_args()
    print(json.dumps(build(args.source, args.out, int(args.mb * 1e6))))


if __name__ == "__main__":
    main()
