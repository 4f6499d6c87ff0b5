"""The adversarial cases: every reader and command fed hostile input, built by code from small real seeds.

A case names the files it needs (written by `setup` into an empty working folder), the command line, the output it
names (which must end absent or unchanged when the command refuses), and what must hold: `expect` is "error"
(exit 2 and one line), "ok" (exit 0; `check` then verifies the output against the input), or "either" (exit 0 or
2: the contract holds either way, e.g. a value that may be read or refused). Each case's line must name one of
`names` (the file or argument at fault).

Seeds are real: our H200 capture of HF generate (Kineto), a vLLM B200 trace written as an Nsight Systems export,
`nsys stats` and Nsight Compute CSVs of our runs, committed run directories. Families:
kineto-field (one field of one event or of the document set to a hostile value), kineto-file (truncation,
encodings, compression, file kinds), names (hostile kernel, device, op and phase names, read back verbatim),
nsys (SQLite mutations), stats (nsys stats CSV), ncu (Nsight Compute CSV), rundir (broken run directories for
report/export/whatif/compare), args (hostile arguments of every command).
"""

from __future__ import annotations

import copy
import gzip
import json
import os
import shutil
import sqlite3
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


# ---------------------------------------------------------------- Kineto: one field set to a hostile value
HOSTILE_VALUES: dict[str, object] = {
    "null": None, "neg": -1, "zero": 0, "2^63": 2**63, "2^64": 2**64, "-2^63": -(2**63), "1e30": 1e30,
    "-1e30": -1e30, "1e300": 1e300, "nan": float("nan"), "inf": float("inf"), "str": "12x", "empty": "",
    "list": [1], "dict": {"a": 1}, "true": True,
}
KERNEL_FIELDS = ["ts", "dur", "name", "pid", "tid", "ph", "cat", "args.correlation", "args.device", "args.stream",
                 "args.grid", "args.block", "args.registers per thread", "args.shared memory", "args.External id"]
LAUNCH_FIELDS = ["ts", "dur", "name", "args.correlation"]
CPU_OP_FIELDS = ["ts", "dur", "name", "args.External id"]
DOCUMENT_FIELDS = ["schemaVersion", "deviceProperties", "baseTimeNanoseconds", "distributedInfo", "traceEvents",
                   "cuda_runtime_version"]
PROPERTY_FIELDS = ["name", "totalGlobalMem", "numSms", "computeMajor", "id"]


def _set(event: dict, dotted: str, value: object) -> None:
    if dotted.startswith("args."):
        event.setdefault("args", {})[dotted[5:]] = value
    else:
        event[dotted] = value


def _mutated_kineto(mutate: Callable[[dict], None], compress: bool = True) -> Setup:
    def setup(work: Path) -> None:
        doc = copy.deepcopy(kineto_seed())
        mutate(doc)
        _write_json(work / ("trace.json.gz" if compress else "trace.json"), doc, compress)
    return setup


def _field_case(kind: str, index: int, dotted: str, label: str, value: object, every: bool = False) -> Case:
    def mutate(doc: dict) -> None:
        events = _events(doc, kind)
        for event in events if every else [events[index]]:
            _set(event, dotted, value)
    scope = "all" if every else str(index)
    return Case(f"kineto-field-{kind}{scope}-{dotted}-{label}", ["import", "trace.json.gz", "--out", "out",
                "--no-report"], _mutated_kineto(mutate), "out", names=("trace.json.gz",))


def kineto_field_cases() -> list[Case]:
    cases = []
    for dotted in KERNEL_FIELDS:
        for label, value in HOSTILE_VALUES.items():
            cases.append(_field_case("kernel", 3, dotted, label, value))
    for dotted in ("dur", "ts", "args.correlation", "args.grid"):
        for label in ("neg", "null", "1e30", "str"):
            cases.append(_field_case("kernel", 0, dotted, label, HOSTILE_VALUES[label], every=True))
    for dotted in LAUNCH_FIELDS:
        for label in ("null", "neg", "2^64", "1e300", "str", "dict"):
            cases.append(_field_case("cuda_runtime", 5, dotted, label, HOSTILE_VALUES[label]))
    for dotted in CPU_OP_FIELDS:
        for label in ("null", "neg", "2^64", "nan", "list"):
            cases.append(_field_case("cpu_op", 7, dotted, label, HOSTILE_VALUES[label]))
    for name in DOCUMENT_FIELDS:
        for label in ("null", "str", "list", "dict", "2^64"):
            def mutate(doc: dict, name: str = name, value: object = HOSTILE_VALUES[label]) -> None:
                doc[name] = value
            cases.append(Case(f"kineto-doc-{name}-{label}", ["import", "trace.json.gz", "--out", "out",
                              "--no-report"], _mutated_kineto(mutate), "out", names=("trace.json.gz",)))
    for name in PROPERTY_FIELDS:
        for label in ("null", "nan", "inf", "dict", "neg", "2^64"):
            def mutate(doc: dict, name: str = name, value: object = HOSTILE_VALUES[label]) -> None:
                doc["deviceProperties"][0][name] = value
            cases.append(Case(f"kineto-device-{name}-{label}", ["import", "trace.json.gz", "--out", "out"],
                              _mutated_kineto(mutate), "out", names=("trace.json.gz",))
                         if name == "name" and label == "dict" else
                         Case(f"kineto-device-{name}-{label}", ["import", "trace.json.gz", "--out", "out",
                              "--no-report"], _mutated_kineto(mutate), "out", names=("trace.json.gz",)))

    def duplicate_correlation(doc: dict) -> None:
        launches = [e for e in _events(doc, "cuda_runtime") if "correlation" in e.get("args", {})]
        launches[1]["args"]["correlation"] = launches[0]["args"]["correlation"]
    cases.append(Case("kineto-duplicate-correlation", ["import", "trace.json.gz", "--out", "out", "--no-report"],
                      _mutated_kineto(duplicate_correlation), "out", names=("trace.json.gz",)))

    def end_before_start(doc: dict) -> None:
        for e in _events(doc, "kernel")[:10]:
            e["dur"] = -e["dur"] - 5
    cases.append(Case("kineto-kernels-end-before-start", ["import", "trace.json.gz", "--out", "out", "--no-report"],
                      _mutated_kineto(end_before_start), "out", names=("trace.json.gz",)))
    return cases


# ---------------------------------------------------------------- Kineto: the file as a whole
def _bytes(name: str, data: bytes | Callable[[], bytes]) -> Setup:
    def setup(work: Path) -> None:
        (work / name).write_bytes(data() if callable(data) else data)
    return setup


def _seed_text() -> bytes:
    return json.dumps(kineto_seed()).encode("utf-8")


def kineto_file_cases() -> list[Case]:
    imp = ["import", "trace.json", "--out", "out", "--no-report"]
    cases = []
    for fraction in (0.0001, 0.01, 0.25, 0.5, 0.9, 0.999):
        cases.append(Case(f"kineto-truncated-{fraction}", imp,
                          _bytes("trace.json", lambda f=fraction: _seed_text()[: int(len(_seed_text()) * f)]), "out",
                          names=("trace.json",)))
        cases.append(Case(f"kineto-gzip-truncated-{fraction}", ["import", "trace.json.gz", "--out", "out"],
                          _bytes("trace.json.gz", lambda f=fraction: (lambda b: b[: max(1, int(len(b) * f))])(
                              gzip.compress(_seed_text(), mtime=0))), "out", "error", names=("trace.json.gz",)))
    contents = {
        "empty": b"", "space": b"   \n\t ", "null": b"null", "number": b"42", "string": b'"traceEvents"',
        "empty-object": b"{}", "empty-array": b"[]", "events-object": b'{"traceEvents": {}}',
        "events-string": b'{"traceEvents": "x"}', "events-null": b'{"traceEvents": null}',
        "events-of-numbers": b'{"traceEvents": [1, 2, 3]}', "events-of-arrays": b'{"traceEvents": [[], [1]]}',
        "nested": b"[" * 100_000 + b"]" * 100_000, "nested-object": b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
        "binary": bytes(range(256)) * 64, "utf16": '{"traceEvents": []}'.encode("utf-16"),
        "bom-only": b"\xef\xbb\xbf", "invalid-utf8": b'{"traceEvents": [{"ph": "X", "name": "\xff\xfe", "cat": '
                                                      b'"kernel", "ts": 1, "dur": 1, "pid": 0, "tid": 7}]}',
        "duplicate-keys": b'{"traceEvents": [], "traceEvents": [{"ph": "X"}]}',
        "nul-bytes": b'{"traceEvents": [\x00]}',
        "gzip-of-nothing": gzip.compress(b"", mtime=0), "gzip-of-junk": gzip.compress(os.urandom(0) + b"\x00" * 1000),
        "gzip-twice": gzip.compress(gzip.compress(b'{"traceEvents": []}')),
        "trailing-garbage": b'{"traceEvents": []} garbage',
        "sqlite-magic-only": b"SQLite format 3\x00" + b"\x00" * 100,
        "zip": b"PK\x03\x04" + b"\x00" * 100,
    }
    for label, data in contents.items():
        cases.append(Case(f"kineto-content-{label}", imp, _bytes("trace.json", data), "out", names=("trace.json",)))
    cases.append(Case("kineto-gzip-with-trailing-garbage", ["import", "trace.json.gz", "--out", "out", "--no-report"],
                      _bytes("trace.json.gz", lambda: gzip.compress(_seed_text(), mtime=0) + b"garbage"), "out",
                      names=("trace.json.gz",)))
    cases.append(Case("kineto-gzip-two-members", ["import", "trace.json.gz", "--out", "out", "--no-report"],
                      _bytes("trace.json.gz", lambda: (lambda t: gzip.compress(t[:1000]) + gzip.compress(t[1000:]))(
                          _seed_text())), "out", "ok"))
    # A gzip bomb: 64 MiB of spaces after `{`, under a 16 MiB cap.
    cases.append(Case("kineto-gzip-bomb", ["import", "bomb.json.gz", "--out", "out"],
                      _bytes("bomb.json.gz", lambda: gzip.compress(b"{" + b" " * (64 << 20), 9, mtime=0)), "out",
                      "error", names=("bomb.json.gz",), env={"KERNELSCOPE_MAX_TRACE_BYTES": str(16 << 20)}))
    cases.append(Case("kineto-gzip-bomb-of-zeros", ["import", "zeros.json.gz", "--out", "out"],
                      _bytes("zeros.json.gz", lambda: gzip.compress(b"\x00" * (64 << 20), 9, mtime=0)), "out",
                      "error", names=("zeros.json.gz",)))

    def long_name(work: Path) -> None:
        doc = copy.deepcopy(kineto_seed())
        _events(doc, "kernel")[0]["name"] = "k" * (16 << 20)
        _write_json(work / "trace.json.gz", doc)
    cases.append(Case("kineto-16mib-kernel-name", ["import", "trace.json.gz", "--out", "out", "--no-report"],
                      long_name, "out", "ok"))

    def special(kind: str) -> Setup:
        def setup(work: Path) -> None:
            path = work / "trace.json"
            if kind == "fifo":
                os.mkfifo(path)
            elif kind == "dir":
                path.mkdir()
            elif kind == "dangling-link":
                path.symlink_to(work / "nowhere.json")
            elif kind == "link-loop":
                path.symlink_to(path)
            elif kind == "dev-zero":
                path.symlink_to("/dev/zero")
            elif kind == "dev-urandom":
                path.symlink_to("/dev/urandom")
            elif kind == "missing":
                pass
        return setup
    for kind in ("fifo", "dir", "dangling-link", "link-loop", "dev-zero", "dev-urandom", "missing"):
        cases.append(Case(f"kineto-file-{kind}", imp, special(kind), "out", "error", names=("trace.json",)))
    return cases


# ---------------------------------------------------------------- hostile names, read back verbatim
HOSTILE_NAMES = {
    "image-local": "![x](/etc/passwd)", "image-remote": "![x](http://127.0.0.1:9/x.png)",
    "script": "<script>window.__ks_pwned=1</script>", "img-onerror": '<img src=x onerror="window.__ks_pwned=1">',
    "javascript-link": "[click](javascript:window.__ks_pwned=1)", "newline-heading": "k\n# Injected heading\n",
    "pipe": "a | b | c", "backticks": "``x`` ` ![y](/etc/hosts) `", "entity": "&lt;script&gt;",
    "autolink": "<http://127.0.0.1:9/>", "html-comment": "<!-- x -->", "unicode-rtl": "k\u202eevil\u2028line",
    "path-traversal": "../../../../etc/passwd", "control": "a\x00b\x07c\x1b[31m", "emphasis": "*_~~x~~_*",
    "percent-format": "%s%n{0}{{ 7*7 }}", "jinja": "{{ config }}{% raw %}", "long-unicode": "核" * 5000,
}


def _names_check(name: str) -> Check:
    """The kernel renamed in the input is in kernels.parquet under exactly that name (a name beyond the
    documented length keeps its head)."""
    def check(work: Path) -> None:
        names = set(pl.read_parquet(work / "out" / "kernels.parquet")["name"].to_list())
        expected = name.replace("\x00", "")  # JSON strings cannot keep NUL through every reader: compared without
        assert any(n.replace("\x00", "").startswith(expected[:1000]) for n in names), name
    return check


def name_cases() -> list[Case]:
    cases = []
    for label, name in HOSTILE_NAMES.items():
        def mutate(doc: dict, name: str = name) -> None:
            _events(doc, "kernel")[2]["name"] = name
            _events(doc, "cpu_op")[4]["name"] = name
        cases.append(Case(f"names-kernel-{label}", ["import", "trace.json.gz", "--out", "out", "--no-report"],
                          _mutated_kineto(mutate), "out", "ok", check=_names_check(name)))
    return cases


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


def _kernels_without(column: str) -> Callable[[pl.DataFrame], pl.DataFrame]:
    return lambda df: df.drop(column)


def rundir_cases() -> list[Case]:
    edits: dict[str, Callable[[Path], None]] = {
        "run-json-list": _json_edit("run.json", lambda d: [d]),
        "run-json-garbage": lambda r: (r / "run.json").write_bytes(b"\x00\xff{"),
        "run-json-schema-string": _json_edit("run.json", lambda d: d.update(schema_version="1")),
        "run-json-schema-future": _json_edit("run.json", lambda d: d.update(schema_version=10**6)),
        "run-json-hardware-list": _json_edit("run.json", lambda d: d.update(hardware=[1])),
        "run-json-no-hardware": _json_edit("run.json", lambda d: d.pop("hardware")),
        "run-json-device-hostile": _json_edit("run.json", lambda d: d["hardware"].update(
            name="H200\n# injected\n| x | ![y](/etc/passwd)")),
        "run-json-device-number": _json_edit("run.json", lambda d: d["hardware"].update(name=7)),
        "run-json-workload-string": _json_edit("run.json", lambda d: d.update(workload="x")),
        "run-json-model-hostile": _json_edit("run.json", lambda d: d.setdefault("workload", {}).update(
            model="<script>1</script>")),
        "run-json-is-directory": lambda r: ((r / "run.json").unlink(), (r / "run.json").mkdir()),
        "summary-garbage": lambda r: (r / "summary.json").write_text("[1,"),
        "summary-missing": lambda r: (r / "summary.json").unlink(),
        "kernels-missing": lambda r: (r / "kernels.parquet").unlink(),
        "kernels-garbage": lambda r: (r / "kernels.parquet").write_bytes(b"PAR1garbagePAR1"),
        "kernels-wrong-schema": _parquet_edit("kernels.parquet", lambda df: pl.DataFrame({"x": [1, 2]})),
        "kernels-empty": _parquet_edit("kernels.parquet", lambda df: df.clear()),
        "kernels-dur-string": _parquet_edit("kernels.parquet", lambda df: df.with_columns(pl.col("dur_ns").cast(
            pl.String))),
        "kernels-phase-slash": _parquet_edit("kernels.parquet", lambda df: df.with_columns(
            pl.col("phase").str.replace("decode", "de/../code"))),
        "kernels-negative-dur": _parquet_edit("kernels.parquet", lambda df: df.with_columns(-pl.col("dur_ns"))),
        "ops-missing": lambda r: (r / "ops.parquet").unlink(),
        # a report reads no ops (the run stores its costs), but a damaged ops file is still named
        "ops-garbage": lambda r: (r / "ops.parquet").write_bytes(b"PAR1garbagePAR1"),
        "ncu-garbage": lambda r: (r / "ncu.parquet").write_bytes(b"junk"),
    }
    for column in ("name", "phase", "start_ns", "dur_ns", "layer", "module", "op", "kind", "step", "kernel_id", "grid_x",
                   "launch_start_ns", "flops", "cost_op_id"):
        edits[f"kernels-without-{column}"] = _parquet_edit("kernels.parquet", _kernels_without(column))
    cases = []
    for label, edit in edits.items():
        cases.append(Case(f"rundir-report-{label}", ["report", "run", "--lang", "en"], _edit_run(edit), "run",
                          names=("run",)))
    for label in ("run-json-list", "kernels-wrong-schema", "kernels-without-phase", "kernels-phase-slash",
                  "kernels-without-name", "summary-garbage"):
        cases.append(Case(f"rundir-export-{label}", ["export", "run", "--format", "kern-sum", "--out", "k.csv"],
                          _edit_run(edits[label]), "k.csv", names=("run",)))
        cases.append(Case(f"rundir-whatif-{label}", ["whatif", "run", "--hw", "h100-sxm", "--out", "w",
                          "--lang", "en"], _edit_run(edits[label]), "w", names=("run",)))
    # Commands that read no ops rows still refuse a damaged ops file, and name it.
    for command in (["report", "run", "--lang", "en"], ["whatif", "run", "--hw", "h100-sxm", "--out", "w", "--lang", "en"]):
        cases.append(Case(f"rundir-{command[0]}-ops-garbage-named", command, _edit_run(edits["ops-garbage"]),
                          "w" if command[0] == "whatif" else "run", "error", names=("ops.parquet",)))
    for source in SLIM_RUNS:
        cases.append(Case(f"rundir-report-slim-{source.name}", ["report", "run", "--lang", "en"],
                          _copy(source, "run"), "run", "ok"))
        cases.append(Case(f"rundir-export-slim-{source.name}", ["export", "run", "--format", "kern-sum", "--out",
                          "k.csv"], _copy(source, "run"), "k.csv", "ok"))
    # summary.json of a newer shape than this kernelscope reads, or a version that is not a number: refused, named
    # by the commands that read it (a report writes the summary anew).
    for label, version in (("future", 10**6), ("string", "1")):
        edit = _edit_run(_json_edit("summary.json", lambda d, v=version: d.update(schema_version=v)))
        cases.append(Case(f"rundir-compare-summary-schema-{label}", ["compare", "run", "b", "--out", "c"],
                          _both(edit, _copy(RUN_SEED, "b")), "c", "error", names=("summary.json",)))
    cases.append(Case("rundir-compare-broken", ["compare", "a", "b", "--out", "c"],
                      _both(lambda w: _edit_run(edits["run-json-list"])(w) or (w / "run").rename(w / "a"),
                            _copy(RUN_SEED, "b")), "c", "error", names=("a",)))
    return cases


# ---------------------------------------------------------------- arguments of every command
def args_cases() -> list[Case]:
    seed_run = _copy(RUN_SEED, "run")
    trace = _copy(KINETO_SEED, "trace.json.gz")
    with_run_and_file = _both(seed_run, lambda w: (w / "file").write_text("x"))
    cases = [
        Case("args-import-out-exists", ["import", "trace.json.gz", "--out", "run"], _both(trace, seed_run), "run",
             "error", ("run",)),
        Case("args-import-out-is-file", ["import", "trace.json.gz", "--out", "file"],
             _both(trace, lambda w: (w / "file").write_text("x")), "file", "error", ("file",)),
        Case("args-import-out-under-file", ["import", "trace.json.gz", "--out", "file/run"],
             _both(trace, lambda w: (w / "file").write_text("x")), "file", "error", ("file",)),
        Case("args-import-runs-dir-file", ["import", "trace.json.gz", "--runs-dir", "file"],
             _both(trace, lambda w: (w / "file").write_text("x")), "file", "error", ("file",)),
        Case("args-import-out-proc", ["import", "trace.json.gz", "--out", "/proc/kernelscope-x"], trace, None,
             "error", ("/proc",)),
        Case("args-import-device-unknown", ["import", "trace.json.gz", "--out", "o", "--device", "zz9"], trace, "o",
             "error", ("zz9", "--device")),
        Case("args-import-capture-missing", ["import", "trace.json.gz", "--out", "o", "--capture", "nope.json"],
             trace, "o", "error", ("nope.json",)),
        Case("args-import-into-not-run", ["import", "trace.json.gz", "--into", "trace.json.gz"], trace,
             "trace.json.gz", "error", ("trace.json.gz", "--into")),
        Case("args-import-into-kineto", ["import", "trace.json.gz", "--into", "run"], _both(trace, seed_run), "run",
             "error", ("--into",)),
        Case("args-import-no-such-file", ["import", "nope.json", "--out", "o"], lambda w: None, "o", "error",
             ("nope.json",)),
        Case("args-import-lang-bad", ["import", "trace.json.gz", "--out", "o", "--lang", "xx"], trace, "o",
             "error", ("--lang",)),
        Case("args-export-phase-traversal", ["export", "run", "--format", "kern-sum", "--phase", "../../x"],
             seed_run, "run", "error", ("../../x",)),
        Case("args-export-out-existing", ["export", "run", "--format", "kern-sum", "--out", "file"],
             with_run_and_file, "file", "error", ("file",)),
        Case("args-export-format-bad", ["export", "run", "--format", "pdf"], seed_run, "run", "error", ("--format",)),
        Case("args-export-out-dir-phase-slash", ["export", "run", "--format", "kern-sum", "--phase", "a/b", "--out",
             "d"], _both(seed_run, lambda w: (w / "d").mkdir()), "d", "error", ("a/b",)),
        Case("args-report-not-a-run", ["report", "trace.json.gz"], trace, "trace.json.gz", "error",
             ("trace.json.gz",)),
        Case("args-report-top-zero", ["report", "run", "--top", "0", "--lang", "en"], seed_run, "run", "either",
             ("--top",)),
        Case("args-report-top-huge", ["report", "run", "--top", "99999999999999999999", "--lang", "en"], seed_run,
             "run", "error", ("--top",)),
        Case("args-compare-one-run", ["compare", "run", "--out", "c"], seed_run, "c", "error", ("compare", "RUN")),
        Case("args-compare-labels-hostile", ["compare", "run", "run", "--labels", "<a>,*b*`", "--out", "c",
             "--lang", "en"], seed_run, "c", "ok"),
        Case("args-compare-labels-path", ["compare", "run", "run", "--labels", "a,![b](/etc/passwd)", "--out", "c"],
             seed_run, "c", "error", ("--labels",)),
        Case("args-hw-show-unknown", ["hw", "show", "zz9"], lambda w: None, None, "error", ("zz9",)),
        Case("args-hw-show-hostile", ["hw", "show", "../../etc/passwd"], lambda w: None, None, "error",
             ("../../etc/passwd",)),
        Case("args-kernels-hostile", ["kernels", "![x](/etc/passwd)", "<script>1</script>", "\x1b[2J"],
             lambda w: None, None, "ok"),
        Case("args-kernels-empty-name", ["kernels", ""], lambda w: None, None, "either", ("name",)),
        Case("args-presets-extra", ["presets", "x"], lambda w: None, None, "error", ("x",)),
        Case("args-ncu-not-a-run", ["ncu", "trace.json.gz"], trace, "trace.json.gz", "error", ("trace.json.gz",)),
    ]
    for label, value in {"zero": "bw=0TB/s", "overflow": "bw=1e400TB/s", "negative": "bw=-3TB/s",
                         "nan": "bw=nanTB/s", "inf": "bw=infTB/s", "unit": "bw=3parsecs", "key": "warp=3",
                         "no-value": "bw=", "flops-zero": "bf16=0TFLOP/s",
                         "flops-negative": "bf16=-1TFLOP/s", "sms-zero": "sms=0", "l2-huge": "l2=1e400MB",
                         "hostile": "bw=3TB/s,<script>=1"}.items():
        cases.append(Case(f"args-whatif-set-{label}", ["whatif", "run", "--set", value, "--out", "w", "--lang", "en"],
                          seed_run, "w", "error", ("--set", value.split("=")[0] or "--set")))
    for label, value in {"reversed": "bw=5:1:3", "zero-steps": "bw=1:5:0", "huge-steps": "bw=1:5:100000000",
                         "garbage": "bw=a:b:c"}.items():
        cases.append(Case(f"args-whatif-sweep-{label}", ["whatif", "run", "--sweep", value, "--out", "w", "--lang",
                          "en"], seed_run, "w", "error", ("--sweep",)))
    for label, spec in {"dotdot": 'name = ".."\n', "dot": 'name = "."\n', "slash": 'name = "a/../../b"\n',
                        "garbage": "name = [\n", "zero-bw": 'name = "x"\nbandwidth = "0 TB/s"\n'}.items():
        cases.append(Case(f"args-whatif-spec-{label}", ["whatif", "run", "--hw", "spec.toml", "--lang", "en"],
                          _both(seed_run, lambda w, s=spec: (w / "spec.toml").write_text(s)), "run", "either",
                          ("spec.toml",)))
    return cases


def all_cases() -> list[Case]:
    from tests.adversarial.cases_trust import trust_cases

    return [*kineto_field_cases(), *kineto_file_cases(), *name_cases(), *nsys_cases(), *csv_cases(),
            *rundir_cases(), *args_cases(), *trust_cases()]
