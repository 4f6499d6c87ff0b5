"""Writes benchmarks/results/INDEX.md: one line per record of benchmarks/results (a JSON file or a folder), with its
date, device, commit, what it measured and its size, read from the record's own metadata (the JSON's `what`,
`benchmark`, `date`, `device`, `machine`, `commit`; a folder's summary.json, run.json or README.md title).

    python3 benchmarks/results_index.py           # rewrite INDEX.md
    python3 benchmarks/results_index.py --check   # exit 1 when INDEX.md is not what the records say
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
INDEX = RESULTS / "INDEX.md"
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
HEX = re.compile(r"\b[0-9a-f]{7,40}\b")
GPU = re.compile(r"(?:(\d+)x)?(h100|h200)(?:x(\d+))?", re.I)
# Records whose files say what ran but not what was measured: the benchmark that writes each family.
FAMILIES = {
    "catalog-speed": "naming distinct kernels with the catalog, and long names (benchmarks/catalog_speed.py)",
    "corpus-": "every trace of the public corpus imported and checked against a plain-Python reading (benchmarks/corpus/check_corpus.py)",
    "ingest-2": "load and attribute a large trace, against Holistic Trace Analysis (benchmarks/ingest.py)",
    "import-parallel-2": "several rank files imported in one process or in parallel (benchmarks/import_parallel.py)",
    "cost-check": "analytic FLOPs and bytes against Nsight Compute on H200 captures (benchmarks/device/cost_check.sh)",
    "critical-path-check": "critical-path predictions against re-measured steps after interventions (benchmarks/device/critical_path_check.sh)",
    "report-speed": "`kernelscope report` of large runs, whole processes, trees alternating (benchmarks/report/report_speed.py)",
    "critical-path-corpus": "critical paths of the public corpus' traces (benchmarks/critical_path/corpus_paths.py)",
    "structure-held-out": "phases, steps, layers and modules read from held-out device captures (benchmarks/structure_held_out.py)",
    "speed-ab": "import and report of a 333 MB trace, whole processes, trees alternating (benchmarks/device/speed_ab_capture.sh)",
    "regression": "the default profile and multi-GPU runs re-run on the device (benchmarks/device/regression_capture.sh)",
    "roofline-ncu": "qwen2-0.5b profile with Nsight Compute and `kernelscope hw calibrate` (benchmarks/device/roofline_ncu_capture.sh)",
    "foundation": "the first default `kernelscope profile` on an H200 (benchmarks/device/foundation_capture.sh)",
}
HEADER = """# benchmarks/results

Machine-readable records of what kernelscope measured: one JSON file or one folder per record (summaries, run.json
and summary.json of runs, CSV tables, device and environment notes). The scripts that make them live in
`benchmarks/` (`benchmarks/device/` for the GPU machine); reports, figures, traces, logs and tarballs of each trial
are rebuilt by those scripts and not kept here, so a record's README may name a file that is only in the git
history (`git log --diff-filter=D --name-only -- benchmarks/results/<record>`).

This index is written by `python3 benchmarks/results_index.py` from each record's own metadata; a test checks that
it is current.

| record | date | device | commit | what it measured | size |
| --- | --- | --- | --- | --- | ---: |
"""


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _metadata(record: Path) -> dict:
    """The record's JSON, or for a folder its summary.json merged over its run.json's hardware and workload."""
    if record.is_file():
        return _json(record)
    meta = _json(record / "summary.json")
    run = _json(record / "run.json")
    if run:
        meta.setdefault("device", (run.get("hardware") or {}).get("name"))
        meta.setdefault("date", run.get("created"))
    readme = record / "README.md"
    if "commit" not in meta and readme.is_file():
        named = re.search(r"\bcommit ([0-9a-f]{7,40})\b", readme.read_text(encoding="utf-8"))
        meta["commit"] = named.group(1) if named else None
    return meta


def _readme(record: Path) -> str:
    readme = record / "README.md" if record.is_dir() else record if record.suffix == ".md" else None
    return readme.read_text(encoding="utf-8") if readme is not None and readme.is_file() else ""


def _readme_title(record: Path) -> str:
    for line in _readme(record).splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return ""


def _text(value) -> str:
    if isinstance(value, dict):
        cores = value.get("cores") or value.get("nproc")
        return f"{cores} cores" if cores else ""
    return "" if value is None else str(value)


def _gpus(text: str) -> str:
    """H100, 2 × H200, …: every GPU a record's name (or title) names, in order."""
    found = []
    for match in GPU.finditer(text):
        count = match.group(1) or match.group(3)
        name = f"{count} × {match.group(2).upper()}" if count else match.group(2).upper()
        if name not in found:
            found.append(name)
    return ", ".join(found)


def _device(record: Path, meta: dict) -> str:
    named = _gpus(record.name)
    if named:
        return named
    device = _text(meta.get("device"))
    if device:
        return device.split(" (")[0]
    if isinstance(meta.get("cores"), int):
        return f"CPU, {meta['cores']} cores"
    strings = " ".join(_text(meta.get(key)) for key in ("machine", "what", "note"))
    cores = re.search(r"(\d+)[- ]cores?\b", strings) or re.search(r"(\d+)[- ]cores?\b", _readme(record))
    if cores or _text(meta.get("machine")):
        return f"CPU, {cores.group(1)} cores" if cores else "CPU"
    head = " ".join(_readme(record).splitlines()[:12])
    return _gpus(re.sub(r"(\d) ?× ?", r"\1x", head)) or "–"


def _what(record: Path, meta: dict) -> str:
    family = next((text for prefix, text in FAMILIES.items() if record.name.startswith(prefix)), "")
    what = _readme_title(record) or _text(meta.get("what")) or family or _text(meta.get("benchmark"))
    what = " ".join(what.split())
    return what if len(what) <= 160 else what[:157].rstrip() + "…"


def _size(record: Path) -> int:
    files = [record] if record.is_file() else [p for p in record.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files)


def _human(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.0f} kB" if size >= 1e3 else f"{size} B"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(results: Path = RESULTS) -> str:
    rows = []
    total = 0
    for record in sorted(results.iterdir()):
        if record.name == INDEX.name or record.name.startswith("."):
            continue
        meta = _metadata(record)
        date = DATE.search(_text(meta.get("date"))) or DATE.search(record.name)
        commit = HEX.search(_text(meta.get("commit")))
        size = _size(record)
        total += size
        link = record.name + ("/" if record.is_dir() else "")
        rows.append(f"| [{link}]({link}) | {date.group(0) if date else '–'} | {_cell(_device(record, meta))} | "
                    f"{commit.group(0) if commit else '–'} | {_cell(_what(record, meta))} | {_human(size)} |\n")
    return HEADER + "".join(rows) + f"\n{len(rows)} records, {_human(total)} in all.\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when INDEX.md is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = INDEX.read_text(encoding="utf-8") if INDEX.is_file() else ""
        if current != text:
            print(f"{INDEX} is out of date: run python3 benchmarks/results_index.py", file=sys.stderr)
            return 1
        return 0
    INDEX.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
