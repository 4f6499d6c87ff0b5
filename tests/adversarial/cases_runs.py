"""Adversarial cases of run directories and arguments (cases.py says what a case is): broken run directories for
report, export, whatif and compare, and hostile arguments of every command."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import polars as pl

from tests.adversarial.cases import (
    KINETO_SEED,
    RUN_SEED,
    SLIM_RUNS,
    Case,
    _both,
    _copy,
    _edit_run,
    _json_edit,
    _parquet_edit,
)


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
