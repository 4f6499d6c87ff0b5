"""Structure inference on the held-out captures (tests/data/structure, README there): what `kernelscope import`
infers from each (summary.json `structure`; run.json's evidence or reason for the layers) beside the truth its
program recorded at capture time. tests/e2e/test_structure_held_out.py asserts the same and checks the kernels'
places against the trace file; this script records the figures that docs/importing.md quotes.

    python benchmarks/structure_held_out.py [--out benchmarks/results/structure-held-out-DATE.json]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from _provenance import commit  # noqa: E402

from kernelscope.cli import main as kernelscope  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STRUCTURE = ROOT / "tests" / "data" / "structure"
COUNTS = ("forward_passes", "prefill_steps", "decode_steps", "layers", "training_steps")


def check(name: str, work: Path) -> dict:
    truth = json.loads((STRUCTURE / f"{name}.truth.json").read_text())
    out = work / name
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # (the run directory's path)
        code = kernelscope(["-q", "import", str(STRUCTURE / f"{name}.json.gz"), "--out", str(out), "--no-report"])
    seconds = time.perf_counter() - started
    if code != 0:
        return {"exit_code": code}
    structure = json.loads((out / "summary.json").read_text())["structure"]
    levels = {x["level"]: x for x in json.loads((out / "run.json").read_text())["attribution"]["structure"]}
    layers = levels.get("layers", {})
    return {
        "truth": {k: truth[k] for k in COUNTS if k in truth},
        "inferred": {k: structure[k] for k in COUNTS if k in truth},
        "right": all(structure[k] == truth[k] for k in COUNTS if k in truth),
        "unknown": structure["unknown"],
        "layers": layers.get("evidence") or layers.get("reason"),
        "import_seconds": round(seconds, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results"
                        / f"structure-held-out-{date.today().isoformat()}.json")
    args = parser.parse_args()
    names = sorted(p.name.removesuffix(".truth.json") for p in STRUCTURE.glob("*.truth.json"))
    with tempfile.TemporaryDirectory() as work:
        captures = {name: check(name, Path(work)) for name in names}
    result = {"date": date.today().isoformat(), "commit": commit(), "source": "tests/data/structure",
              "captures": captures, "right": sum(c.get("right", False) for c in captures.values()),
              "of": len(captures)}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{result['right']} of {result['of']} captures right; written to {args.out}")


if __name__ == "__main__":
    main()
