"""Adversarial cases for what kernelscope must not trust: run directories someone sent (planted links, folders
that are not ours, stale leftovers of a killed command, tampered files) for every verb and the Python API, and SQL
text given to `query`, `check --baseline` and the API. Built by code from the same real seeds as cases.py; inputs
that exhaust resources and values that are wrong rather than hostile are in cases_limits.py.

A case's `argv` starting with "api" calls the Python API instead of the command line (see test_adversarial.py):
["api", "open_run", PATH], ["api", "open_runs", PATH, VIEW], ["api", "query", SQL, PATH].
"""


from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import polars as pl

from tests.adversarial.cases import (
    KINETO_SEED,
    NCU_SEED,
    RUN_SEED,
    Case,
    Check,
    Setup,
    _both,
    _copy,
    _edit_run,
    _json_edit,
    _parquet_edit,
)

SECRET = "kernelscope-secret-7f3a9c"  # what a leak would show: the content of work/secret.txt
OTHER = "other"  # a second, untouched copy of the seed run (a baseline, a second run to compare)
VICTIM = "victim"  # a folder outside every output that planted links point to; must stay as it was


def _secret(work: Path) -> None:
    (work / "secret.txt").write_text(SECRET + "\n")


def _victim(work: Path) -> None:
    (work / VICTIM).mkdir()
    (work / VICTIM / "precious.txt").write_text("the user's own file\n")
    (work / VICTIM / "bashrc").write_text("export PATH=/usr/bin\n")


def _whatif_slug() -> str:
    """The folder `whatif RUN --hw h100-sxm` writes its study to (named after the target's ceilings)."""
    from kernelscope.analyze.projection.projection import default_model
    from kernelscope.commands.whatif import _slug, _target

    return _slug(_target("h100-sxm", None, default_model()).name, None)


def _link(relative: str, target: str) -> Callable[[Path], None]:
    """Plant a symbolic link at run/`relative` to work/`target` (folders on the way made real)."""
    def edit(run: Path) -> None:
        path = run / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        path.symlink_to(run.parent / target)
    return edit


def _with_victim(edit: Callable[[Path], None]) -> Setup:
    return _both(_victim, _edit_run(edit))


WHATIF = ["whatif", "run", "--hw", "h100-sxm", "--lang", "en", "--figure-formats", "none"]
REPORT = ["report", "run", "--lang", "en", "--figure-formats", "none"]
EXPORT = ["export", "run", "--format", "kern-sum"]


# ---------------------------------------------------------------- links planted in a run directory
def link_cases() -> list[Case]:
    slug = _whatif_slug()
    plants = {
        "whatif-folder": (WHATIF, "whatif", VICTIM),
        "whatif-study": (WHATIF, f"whatif/{slug}", VICTIM),
        "export-folder": (EXPORT, "export", VICTIM),
        "export-file": (EXPORT, "export/kern_sum.csv", f"{VICTIM}/bashrc"),
        "export-perfetto-file": (["export", "run", "--format", "perfetto"], "export/trace.perfetto.json.gz",
                                 f"{VICTIM}/bashrc"),
        "report-folder": (REPORT, "report", VICTIM),
        "report-summary": (REPORT, "summary.json", f"{VICTIM}/bashrc"),
        "ncu-into-table": (["import", "raw.csv", "--into", "run", "--figure-formats", "none", "--lang", "en"],
                           "ncu.parquet", f"{VICTIM}/bashrc"),
        "ncu-into-report": (["import", "raw.csv", "--into", "run", "--figure-formats", "none", "--lang", "en"],
                            "report", VICTIM),
    }
    cases = []
    for label, (argv, where, target) in plants.items():
        setup = _with_victim(_link(where, target))
        if argv[0] == "import":
            setup = _both(setup, _copy(NCU_SEED, "raw.csv"))
        cases.append(Case(f"link-{label}", argv, setup, "run", "error", names=(where.split("/")[0],)))
    # Outputs named on the command line that are links: never written through.
    victim_link = _both(_victim, _copy(RUN_SEED, "run"), lambda w: (w / "out").symlink_to(w / VICTIM))
    file_link = _both(_victim, _copy(RUN_SEED, "run"), lambda w: (w / "out").symlink_to(w / VICTIM / "bashrc"))
    cases += [
        Case("link-compare-out", ["compare", "run", "run", "--out", "out", "--figure-formats", "none"], victim_link,
             "out", "error", names=("out",)),
        Case("link-whatif-out", [*WHATIF, "--out", "out"], victim_link, "out", "error", names=("out",)),
        Case("link-query-out", ["query", "select 1", "run", "--format", "csv", "--out", "out"], file_link, "out",
             "error", names=("out",)),
        Case("link-check-summary", ["check", "run", "--baseline", "run", "--summary", "out"], file_link, "out",
             "error", names=("out",)),
        Case("link-export-out", [*EXPORT, "--out", "out"], file_link, "out", "error", names=("out",)),
    ]
    return cases


# ---------------------------------------------------------------- folders that are not kernelscope's
def foreign_cases() -> list[Case]:
    slug = _whatif_slug()

    def user_folder(run: Path) -> None:
        folder = run / "whatif" / slug
        folder.mkdir(parents=True)
        (folder / "notes.txt").write_text("the user's notes\n")

    def folder_as_file(run: Path) -> None:
        (run / "export" / "kern_sum.csv").mkdir(parents=True)
        (run / "export" / "kern_sum.csv" / "keep.txt").write_text("x\n")

    def whatif_is_file(run: Path) -> None:
        (run / "whatif").write_text("not a folder\n")

    return [
        Case("foreign-whatif-study-folder", WHATIF, _edit_run(user_folder), "run", "error", names=("whatif",)),
        Case("foreign-export-file-is-folder", EXPORT, _edit_run(folder_as_file), "run", "error",
             names=("kern_sum.csv",)),
        Case("foreign-whatif-is-a-file", WHATIF, _edit_run(whatif_is_file), "run", "error", names=("whatif",)),
    ]


# ---------------------------------------------------------------- what a killed command left behind
def _leftovers(*names: str) -> Setup:
    def setup(work: Path) -> None:
        for name in names:
            path = work / name
            path.mkdir(parents=True)
            if ".partial-" in name:
                (path / "kernels.parquet").write_bytes(b"half written")
    return setup


def _exists(path: str) -> Check:
    def check(work: Path) -> None:
        assert (work / path).is_file(), path
    return check


def stale_cases() -> list[Case]:
    trace = _copy(KINETO_SEED, "trace.json.gz")
    return [
        Case("stale-claim-import", ["import", "trace.json.gz", "--out", "out", "--no-report"],
             _both(trace, _leftovers("out", ".out.partial-dead1234")), "out", "ok",
             check=_exists("out/kernels.parquet")),
        Case("stale-claim-old-import", ["import", "trace.json.gz", "--out", "out", "--no-report"],
             _both(trace, _leftovers("out", ".out.old-dead1234")), "out", "ok", check=_exists("out/run.json")),
        Case("stale-claim-compare", ["compare", "run", OTHER, "--out", "c", "--figure-formats", "none", "--lang",
             "en"], _both(_copy(RUN_SEED, "run"), _copy(RUN_SEED, OTHER), _leftovers("c")), "c", "ok",
             check=_exists("c/compare.md")),
        Case("stale-claim-whatif", [*WHATIF, "--out", "w"], _both(_copy(RUN_SEED, "run"), _leftovers("w")), "w",
             "ok", check=_exists("w/whatif.json")),
        Case("stale-update-report", REPORT, _edit_run(lambda r: _leftovers(".update.partial-dead1234",
             ".update.old-dead1234")(r)), "run", "ok", check=_exists("run/report/report.md")),
        # A folder that is not empty is someone's: never taken over.
        Case("stale-claim-not-empty", ["import", "trace.json.gz", "--out", "out", "--no-report"],
             _both(trace, lambda w: ((w / "out").mkdir(), (w / "out" / "mine.txt").write_text("x"))), "out",
             "error", names=("out",)),
    ]


# ---------------------------------------------------------------- tampered run directories, every verb and the API
def _write(name: str, text: str | bytes) -> Callable[[Path], None]:
    def edit(run: Path) -> None:
        (run / name).write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return edit


def _truncate(name: str, keep: int) -> Callable[[Path], None]:
    return lambda run: (run / name).write_bytes((run / name).read_bytes()[:keep])


INJECTION = """*/ a" as x, (select content from read_text('secret.txt')) as leak, /*"""

TAMPERED: dict[str, Callable[[Path], None]] = {
    "summary-deep-array": _write("summary.json", '{"kernel_count": ' + "[" * 100_000 + "]" * 100_000 + "}"),
    "summary-deep-object": _write("summary.json", '{"x": ' + '{"a":' * 100_000 + "1" + "}" * 100_000 + "}"),
    "summary-huge-integer": _json_edit("summary.json", lambda d: d.update(kernel_count=10**400)),
    "summary-infinite": lambda r: _write("summary.json", (r / "summary.json").read_text().replace(
        '"device_time_us": ', '"device_time_us": 1e999, "was": ', 1))(r),
    "summary-string-number": _json_edit("summary.json", lambda d: d.update(device_time_us="lots")),
    "summary-nan-token": lambda r: _write("summary.json", (r / "summary.json").read_text().replace(
        '"device_time_us": ', '"device_time_us": NaN, "was": ', 1))(r),
    "run-json-deep": _write("run.json", '{"schema_version": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}"),
    "run-json-huge-integer": _json_edit("run.json", lambda d: d["hardware"].update(memory_bytes=10**30)),
    "run-json-not-utf8": _write("run.json", b'{"schema_version": 1, "hardware": {"name": "\xff\xfe"}}'),
    "kernels-truncated": _truncate("kernels.parquet", 2000),
    "ops-truncated": _truncate("ops.parquet", 500),
    "ncu-truncated": _truncate("ncu.parquet", 300),
    "kernels-huge-duration": _parquet_edit("kernels.parquet", lambda df: df.with_columns(
        pl.lit(2**62, dtype=pl.Int64).alias("dur_ns"))),
    "kernels-nan-costs": _parquet_edit("kernels.parquet", lambda df: df.with_columns(
        pl.lit(float("nan")).alias("flops"), pl.lit(float("inf")).alias("bytes_moved"))),
    "kernels-null-phase": _parquet_edit("kernels.parquet", lambda df: df.with_columns(
        pl.lit(None, dtype=pl.String).alias("phase"))),
    "kernels-hostile-column": _parquet_edit("kernels.parquet", lambda df: df.with_columns(
        pl.lit("x").alias(INJECTION))),
    "extra-files": lambda r: ((r / "junk.bin").write_bytes(os.urandom(64)), (r / "more").mkdir()),
    "empty-run-json": _write("run.json", ""),
}

VERBS: dict[str, tuple[list[str], str, tuple[int, ...]]] = {
    # verb label → (argv, the output it names, the exit codes a completed command may give)
    "report": (REPORT, "run", (0, 2)),
    "export": (["export", "run", "--format", "kern-sum", "--out", "k.csv"], "k.csv", (0, 2)),
    "whatif": ([*WHATIF, "--out", "w"], "w", (0, 2)),
    "compare": (["compare", "run", OTHER, "--out", "c", "--figure-formats", "none", "--lang", "en"], "c", (0, 2)),
    "check": (["check", "run", "--baseline", OTHER, "--summary", "s.md"], "s.md", (0, 1, 2)),
    "query": (["query", "select * from kernels limit 3", "run"], "", (0, 2)),
    "import-into": (["import", "raw.csv", "--into", "run", "--figure-formats", "none", "--lang", "en"], "run",
                    (0, 2)),
    "api-open-run": (["api", "open_run", "run"], "", (0, 2)),
    "api-open-runs": (["api", "open_runs", "run", "kernels"], "", (0, 2)),
    "api-connect-runs": (["api", "query", "select * from runs", "run"], "", (0, 2)),
}
# What each verb reads: a tampered file it never opens is no test of it.
_HEAVY = {"report", "whatif", "compare", "import-into"}
_LIGHT_EDITS = {"summary-deep-object", "summary-huge-integer", "run-json-deep", "kernels-truncated",
                "kernels-huge-duration", "kernels-nan-costs", "kernels-hostile-column", "extra-files", "ncu-truncated",
                "run-json-not-utf8"}


def _no_secret(stdout: str) -> None:
    assert SECRET not in stdout, "a file outside the runs leaked into the output"


def tampered_cases() -> list[Case]:
    cases = []
    for verb, (argv, output, codes) in VERBS.items():
        for label, edit in TAMPERED.items():
            if verb in _HEAVY and label not in _LIGHT_EDITS:
                continue
            setup = _both(_secret, _edit_run(edit), _copy(RUN_SEED, OTHER), _copy(NCU_SEED, "raw.csv"))
            cases.append(Case(f"tampered-{verb}-{label}", argv, setup, output or None, "either", names=("run",),
                              codes=codes, check_stdout=_no_secret))
    return cases


# ---------------------------------------------------------------- SQL text: only reads the runs
ATTACKS = {
    "copy": "COPY (select * from kernels) TO 'stolen.csv'",
    "copy-in-query-function": "select * from query('copy (select 1) to ''stolen.csv''')",
    "attach": "ATTACH 'stolen.db' AS s",
    "export-database": "EXPORT DATABASE 'stolen'",
    "read-csv": "select * from read_csv('secret.txt')",
    "read-text": "select content from read_text('secret.txt')",
    "read-blob": "select content from read_blob('secret.txt')",
    "glob": "select * from glob('*')",
    "install": "INSTALL httpfs",
    "load": "LOAD httpfs",
    "set-access": "SET enable_external_access = true",
    "reset-lock": "RESET lock_configuration",
    "pragma": "PRAGMA database_list",
    "two-statements": "select 1; select content from read_text('secret.txt')",
    "create-table": "CREATE TABLE t AS SELECT 1",
    "create-secret": "CREATE SECRET s (TYPE s3, KEY_ID 'a', SECRET 'b')",
    "call": "CALL pragma_version()",
    "checkpoint": "CHECKPOINT",
    "parquet-metadata-outside": "select * from parquet_metadata('other/kernels.parquet')",
    "read-parquet-outside": "select count(*) from read_parquet('other/kernels.parquet')",
    "empty": "",
    "only-comment": "-- nothing",
}


def sql_cases() -> list[Case]:
    cases = []
    run_and_secret = _both(_secret, _copy(RUN_SEED, "run"), _copy(RUN_SEED, OTHER))
    for label, sql in ATTACKS.items():
        cases.append(Case(f"sql-query-{label}", ["query", sql, "run"], run_and_secret, None, "error",
                          names=("query",), check_stdout=_no_secret))
        cases.append(Case(f"sql-api-{label}", ["api", "query", sql, "run"], run_and_secret, None, "error",
                          names=("query",), check_stdout=_no_secret))
        if sql.strip() and not sql.lower().startswith(("select", "with")):
            continue  # check takes only queries that look like one; the rest are read as a run's path
        cases.append(Case(f"sql-check-{label}", ["check", "run", "--baseline", sql, "--baseline-from", "run",
                          "--summary", "s.md"], run_and_secret, "s.md", "error", names=("query", "--baseline"),
                          check_stdout=_no_secret))
    cases.append(Case("sql-query-hostile-column", ["query", "select * from kernels limit 2", "run", "--format",
                      "csv"], _both(_secret, _edit_run(TAMPERED["kernels-hostile-column"])), None, "ok",
                      check_stdout=_no_secret))
    return cases



def trust_cases() -> list[Case]:
    return [*link_cases(), *foreign_cases(), *stale_cases(), *tampered_cases(), *sql_cases()]
