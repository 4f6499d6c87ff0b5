"""Adversarial cases for what kernelscope must not trust: run directories someone sent (planted links, folders
that are not ours, stale leftovers of a killed command, tampered files) for every verb and the Python API; SQL
text given to `query`, `check --baseline` and the API; inputs that exhaust resources (decompression bombs, link
loops, write-ahead logs); and values that are wrong rather than hostile (units, zero durations, formulas,
terminal escapes, deep nesting). Built by code from the same real seeds as cases.py.

A case's `argv` starting with "api" calls the Python API instead of the command line (see test_adversarial.py):
["api", "open_run", PATH], ["api", "open_runs", PATH, VIEW], ["api", "query", SQL, PATH].
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import zlib
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
    _events,
    _json_edit,
    _mutated_kineto,
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


# ---------------------------------------------------------------- resources
def _whitespace_bomb(work: Path) -> None:
    """6 MB of gzip that opens a JSON object and then holds 6 GiB of spaces."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, 31)
    with (work / "bomb.json.gz").open("wb") as out:
        out.write(deflate.compress(b'{"traceEvents": ['))
        block = b" " * (1 << 24)
        for _ in range(384):
            out.write(deflate.compress(block))
        out.write(deflate.flush())


def _link_loop(work: Path) -> None:
    shutil.copytree(RUN_SEED, work / "runs" / "a" / "run1")
    (work / "runs" / "a" / "up").symlink_to(work / "runs")
    (work / "runs" / "a" / "self").symlink_to(work / "runs" / "a")
    (work / "runs" / "twice").symlink_to(work / "runs" / "a")


def _deep_folders(work: Path) -> None:
    path = work / "runs"
    for _ in range(150):
        path = path / "d"
    shutil.copytree(RUN_SEED, path / "run1")


def _wal_export(work: Path) -> None:
    from kernelscope.load.kineto import load_kineto
    from tests.nsys_sqlite_writer import write_nsys_sqlite

    path = write_nsys_sqlite(load_kineto(KINETO_SEED), work / "trace.sqlite", variant="current")
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode=WAL")
    db.close()


def _row_bomb(run: Path) -> None:
    """kernels.parquet declaring 20 million rows of one kernel (a few hundred kilobytes on disk)."""
    one = pl.read_parquet(run / "kernels.parquet").head(1)
    rows = 20_000_000
    pl.select(pl.repeat(one[c][0], rows, dtype=one[c].dtype, eager=False).alias(c)
              for c in ("name", "kind", "dur_ns", "phase")).lazy().sink_parquet(
        run / "kernels.parquet", compression="zstd", row_group_size=rows)


def _one_row(stdout: str) -> None:
    assert "(1 row)" in stdout, stdout


def resource_cases() -> list[Case]:
    return [
        Case("resource-gzip-whitespace-bomb", ["import", "bomb.json.gz", "--out", "out"], _whitespace_bomb, "out",
             "error", names=("bomb.json.gz",)),
        Case("resource-gzip-bomb-small-budget", ["import", "trace.json.gz", "--out", "out", "--no-report"],
             _copy(KINETO_SEED, "trace.json.gz"), "out", "error", names=("trace.json.gz",),
             env={"KERNELSCOPE_MEMORY_BUDGET": "1M"}),
        Case("resource-budget-unreadable", ["import", "trace.json.gz", "--out", "out", "--no-report"],
             _copy(KINETO_SEED, "trace.json.gz"), "out", "error", names=("KERNELSCOPE_MEMORY_BUDGET",),
             env={"KERNELSCOPE_MEMORY_BUDGET": "lots"}),
        *(Case(f"resource-parquet-row-bomb-{verb}", argv, _edit_run(_row_bomb), "run", "error",
               names=("kernels.parquet",), env={"KERNELSCOPE_MEMORY_BUDGET": "64M"})
          for verb, argv in (("report", REPORT), ("api", ["api", "open_run", "run"]),
                             ("export", ["export", "run", "--format", "kern-sum"]))),
        Case("resource-query-link-loop", ["query", "select run_id from runs", "runs"], _link_loop, None, "ok",
             check_stdout=_one_row),
        Case("resource-api-link-loop", ["api", "open_runs", "runs", "runs"], _link_loop, None, "ok"),
        Case("resource-check-link-loop", ["check", "runs/a/run1", "--baseline", "select run_dir from runs",
             "--baseline-from", "runs", "--summary", "s.md"], _link_loop, "s.md", "either", names=("runs",),
             codes=(0, 1, 2)),
        Case("resource-query-deep-folders", ["query", "select run_id from runs", "runs"], _deep_folders, None, "ok",
             check_stdout=_one_row),
        Case("resource-nsys-wal-no-files-beside", ["import", "trace.sqlite", "--out", "out", "--no-report"],
             _wal_export, "out", "ok"),
        Case("resource-nsys-unfinished-wal", ["import", "trace.sqlite", "--out", "out", "--no-report"],
             _both(_wal_export, lambda w: (w / "trace.sqlite-wal").write_bytes(b"\x37\x7f\x06\x82" + b"\0" * 60)),
             "out", "error", names=("trace.sqlite",)),
    ]


# ---------------------------------------------------------------- values that are wrong, not hostile
def _ncu_metric(metric: str, value: str | None = None, unit: str | None = None) -> Setup:
    """The Nsight Compute seed with one metric's value (first launch) or unit changed."""
    import csv
    import io

    def setup(work: Path) -> None:
        lines = NCU_SEED.read_text(encoding="utf-8").splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
        header = next(csv.reader([lines[start]]))
        column = header.index(metric)
        for offset, new in ((1, unit), (2, value)):
            if new is None:
                continue
            row = next(csv.reader([lines[start + offset]]))
            row[column] = new
            buffer = io.StringIO()
            csv.writer(buffer, lineterminator="", quoting=csv.QUOTE_ALL).writerow(row)
            lines[start + offset] = buffer.getvalue()
        (work / "raw.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return setup


def _csv_cells_inert(path: str) -> Check:
    def check(work: Path) -> None:
        import csv

        with (work / path).open(newline="", encoding="utf-8") as f:
            cells = [cell for row in csv.reader(f) for cell in row]
        assert any(cell.startswith("'=") for cell in cells), "the formula-like name is not in the file"
        assert not [c for c in cells if c[:1] in ("=", "+", "@") or (c[:1] == "-" and not _number(c))]
    return check


def _number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _formula_names(doc: dict) -> None:
    for kernel, name in zip(_events(doc, "kernel")[:4], ("=HYPERLINK(\"http://x\")", "+1+1", "@SUM(A1)", "-2+3"),
                            strict=False):
        kernel["name"] = name


def _terminal_clean(stdout: str) -> None:
    assert "\x1b" not in stdout and "\u202e" not in stdout, repr(stdout[:200])


def _zero_durations(doc: dict) -> None:
    for kernel in _events(doc, "kernel"):
        kernel["dur"] = 0


DURATION = "gpu__time_duration.sum"


def value_cases() -> list[Case]:
    imp = ["import", "raw.csv", "--out", "out", "--no-report"]
    cases = [
        Case(f"values-ncu-duration-{label}", imp, _ncu_metric(DURATION, value, unit), "out", "error",
             names=("raw.csv",))
        for label, value, unit in (("unknown-unit", None, "parsecs"), ("byte-unit", None, "Mbyte"),
                                   ("1e400", "1e400", None), ("negative", "-3.5", None), ("nan", "nan", None),
                                   ("text", "fast", None))
    ]
    cases.append(Case("values-ncu-bytes-in-seconds", imp, _ncu_metric("dram__bytes_read.sum", None, "second"), "out",
                      "error", names=("raw.csv",)))
    cases.append(Case("values-ncu-missing-marker-read", imp, _ncu_metric(DURATION, "n/a", None), "out", "ok"))
    for label, mutate in (("one", lambda d: _events(d, "kernel")[0].update(dur=0)), ("all", _zero_durations)):
        cases.append(Case(f"values-zero-duration-{label}-with-report", ["import", "trace.json.gz", "--out", "out",
                          "--figure-formats", "none", "--lang", "en"], _mutated_kineto(mutate), "out", "either",
                          names=("trace.json.gz",)))
    cases.append(Case("values-zero-duration-report-with-figures", ["import", "trace.json.gz", "--out", "out",
                      "--lang", "en"], _mutated_kineto(lambda d: _events(d, "kernel")[3].update(dur=0)), "out", "ok"))
    deep = {"array": "a = " + "[" * 5000 + "]" * 5000, "table": "a = " + "{x=" * 5000 + "1" + "}" * 5000,
            "keys": 'name = "x"\n' + "a." * 5000 + "b = 1"}
    for label, text in deep.items():
        cases.append(Case(f"values-deep-toml-{label}", ["whatif", "run", "--hw", "spec.toml", "--out", "w"],
                          _both(_copy(RUN_SEED, "run"), lambda w, t=text: (w / "spec.toml").write_text(t)), "w",
                          "error", names=("spec.toml",)))
    cases.append(Case("values-kernels-terminal-escapes", ["kernels", "a\x1b[31mred\x1b[0m", "b\u202eevil", "c\x07\x08"],
                      lambda w: None, None, "ok", check_stdout=_terminal_clean))
    cases.append(Case("values-kernels-json-escapes", ["kernels", "--json", "a\x1b[2J", "b\u202eevil"], lambda w: None,
                      None, "ok", check_stdout=_terminal_clean))
    formula = _mutated_kineto(_formula_names)
    cases.append(Case("values-csv-formulas-export", ["export", "out", "--format", "kern-sum", "--out", "k.csv"],
                      _both(formula, lambda w: _import(w, "trace.json.gz", "out")), "k.csv", "ok",
                      check=_csv_cells_inert("k.csv")))
    cases.append(Case("values-csv-formulas-query", ["query", "select name from kernels", "out", "--format", "csv",
                      "--out", "q.csv"], _both(formula, lambda w: _import(w, "trace.json.gz", "out")), "q.csv", "ok",
                      check=_csv_cells_inert("q.csv")))
    cases.append(Case("values-csv-formulas-report-tables", ["report", "out", "--figure-formats", "none", "--lang",
                      "en"], _both(formula, lambda w: _import(w, "trace.json.gz", "out")), "out", "ok",
                      check=_report_tables_inert))
    cases.append(Case("values-qdrep-named", ["import", "r.qdrep", "--out", "out"],
                      lambda w: (w / "r.qdrep").write_bytes(b"QDREP\x00" + os.urandom(64)), "out", "error",
                      names=(".qdrep", "Nsight Systems report")))
    cases.append(Case("values-qdstrm-named", ["import", "r.qdstrm", "--out", "out"],
                      lambda w: (w / "r.qdstrm").write_bytes(os.urandom(64)), "out", "error", names=(".qdstrm",)))
    # Files in the wrong place are named for what they are, not for what they failed to be.
    run = _copy(RUN_SEED, "run")
    for label, argv, said in (
            ("run-dir-imported", ["import", "run", "--out", "out"], "part of a kernelscope run directory"),
            ("run-json-imported", ["import", "run/run.json", "--out", "out"], "part of a kernelscope run directory"),
            ("run-table-imported", ["import", "run/kernels.parquet", "--out", "out"],
             "part of a kernelscope run directory"),
            ("trace-reported", ["report", "t.json.gz"], "kernelscope import FILE")):
        cases.append(Case(f"values-message-{label}", argv, _both(run, _copy(KINETO_SEED, "t.json.gz")), "out",
                          "error", names=(said,)))
    cases.append(Case("values-message-parquet-imported", ["import", "k.parquet", "--out", "out"],
                      lambda w: shutil.copyfile(RUN_SEED / "kernels.parquet", w / "k.parquet"), "out", "error",
                      names=("a Parquet file",)))
    return cases


def _report_tables_inert(work: Path) -> None:
    import csv

    cells = []
    for path in (work / "out" / "report" / "tables").glob("*.csv"):
        with path.open(newline="", encoding="utf-8") as f:
            cells += [cell for row in csv.reader(f) for cell in row]
    assert any(cell.startswith("'=") for cell in cells)
    assert not [c for c in cells if c[:1] in ("=", "+", "@")]


def _import(work: Path, trace: str, out: str) -> None:
    """An import made while setting a case up (quietly, in-process)."""
    import contextlib
    import io

    from kernelscope.cli import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["-q", "import", str(work / trace), "--out", str(work / out), "--no-report"]) == 0


def trust_cases() -> list[Case]:
    return [*link_cases(), *foreign_cases(), *stale_cases(), *tampered_cases(), *sql_cases(), *resource_cases(),
            *value_cases()]
