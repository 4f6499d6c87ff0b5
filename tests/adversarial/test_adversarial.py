"""Every adversarial case (cases.py) ends as promised: exit 0 with correct output, or exit 2 and one line that names
the file or argument at fault; never a traceback; nothing written outside the named output; the output absent or
unchanged after a refusal; nothing left in the temporary directory or beside the output."""

from __future__ import annotations

import contextlib
import hashlib
import io
import multiprocessing.util
import os
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
    assert len(CASES) >= 250 and len({c.id for c in CASES}) == len(CASES)
    assert {"import", "report", "export", "whatif", "compare", "hw", "kernels", "ncu", "presets"} <= commands
    assert {"kineto-field", "kineto-content", "names-kernel", "nsys-kernel", "stats-total", "ncu-id",
            "rundir-report", "args-whatif"} <= families


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
    return output is not None and (rel == output or rel.startswith(output.rstrip("/") + "/"))


def run_case(case: Case, tmp_path: Path) -> tuple[int, str, Path]:
    work, temp = tmp_path / "work", tmp_path / "temp"
    work.mkdir()
    temp.mkdir()
    case.setup(work)
    before = snapshot(work)
    err = io.StringIO()
    old_cwd, old_tempdir, old_env = os.getcwd(), tempfile.tempdir, dict(os.environ)
    os.chdir(work)
    tempfile.tempdir = str(temp)
    os.environ.update(case.env, TMPDIR=str(temp))
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = main(["-q", *case.argv])
            except SystemExit as exc:  # argparse refusing an argument
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        os.chdir(old_cwd)
        tempfile.tempdir = old_tempdir
        os.environ.clear()
        os.environ.update(old_env)
    stderr = err.getvalue()
    after = snapshot(work)

    assert "Traceback" not in stderr, stderr
    assert code in (0, 2), f"exit {code}: {stderr}"
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


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_adversarial_case(case: Case, tmp_path: Path):
    code, _, work = run_case(case, tmp_path)
    if code == 0 and case.check is not None:
        case.check(work)
