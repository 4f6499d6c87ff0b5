"""benchmarks/results holds small machine-readable records and one index, never code or bulky artefacts: reports,
figures, traces and logs are rebuilt by the scripts in benchmarks/ (the git history keeps those of every trial)."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
CODE = (".py", ".sh", ".patch", ".diff", ".ipynb", ".so", ".c", ".cpp", ".cu")
BULKY = (".html", ".png", ".svg", ".pdf", ".parquet", ".gz", ".tgz", ".tar", ".zip", ".log", ".nsys-rep", ".ncu-rep",
         ".sqlite")


def _tracked() -> list[Path]:
    """The files git would commit under benchmarks/results (tracked or new, ignored ones left out); every file there
    outside a git checkout."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", str(RESULTS)],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return [p for p in RESULTS.rglob("*") if p.is_file()]
    return [ROOT / name for name in out.split("\0") if name and (ROOT / name).is_file()]


def test_results_hold_no_code_and_no_bulky_artefacts():
    files = _tracked()
    assert files
    code = [str(p.relative_to(ROOT)) for p in files if p.suffix in CODE or p.name.startswith("sitecustomize")]
    bulky = [str(p.relative_to(ROOT)) for p in files if p.name.endswith(BULKY)]
    assert not code, f"scripts belong in benchmarks/, not in a results folder: {code}"
    assert not bulky, f"rebuilt by the scripts, not committed: {bulky}"


def test_results_stay_under_5_mb_and_each_file_small():
    sizes = {str(p.relative_to(ROOT)): p.stat().st_size for p in _tracked()}
    assert sum(sizes.values()) < 5_000_000, sum(sizes.values())
    big = {name: size for name, size in sizes.items() if size > 500_000}
    assert not big, big


def test_index_lists_every_record_and_is_current():
    spec = importlib.util.spec_from_file_location("results_index", ROOT / "benchmarks" / "results_index.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    index = (RESULTS / "INDEX.md").read_text(encoding="utf-8")
    assert index == module.render(RESULTS), "benchmarks/results/INDEX.md is stale: run benchmarks/results_index.py"
    records = sorted(p.name for p in RESULTS.iterdir() if p.name != "INDEX.md" and not p.name.startswith("."))
    linked = [line.split("](", 1)[1].split(")", 1)[0].rstrip("/") for line in index.splitlines()
              if line.startswith("| [")]
    assert linked == records
