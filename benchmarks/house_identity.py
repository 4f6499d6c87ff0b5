"""Behaviour identity of two source trees: the same committed traces imported and reported by each, every text
output compared byte for byte (after normalising absolute paths and timestamps) and every Parquet table compared
as a table.

    python benchmarks/house_identity.py [--base REV | --base-tree DIR] [--tree DIR] [--work DIR] [--keep]

The base tree defaults to the commit this branch shares with main (`git merge-base HEAD main`), unpacked with
`git archive` into a temporary folder (no worktree is registered); the new tree defaults to this checkout. Each
tree runs as `python -m kernelscope` with PYTHONPATH=<tree>/src, from its own folder holding the same copies of
the inputs, so relative paths are the same in both. Exit status 0 when nothing differs but what ALLOWED names.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
NATIVE = "src/kernelscope/load/kineto/_kineto_scan.cpython-311-x86_64-linux-gnu.so"

# name → (inputs relative to tests/data, extra import arguments). One of each kind of input.
IMPORTS: dict[str, tuple[list[str], list[str]]] = {
    "kineto-h200": (["kineto/h200-qwen2-0.5b-p16-n4.trace.json.gz"], []),
    "kineto-h100": (["kineto/h100-qwen2-0.5b-p16-n4.trace.json.gz"], []),
    "kineto-moe": (["kineto/h200-qwen3moe-2l-b4-p128-n3.trace.json.gz"], []),
    "shapeless-config": (["kineto/h200-qwen2-0.5b-p16-n4.shapeless.trace.json.gz"],
                         ["--model-config", "data/configs/qwen2-0.5b"]),
    "hf-stack": (["foreign/captured/hf_generate_stack.json.gz"], []),
    "sglang": (["public/tracelens/inference__sglang_prefilldecode__sglang_Qwen3-8B_prefilldecode.json.gz"], []),
    "vllm-replay": (["public/tracelens/inference__vllm_decode_full__graph_execution.json.gz"],
                    ["--capture", "data/foreign/trimmed/vllm_decode_full__graph_capture_rank_0.json.gz"]),
    "training": (["structure/training.json.gz"], []),
    "nsys": (["nsys/public/mordred_2021_report1.sqlite"], []),
    "rocprofv3": (["public/tracelens/rocprof__908_results.json.gz"], []),
    "ranks": (["multi_gpu/deepseek_v3_ep2_rank0.json.gz", "multi_gpu/deepseek_v3_ep2_rank1.json.gz"], ["--jobs", "1"]),
    "tp2": (["foreign/captured/tp2_rank0.json.gz", "foreign/captured/tp2_rank1.json.gz"], ["--jobs", "1"]),
}
COMMITTED_RUNS = ["runs/h200-qwen2-0.5b-ncu", "runs/h100-qwen2-1.5b-b8-slim"]
NCU_INTO = ("kineto-h200", "ncu/h200-qwen2-0.5b-decode.details.csv")
COMPARES = [("kineto-h200", "kineto-h100"), ("kineto-h200", "shapeless-config")]
WHATIFS = [("kineto-h200", ["--hw", "h100-sxm"]), ("kineto-h100", ["--hw", "b200", "--sweep", "bw=2:8:4", "--set", "l2=100MB"]),
           ("ranks", ["--hw", "h200"])]

# Differences that are the point of a change: (file name, JSON key) left out of both sides before comparing.
ALLOWED: list[tuple[str, str]] = [
    ("summary.json", "schema_version"),  # summary.json is versioned like run.json (docs/run-format.md)
]

TEXT = {".md", ".csv", ".json", ".html", ".txt", ".tsv"}
FLOAT = re.compile(r"-?\d+\.\d+(?:[eE][+-]?\d+)?")
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?([+-]\d\d:?\d\d|Z)?")


def unpack(rev: str, into: Path) -> Path:
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    native = ROOT / NATIVE
    if native.is_file():  # the compiled reader is not tracked; both trees read with the same one
        shutil.copy2(native, into / NATIVE)
    return into


def run_tree(tree: Path, folder: Path, log: list[str]) -> None:
    """Every command over the inputs, from `folder` (which holds the inputs as `data/`); one line per command
    and its exit status into `log`."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "KERNELSCOPE_NO_CACHE": "1"}

    def ks(*args: str) -> None:
        done = subprocess.run([sys.executable, "-m", "kernelscope", "-q", *args], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=600)
        (folder / "logs").mkdir(exist_ok=True)
        name = re.sub(r"[^\w.-]+", "_", " ".join(args))[:120]
        (folder / "logs" / f"{name}.txt").write_text(f"exit {done.returncode}\n{done.stdout}{done.stderr}")
        log.append(f"{' '.join(args)} → exit {done.returncode}")

    for name, (inputs, extra) in IMPORTS.items():
        ks("import", *[f"data/{i}" for i in inputs], *extra, "--figure-formats", "none", "--out", f"runs/{name}")
        if (folder / f"runs/{name}").is_dir():
            shutil.copytree(folder / f"runs/{name}", folder / f"imported/{name}")
        ks("report", f"runs/{name}", "--figure-formats", "none")
        ks("export", f"runs/{name}", "--format", "kern-sum", "--out", f"exports/{name}.kern-sum.csv")
        ks("export", f"runs/{name}", "--format", "kern-sum-nvtx", "--out", f"exports/{name}.kern-sum-nvtx.csv")
    for committed in COMMITTED_RUNS:
        name = Path(committed).name
        shutil.copytree(folder / "data" / committed, folder / f"runs/{name}")
        ks("report", f"runs/{name}", "--figure-formats", "none")
    ks("import", "--into", f"runs/{NCU_INTO[0]}", f"data/{NCU_INTO[1]}", "--figure-formats", "none")
    for a, b in COMPARES:
        ks("compare", f"runs/{a}", f"runs/{b}", "--figure-formats", "none", "--out", f"compare/{a}--{b}")
    for name, extra in WHATIFS:
        ks("whatif", f"runs/{name}", *extra, "--figure-formats", "none", "--out", f"whatif/{name}-{extra[1]}")


def normalise(text: str, roots: list[Path]) -> str:
    for root in roots:
        text = text.replace(str(root), "<ROOT>")
    return TIMESTAMP.sub("<TIME>", text)


def drop_allowed(name: str, text: str) -> str:
    keys = [key for file, key in ALLOWED if file == name]
    if not keys:
        return text
    data = json.loads(text)

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in keys}
        return [strip(v) for v in value] if isinstance(value, list) else value

    return json.dumps(strip(data), indent=1, sort_keys=True)


def rounded(text: str) -> str:
    """Decimals to 12 significant digits: the what-if's sums differ in their last digits from one run of the same
    tree to the next, so a difference there alone is noise, not a change."""
    return FLOAT.sub(lambda m: f"{float(m.group()):.12g}", text)


def compare(base: Path, new: Path, base_roots: list[Path], new_roots: list[Path]) -> tuple[list[str], list[str]]:
    """The outputs that differ, and those that differ only past the 12th significant digit of a decimal."""
    differences: list[str] = []
    noise: list[str] = []
    files = {p.relative_to(base) for p in base.rglob("*") if p.is_file()}
    files |= {p.relative_to(new) for p in new.rglob("*") if p.is_file()}
    for rel in sorted(files):
        if rel.parts[0] == "data" or rel.name.startswith("."):
            continue
        a, b = base / rel, new / rel
        if not a.is_file() or not b.is_file():
            differences.append(f"{rel}: only in {'base' if a.is_file() else 'new'}")
            continue
        if rel.suffix == ".parquet":
            import polars as pl
            left, right = pl.read_parquet(a), pl.read_parquet(b)
            if left.schema != right.schema or not left.equals(right):
                differences.append(f"{rel}: tables differ ({left.shape} / {right.shape})")
            continue
        if rel.suffix not in TEXT:
            if a.read_bytes() != b.read_bytes():
                differences.append(f"{rel}: bytes differ")
            continue
        left = drop_allowed(rel.name, normalise(a.read_text(errors="replace"), base_roots))
        right = drop_allowed(rel.name, normalise(b.read_text(errors="replace"), new_roots))
        if left != right and rounded(left) == rounded(right):
            noise.append(str(rel))
        elif left != right:
            diff = difflib.unified_diff(left.splitlines(), right.splitlines(), "base", "new", lineterm="", n=1)
            differences.append(f"{rel}:\n" + "\n".join(list(diff)[:40]))
    return differences, noise


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=None, help="revision of the base tree (default: merge-base of HEAD and main)")
    parser.add_argument("--base-tree", type=Path, help="an existing base tree instead of --base")
    parser.add_argument("--tree", type=Path, default=ROOT, help="the new tree (default: this checkout)")
    parser.add_argument("--work", type=Path, help="folder for the outputs (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--reuse-base", action="store_true",
                        help="with --work: keep the base tree's outputs of an earlier call there and run only the new tree")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="house-identity-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        reuse = args.reuse_base and (work / "base" / ".complete").is_file()
        if reuse:
            base_tree = Path((work / "base" / ".complete").read_text())
        elif args.base_tree:
            base_tree = args.base_tree.resolve()
        else:
            rev = args.base or subprocess.run(["git", "-C", str(ROOT), "merge-base", "HEAD", "main"], check=True,
                                              capture_output=True, text=True).stdout.strip()
            base_tree = unpack(rev, work / "base-tree")
        new_tree = args.tree.resolve()
        log: list[str] = []  # the new tree's commands; the base's exit codes are in its logs/, compared too
        folders = {"base": work / "base", "new": work / "new"}
        for side, tree in (("base", base_tree), ("new", new_tree)):
            folder = folders[side]
            if side == "base" and reuse:
                continue
            shutil.rmtree(folder, ignore_errors=True)
            shutil.copytree(DATA, folder / "data", ignore=shutil.ignore_patterns("*.py"))
            run_tree(tree, folder, log if side == "new" else [])
            (folder / ".complete").write_text(str(tree))
        differences, noise = compare(folders["base"], folders["new"], [folders["base"], base_tree], [folders["new"], new_tree])
        failed = [line for line in log if not line.endswith("exit 0")]
        print(f"{len(log)} commands per tree; {len(failed)} did not exit 0 (compared all the same)")
        for line in failed:
            print("  " + line)
        if ALLOWED:
            print("allowed: " + ", ".join(f"{file}:{key}" for file, key in ALLOWED))
        if noise:
            print(f"{len(noise)} outputs differ only past the 12th significant digit: " + ", ".join(noise))
        if differences:
            print(f"{len(differences)} outputs differ:")
            print("\n".join(differences))
            return 1
        files = sum(1 for p in folders["new"].rglob("*") if p.is_file() and "data" not in p.relative_to(folders["new"]).parts[:1])
        print(f"identical: {files} files")
        return 0
    finally:
        if not args.keep and not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
