"""Every adversarial case (cases.py) ends as promised: exit 0 with correct output, or exit 2 and one line that names
the file or argument at fault; never a traceback; nothing written outside the named output; the output absent or
unchanged after a refusal; nothing left in the temporary directory or beside the output."""

from __future__ import annotations

import contextlib
import hashlib
import io
import multiprocessing.util
import os
import signal
import sys
import tempfile
from pathlib import Path

import pytest

from kernelscope.cli import main
from tests.adversarial.cases import Case, all_cases

CASES = all_cases()
# multiprocessing keeps one folder for its fork server for the life of the process (removed at exit): make it
# now, in the ordinary temp dir, so no case's private temp dir holds it.
multiprocessing.util.get_temp_dir()
LEFTOVER_MARKS = (".partial-", ".old-", ".update.")


def test_the_suite_is_large_and_spread_over_every_reader_and_command():
    families = {c.id.split("-")[0] + "-" + c.id.split("-")[1] for c in CASES}
    commands = {c.argv[0] for c in CASES}
    assert len(CASES) >= 400 and len({c.id for c in CASES}) == len(CASES)
    assert {"import", "report", "export", "whatif", "compare", "hw", "kernels", "ncu", "presets", "query", "check",
            "api"} <= commands
    assert {"kineto-field", "kineto-content", "names-kernel", "nsys-kernel", "stats-total", "ncu-id",
            "rundir-report", "args-whatif", "link-whatif", "link-export", "link-report", "foreign-whatif",
            "stale-claim", "stale-update", "tampered-report", "tampered-api", "tampered-query", "sql-query",
            "sql-check", "sql-api", "resource-gzip", "resource-query", "values-ncu", "values-csv"} <= families


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under root: its kind and, for files, a digest of the content."""
    entries = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            path = Path(dirpath, name)
            entries[str(path.relative_to(root))] = "link" if path.is_symlink() else "dir"
        for name in filenames:
            path = Path(dirpath, name)
            rel = str(path.relative_to(root))
            if path.is_symlink() or not path.is_file():
                entries[rel] = "special"
            else:
                entries[rel] = hashlib.sha1(path.read_bytes()).hexdigest()
    return entries


def _inside(rel: str, output: str | None) -> bool:
    """rel is the output, inside it, or a hidden staging folder of it (`.out.partial-…`: a killed command's
    leftover, which the next command aimed at that output removes)."""
    if output is None:
        return False
    head = rel.split("/")[0]
    stem = f".{output.rstrip('/')}"
    return rel == output or rel.startswith(output.rstrip("/") + "/") or head.startswith(
        (f"{stem}.partial-", f"{stem}.old-"))


CASE_SECONDS = 240  # a case still running after this is a hang


class Hang(BaseException):
    """Raised by the alarm in a case that does not end (BaseException: the command's own error handling must
    not turn it into an exit code)."""


def _on_alarm(signum: int, frame: object) -> None:
    raise Hang(f"no end after {CASE_SECONDS} s")


def _api(name: str, *args: str) -> int:
    """A Python API call as a command: 0, or the package's own error as one line and 2. Any other exception
    (RecursionError, KeyError, a DuckDB error) fails the case."""
    import kernelscope
    from kernelscope.errors import UserError
    from kernelscope.load.dataset import fetch_rows

    try:
        if name == "open_run":
            kernelscope.open_run(args[0])
        elif name == "open_runs":
            kernelscope.open_runs(args[0], args[1]).fetchall()
        elif name == "query":
            dataset = kernelscope.connect_runs(args[1])
            print(fetch_rows(dataset.query(args[0])))
        else:
            raise AssertionError(f"no API call {name}")
    except UserError as exc:
        print(f"kernelscope: error: {exc}", file=sys.stderr)
        return 2
    return 0


def _call(argv: list[str]) -> int:
    return _api(*argv[1:]) if argv[0] == "api" else main(["-q", *argv])


def run_case(case: Case, tmp_path: Path) -> tuple[int, str, Path]:
    work, temp = tmp_path / "work", tmp_path / "temp"
    work.mkdir()
    temp.mkdir()
    case.setup(work)
    before = snapshot(work)
    err, out = io.StringIO(), io.StringIO()
    old_cwd, old_tempdir, old_env = os.getcwd(), tempfile.tempdir, dict(os.environ)
    os.chdir(work)
    tempfile.tempdir = str(temp)
    os.environ.update(case.env, TMPDIR=str(temp))
    previous_alarm = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                code = _call(case.argv)
            except SystemExit as exc:  # argparse refusing an argument
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_alarm)
        os.chdir(old_cwd)
        tempfile.tempdir = old_tempdir
        os.environ.clear()
        os.environ.update(old_env)
    stderr, stdout = err.getvalue(), out.getvalue()
    after = snapshot(work)

    assert "Traceback" not in stderr, stderr
    assert code in case.codes, f"exit {code}: {stderr}"
    # Names from the input never reach the terminal as escape sequences.
    assert "\x1b" not in stderr and "\x1b" not in stdout, repr(stderr[:300])
    if case.check_stdout is not None:
        case.check_stdout(stdout)
    if case.expect == "error":
        assert code == 2, f"accepted: {stderr}"
    if case.expect == "ok":
        assert code == 0, stderr
    changed = {rel for rel in before.keys() | after.keys() if before.get(rel) != after.get(rel)}
    outside = {rel for rel in changed if not _inside(rel, case.output)}
    assert not outside, f"written outside the output: {sorted(outside)[:5]}"
    leftovers = [rel for rel in after if any(mark in Path(rel).name for mark in LEFTOVER_MARKS)]
    assert not leftovers, leftovers
    assert os.listdir(temp) == [], f"left in the temp dir: {os.listdir(temp)}"
    if code == 2:
        lines = stderr.strip().splitlines()
        assert len(lines) == 1, stderr
        assert lines[0].startswith("kernelscope"), lines[0]
        if case.names:
            assert any(name in lines[0] for name in case.names), (case.names, lines[0])
        assert not {rel for rel in changed if _inside(rel, case.output)}, "the output changed on a refusal"
    return code, stderr, work


def _tiered(cases: list[Case]) -> list:
    """The first case of each family (reader or command and what is broken: `kineto-field`, `rundir-report`, …) runs
    in the fast tier; the others, and every resource bomb (gzip, Parquet, query), are marked slow and run in the full
    suite."""
    seen: set[str] = set()
    params = []
    for case in cases:
        family = "-".join(case.id.split("-")[:2])
        fast = family not in seen and not family.startswith("resource-")
        params.append(pytest.param(case, id=case.id, marks=() if fast else pytest.mark.slow))
        seen.add(family)
    return params


@pytest.mark.parametrize("case", _tiered(CASES))
def test_adversarial_case(case: Case, tmp_path: Path):
    code, _, work = run_case(case, tmp_path)
    if code == 0 and case.check is not None:
        case.check(work)
