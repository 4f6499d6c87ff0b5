"""Adversarial cases of the other recorders' files (cases.py says what a case is): Nsight Systems SQLite exports
(schema and row mutations), `nsys stats` CSV and Nsight Compute CSV (edited cells and lines)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from tests.adversarial.cases import NCU_SEED, NSYS_SEED, RUN_SEED, STATS_SEED, Case, Setup, _both, _copy


# ---------------------------------------------------------------- Nsight Systems SQLite
def _nsys_export(work: Path) -> Path:
    from kernelscope.load.kineto import load_kineto
    from tests.nsys_sqlite_writer import write_nsys_sqlite

    return write_nsys_sqlite(load_kineto(NSYS_SEED), work / "trace.sqlite", variant="current")


def _nsys(sql: list[str]) -> Setup:
    def setup(work: Path) -> None:
        path = _nsys_export(work)
        with sqlite3.connect(path) as db:
            for statement in sql:
                db.execute(statement)
        db.close()
    return setup


def nsys_cases() -> list[Case]:
    k = "CUPTI_ACTIVITY_KIND_KERNEL"
    mutations = {
        "no-kernel-table": [f"DROP TABLE {k}"], "no-strings": ["DROP TABLE StringIds"],
        "kernel-end-before-start": [f"UPDATE {k} SET end = start - 1000 WHERE rowid % 3 = 0"],
        "kernel-name-string-empty": ["UPDATE StringIds SET value = '' WHERE id = "
                                     f"(SELECT demangledName FROM {k} LIMIT 1)"],
        "kernel-name-id-missing": [f"UPDATE {k} SET demangledName = 999999999 WHERE rowid = 2"],
        "kernel-text-start": [f"UPDATE {k} SET start = 'abc' WHERE rowid = 3"],
        "kernel-huge-times": [f"UPDATE {k} SET start = 9223372036854775000, end = 9223372036854775807 WHERE rowid = 4"],
        "kernel-negative-device": [f"UPDATE {k} SET deviceId = -5"],
        "kernel-float-grid": [f"UPDATE {k} SET gridX = 1.5"],
        "string-hostile": ["UPDATE StringIds SET value = '![x](/etc/passwd)<script>1</script>' WHERE id = "
                           f"(SELECT demangledName FROM {k} LIMIT 1)"],
        "runtime-dropped": ["DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME"],
        "nvtx-end-before-start": ["UPDATE NVTX_EVENTS SET end = start - 1"],
        "nvtx-null-text": ["UPDATE NVTX_EVENTS SET text = NULL, textId = NULL"],
        "empty-kernels": [f"DELETE FROM {k}"], "target-info-dropped": ["DROP TABLE TARGET_INFO_GPU"],
        "duplicate-correlation": [f"UPDATE {k} SET correlationId = 1"],
    }
    cases = [Case(f"nsys-{label}", ["import", "trace.sqlite", "--out", "out", "--no-report"], _nsys(sql), "out",
                  names=("trace.sqlite",)) for label, sql in mutations.items()]

    def truncated(work: Path) -> None:
        path = _nsys_export(work)
        path.write_bytes(path.read_bytes()[:8192])
    cases.append(Case("nsys-truncated", ["import", "trace.sqlite", "--out", "out"], truncated, "out", "error",
                      names=("trace.sqlite",)))
    cases.append(Case("nsys-foreign-sqlite", ["import", "other.sqlite", "--out", "out"],
                      lambda w: sqlite3.connect(w / "other.sqlite").execute("CREATE TABLE t (x)").connection.commit(),
                      "out", "error", names=("other.sqlite",)))
    return cases


# ---------------------------------------------------------------- nsys stats and Nsight Compute CSV
def _edited_text(source: Path, name: str, edit: Callable[[list[str]], list[str]]) -> Setup:
    def setup(work: Path) -> None:
        lines = source.read_text(encoding="utf-8").splitlines()
        (work / name).write_text("\n".join(edit(lines)) + "\n", encoding="utf-8")
    return setup


def _cell(line: str, column: int, value: str) -> str:
    import csv
    import io

    row = next(csv.reader([line]))
    row[column] = value
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="").writerow(row)
    return buffer.getvalue()


def csv_cases() -> list[Case]:
    cases = []
    stats_edits: dict[str, Callable[[list[str]], list[str]]] = {
        "total-beyond-int64": lambda ls: [ls[0], _cell(ls[1], 1, "99999999999999999999999"), *ls[2:]],
        "total-text": lambda ls: [ls[0], _cell(ls[1], 1, "lots"), *ls[2:]],
        "total-nan": lambda ls: [ls[0], _cell(ls[1], 1, "nan"), *ls[2:]],
        "instances-inf": lambda ls: [ls[0], _cell(ls[1], 2, "inf"), *ls[2:]],
        "instances-negative": lambda ls: [ls[0], _cell(ls[1], 2, "-3"), *ls[2:]],
        "pct-huge": lambda ls: [ls[0], _cell(ls[1], 0, "1e400"), *ls[2:]],
        "blank-after-header": lambda ls: [ls[0], "", *ls[1:]],
        "header-only": lambda ls: ls[:1], "no-header": lambda ls: ls[1:],
        "short-row": lambda ls: [ls[0], "1,2", *ls[2:]],
        "name-hostile": lambda ls: [ls[0], _cell(ls[1], 8, "![x](/etc/passwd)\n<script>1</script>"), *ls[2:]],
        "name-empty": lambda ls: [ls[0], _cell(ls[1], 8, ""), *ls[2:]],
        "duplicate-header": lambda ls: [ls[0], ls[0], *ls[1:]],
    }
    for label, edit in stats_edits.items():
        cases.append(Case(f"stats-{label}", ["import", "decode.csv", "--out", "out", "--no-report"],
                          _edited_text(STATS_SEED, "decode.csv", edit), "out", names=("decode.csv",)))
    ncu_edits: dict[str, Callable[[list[str]], list[str]]] = {
        "id-text": lambda ls: [*ls[:2], _cell(ls[2], 0, "first"), *ls[3:]],
        "id-huge": lambda ls: [*ls[:2], _cell(ls[2], 0, "99999999999999999999999"), *ls[3:]],
        "blank-after-header": lambda ls: [ls[0], "", *ls[1:]],
        "blank-after-units": lambda ls: [*ls[:2], "", *ls[2:]],
        "no-units-row": lambda ls: [ls[0], *ls[2:]],
        "header-only": lambda ls: ls[:2],
        "kernel-name-hostile": lambda ls: [*ls[:2], _cell(ls[2], 6, "<img src=x onerror=alert(1)>"), *ls[3:]],
        "metric-nan": lambda ls: [*ls[:2], _cell(ls[2], 20, "nan"), *ls[3:]],
        "metric-inf": lambda ls: [*ls[:2], _cell(ls[2], 20, "inf"), *ls[3:]],
        "metric-text": lambda ls: [*ls[:2], _cell(ls[2], 20, "n/a"), *ls[3:]],
        "truncated-row": lambda ls: [*ls[:2], ls[2][: len(ls[2]) // 2], *ls[3:]],
        "grid-garbage": lambda ls: [*ls[:2], _cell(ls[2], 10, "(x, y, z)"), *ls[3:]],
    }
    for label, edit in ncu_edits.items():
        cases.append(Case(f"ncu-{label}", ["import", "raw.csv", "--out", "out", "--no-report"],
                          _edited_text(NCU_SEED, "raw.csv", edit), "out", names=("raw.csv",)))
        cases.append(Case(f"ncu-into-{label}", ["import", "raw.csv", "--into", "run"],
                          _both(_copy(RUN_SEED, "run"), _edited_text(NCU_SEED, "raw.csv", edit)), "run",
                          names=("raw.csv", "run")))
    return cases


# ---------------------------------------------------------------- run directories
