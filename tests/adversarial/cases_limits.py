"""Adversarial cases at the limits (cases.py says what a case is): inputs that exhaust resources (decompression
bombs, link loops, deep folders, write-ahead logs, row bombs) and values that are wrong rather than hostile (units,
zero durations, formulas in names, terminal escapes, deep nesting)."""


from __future__ import annotations

import os
import shutil
import sqlite3
import zlib
from pathlib import Path

import polars as pl

from tests.adversarial import cases as base
from tests.adversarial.cases_trust import REPORT


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
    shutil.copytree(base.RUN_SEED, work / "runs" / "a" / "run1")
    (work / "runs" / "a" / "up").symlink_to(work / "runs")
    (work / "runs" / "a" / "self").symlink_to(work / "runs" / "a")
    (work / "runs" / "twice").symlink_to(work / "runs" / "a")


def _deep_folders(work: Path) -> None:
    path = work / "runs"
    for _ in range(150):
        path = path / "d"
    shutil.copytree(base.RUN_SEED, path / "run1")


def _wal_export(work: Path) -> None:
    from kernelscope.load.kineto import load_kineto
    from tests.nsys_sqlite_writer import write_nsys_sqlite

    path = write_nsys_sqlite(load_kineto(base.KINETO_SEED), work / "trace.sqlite", variant="current")
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


def resource_cases() -> list[base.Case]:
    return [
        base.Case("resource-gzip-whitespace-bomb", ["import", "bomb.json.gz", "--out", "out"], _whitespace_bomb, "out",
             "error", names=("bomb.json.gz",)),
        base.Case("resource-gzip-bomb-small-budget", ["import", "trace.json.gz", "--out", "out", "--no-report"],
             base._copy(base.KINETO_SEED, "trace.json.gz"), "out", "error", names=("trace.json.gz",),
             env={"KERNELSCOPE_MEMORY_BUDGET": "1M"}),
        base.Case("resource-budget-unreadable", ["import", "trace.json.gz", "--out", "out", "--no-report"],
             base._copy(base.KINETO_SEED, "trace.json.gz"), "out", "error", names=("KERNELSCOPE_MEMORY_BUDGET",),
             env={"KERNELSCOPE_MEMORY_BUDGET": "lots"}),
        *(base.Case(f"resource-parquet-row-bomb-{verb}", argv, base._edit_run(_row_bomb), "run", "error",
               names=("kernels.parquet",), env={"KERNELSCOPE_MEMORY_BUDGET": "64M"})
          for verb, argv in (("report", REPORT), ("api", ["api", "open_run", "run"]),
                             ("export", ["export", "run", "--format", "kern-sum"]))),
        base.Case("resource-query-link-loop", ["query", "select run_id from runs", "runs"], _link_loop, None, "ok",
             check_stdout=_one_row),
        base.Case("resource-api-link-loop", ["api", "open_runs", "runs", "runs"], _link_loop, None, "ok"),
        base.Case("resource-check-link-loop", ["check", "runs/a/run1", "--baseline", "select run_dir from runs",
             "--baseline-from", "runs", "--summary", "s.md"], _link_loop, "s.md", "either", names=("runs",),
             codes=(0, 1, 2)),
        base.Case("resource-query-deep-folders", ["query", "select run_id from runs", "runs"], _deep_folders, None, "ok",
             check_stdout=_one_row),
        base.Case("resource-nsys-wal-no-files-beside", ["import", "trace.sqlite", "--out", "out", "--no-report"],
             _wal_export, "out", "ok"),
        base.Case("resource-nsys-unfinished-wal", ["import", "trace.sqlite", "--out", "out", "--no-report"],
             base._both(_wal_export, lambda w: (w / "trace.sqlite-wal").write_bytes(b"\x37\x7f\x06\x82" + b"\0" * 60)),
             "out", "error", names=("trace.sqlite",)),
    ]


# ---------------------------------------------------------------- values that are wrong, not hostile
def _ncu_metric(metric: str, value: str | None = None, unit: str | None = None) -> base.Setup:
    """The Nsight Compute seed with one metric's value (first launch) or unit changed."""
    import csv
    import io

    def setup(work: Path) -> None:
        lines = base.NCU_SEED.read_text(encoding="utf-8").splitlines()
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


def _csv_cells_inert(path: str) -> base.Check:
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
    for kernel, name in zip(base._events(doc, "kernel")[:4], ("=HYPERLINK(\"http://x\")", "+1+1", "@SUM(A1)", "-2+3"),
                            strict=False):
        kernel["name"] = name


def _terminal_clean(stdout: str) -> None:
    assert "\x1b" not in stdout and "\u202e" not in stdout, repr(stdout[:200])


def _zero_durations(doc: dict) -> None:
    for kernel in base._events(doc, "kernel"):
        kernel["dur"] = 0


DURATION = "gpu__time_duration.sum"


def value_cases() -> list[base.Case]:
    imp = ["import", "raw.csv", "--out", "out", "--no-report"]
    cases = [
        base.Case(f"values-ncu-duration-{label}", imp, _ncu_metric(DURATION, value, unit), "out", "error",
             names=("raw.csv",))
        for label, value, unit in (("unknown-unit", None, "parsecs"), ("byte-unit", None, "Mbyte"),
                                   ("1e400", "1e400", None), ("negative", "-3.5", None), ("nan", "nan", None),
                                   ("text", "fast", None))
    ]
    cases.append(base.Case("values-ncu-bytes-in-seconds", imp, _ncu_metric("dram__bytes_read.sum", None, "second"), "out",
                      "error", names=("raw.csv",)))
    cases.append(base.Case("values-ncu-missing-marker-read", imp, _ncu_metric(DURATION, "n/a", None), "out", "ok"))
    for label, mutate in (("one", lambda d: base._events(d, "kernel")[0].update(dur=0)), ("all", _zero_durations)):
        cases.append(base.Case(f"values-zero-duration-{label}-with-report", ["import", "trace.json.gz", "--out", "out",
                          "--figure-formats", "none", "--lang", "en"], base._mutated_kineto(mutate), "out", "either",
                          names=("trace.json.gz",)))
    cases.append(base.Case("values-zero-duration-report-with-figures", ["import", "trace.json.gz", "--out", "out",
                      "--lang", "en"], base._mutated_kineto(lambda d: base._events(d, "kernel")[3].update(dur=0)), "out", "ok"))
    deep = {"array": "a = " + "[" * 5000 + "]" * 5000, "table": "a = " + "{x=" * 5000 + "1" + "}" * 5000,
            "keys": 'name = "x"\n' + "a." * 5000 + "b = 1"}
    for label, text in deep.items():
        cases.append(base.Case(f"values-deep-toml-{label}", ["whatif", "run", "--hw", "spec.toml", "--out", "w"],
                          base._both(base._copy(base.RUN_SEED, "run"), lambda w, t=text: (w / "spec.toml").write_text(t)), "w",
                          "error", names=("spec.toml",)))
    cases.append(base.Case("values-kernels-terminal-escapes", ["kernels", "a\x1b[31mred\x1b[0m", "b\u202eevil", "c\x07\x08"],
                      lambda w: None, None, "ok", check_stdout=_terminal_clean))
    cases.append(base.Case("values-kernels-json-escapes", ["kernels", "--json", "a\x1b[2J", "b\u202eevil"], lambda w: None,
                      None, "ok", check_stdout=_terminal_clean))
    formula = base._mutated_kineto(_formula_names)
    cases.append(base.Case("values-csv-formulas-export", ["export", "out", "--format", "kern-sum", "--out", "k.csv"],
                      base._both(formula, lambda w: _import(w, "trace.json.gz", "out")), "k.csv", "ok",
                      check=_csv_cells_inert("k.csv")))
    cases.append(base.Case("values-csv-formulas-query", ["query", "select name from kernels", "out", "--format", "csv",
                      "--out", "q.csv"], base._both(formula, lambda w: _import(w, "trace.json.gz", "out")), "q.csv", "ok",
                      check=_csv_cells_inert("q.csv")))
    cases.append(base.Case("values-csv-formulas-report-tables", ["report", "out", "--figure-formats", "none", "--lang",
                      "en"], base._both(formula, lambda w: _import(w, "trace.json.gz", "out")), "out", "ok",
                      check=_report_tables_inert))
    cases.append(base.Case("values-qdrep-named", ["import", "r.qdrep", "--out", "out"],
                      lambda w: (w / "r.qdrep").write_bytes(b"QDREP\x00" + os.urandom(64)), "out", "error",
                      names=(".qdrep", "Nsight Systems report")))
    cases.append(base.Case("values-qdstrm-named", ["import", "r.qdstrm", "--out", "out"],
                      lambda w: (w / "r.qdstrm").write_bytes(os.urandom(64)), "out", "error", names=(".qdstrm",)))
    # Files in the wrong place are named for what they are, not for what they failed to be.
    run = base._copy(base.RUN_SEED, "run")
    for label, argv, said in (
            ("run-dir-imported", ["import", "run", "--out", "out"], "part of a kernelscope run directory"),
            ("run-json-imported", ["import", "run/run.json", "--out", "out"], "part of a kernelscope run directory"),
            ("run-table-imported", ["import", "run/kernels.parquet", "--out", "out"],
             "part of a kernelscope run directory"),
            ("trace-reported", ["report", "t.json.gz"], "kernelscope import FILE")):
        cases.append(base.Case(f"values-message-{label}", argv, base._both(run, base._copy(base.KINETO_SEED, "t.json.gz")), "out",
                          "error", names=(said,)))
    cases.append(base.Case("values-message-parquet-imported", ["import", "k.parquet", "--out", "out"],
                      lambda w: shutil.copyfile(base.RUN_SEED / "kernels.parquet", w / "k.parquet"), "out", "error",
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
