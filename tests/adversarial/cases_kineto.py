"""Adversarial cases of the Kineto reader (cases.py says what a case is): one field of one event or of the
document set to a hostile value, the file as a whole (truncation, encodings, compression, file kinds), and hostile
kernel, device, op and phase names that must be read back verbatim."""

from __future__ import annotations

import copy
import gzip
import json
import os
from collections.abc import Callable
from pathlib import Path

import polars as pl

from tests.adversarial.cases import (
    Case,
    Check,
    Setup,
    _events,
    _mutated_kineto,
    _write_json,
    kineto_seed,
)

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
