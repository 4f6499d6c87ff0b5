"""The adversarial cases: every reader and command fed hostile input, built by code from small real seeds.

A case names the files it needs (written by `setup` into an empty working folder), the command line, the output it
names (which must end absent or unchanged when the command refuses), and what must hold: `expect` is "error"
(exit 2 and one line), "ok" (exit 0; `check` then verifies the output against the input), or "either" (exit 0 or
2: the contract holds either way, e.g. a value that may be read or refused). Each case's line must name one of
`names` (the file or argument at fault).

Seeds are real: our H200 capture of HF generate (Kineto), a vLLM B200 trace written as an Nsight Systems export,
`nsys stats` and Nsight Compute CSVs of our runs, committed run directories. This module holds the case record,
the seeds and the edits the families share; the families, one module each:
cases_kineto.py: kineto-field (one field of one event or of the document set to a hostile value), kineto-file
(truncation, encodings, compression, file kinds), names (hostile kernel, device, op and phase names, read back
verbatim); cases_formats.py: nsys (SQLite mutations), stats (nsys stats CSV), ncu (Nsight Compute CSV);
cases_runs.py: rundir (broken run directories for report/export/whatif/compare), args (hostile arguments of every
command); cases_trust.py and cases_limits.py: what kernelscope must not trust, and inputs that exhaust resources
or hold wrong values.
"""

from __future__ import annotations

import copy
import gzip
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import polars as pl

DATA = Path(__file__).resolve().parents[1] / "data"
KINETO_SEED = DATA / "foreign" / "captured" / "hf_generate_plain.json.gz"
NSYS_SEED = DATA / "public" / "tracelens" / "traces__b200__eager_trace.json.gz"
STATS_SEED = DATA / "nsys" / "decode.csv"
NCU_SEED = DATA / "ncu" / "h200-qwen2-0.5b-decode.raw.csv"
RUN_SEED = DATA / "runs" / "h200-qwen2-0.5b-ncu"
SLIM_RUNS = sorted((DATA / "runs").glob("*-slim"))

Setup = Callable[[Path], None]
Check = Callable[[Path], None]


@dataclass(frozen=True)
class Case:
    id: str
    argv: list[str]
    setup: Setup
    output: str | None  # the output the command names, relative to the working folder
    expect: str = "either"  # "error", "ok" or "either"
    names: tuple[str, ...] = ()  # one of these must appear in the error line
    check: Check | None = None
    env: dict[str, str] = field(default_factory=dict)
    codes: tuple[int, ...] = (0, 2)  # the exit codes the command may end with (check: 1 is a regression found)
    check_stdout: Callable[[str], None] | None = None  # what must hold of standard output, whatever the exit


# ---------------------------------------------------------------- seeds
@cache
def kineto_seed() -> dict:
    with gzip.open(KINETO_SEED, "rt") as f:
        return json.load(f)


def _events(doc: dict, cat: str) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("cat") == cat and e.get("ph") == "X"]


def _write_json(path: Path, doc: object, compress: bool = True) -> None:
    text = json.dumps(doc, allow_nan=True).encode("utf-8")
    path.write_bytes(gzip.compress(text, mtime=0) if compress else text)


def _copy(source: Path, name: str) -> Setup:
    def setup(work: Path) -> None:
        target = work / name
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copyfile(source, target)
    return setup


def _both(*setups: Setup) -> Setup:
    def setup(work: Path) -> None:
        for s in setups:
            s(work)
    return setup


# ---------------------------------------------------------------- edits the families share
def _mutated_kineto(mutate: Callable[[dict], None], compress: bool = True) -> Setup:
    def setup(work: Path) -> None:
        doc = copy.deepcopy(kineto_seed())
        mutate(doc)
        _write_json(work / ("trace.json.gz" if compress else "trace.json"), doc, compress)
    return setup


def _edit_run(edit: Callable[[Path], None], source: Path = RUN_SEED) -> Setup:
    def setup(work: Path) -> None:
        shutil.copytree(source, work / "run")
        edit(work / "run")
    return setup


def _json_edit(name: str, change: Callable[[dict], object]) -> Callable[[Path], None]:
    def edit(run: Path) -> None:
        data = json.loads((run / name).read_text())
        result = change(data)
        (run / name).write_text(json.dumps(data if result is None else result))
    return edit


def _parquet_edit(name: str, change: Callable[[pl.DataFrame], pl.DataFrame]) -> Callable[[Path], None]:
    def edit(run: Path) -> None:
        change(pl.read_parquet(run / name)).write_parquet(run / name)
    return edit


def all_cases() -> list[Case]:
    # The families import this module's seeds and edits: imported here, once this module is whole.
    from tests.adversarial.cases_formats import csv_cases, nsys_cases
    from tests.adversarial.cases_kineto import kineto_field_cases, kineto_file_cases, name_cases
    from tests.adversarial.cases_limits import resource_cases, value_cases
    from tests.adversarial.cases_runs import args_cases, rundir_cases
    from tests.adversarial.cases_trust import trust_cases

    return [*kineto_field_cases(), *kineto_file_cases(), *name_cases(), *nsys_cases(), *csv_cases(),
            *rundir_cases(), *args_cases(), *trust_cases(), *resource_cases(), *value_cases()]
