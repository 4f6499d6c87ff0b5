"""Signals and races against real commands in their own processes: SIGINT, SIGTERM and SIGHUP at several points
of an import and of a report update leave no partial output, no staging folder and nothing in the temp dir, and
an update either happened whole or not at all; two commands aimed at one output never both write it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.adversarial.test_adversarial import LEFTOVER_MARKS, snapshot

DATA = Path(__file__).resolve().parents[1] / "data"
TRACE = DATA / "kineto" / "h200-llama-3-8b-p16-n3.trace.json.gz"
RUN = DATA / "runs" / "h200-qwen2-0.5b-ncu"
SIGNALS = {"SIGINT": (signal.SIGINT, 130), "SIGTERM": (signal.SIGTERM, 143), "SIGHUP": (signal.SIGHUP, 129)}


def _start(args: list[str], work: Path, temp: Path) -> subprocess.Popen:
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    return subprocess.Popen([sys.executable, "-m", "kernelscope", "-q", *args], cwd=work, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _processes_in(work: Path) -> list[str]:
    """Processes still running in `work` (helpers inherit the command's working directory), after a grace
    period for them to notice that their parent is gone."""
    def running() -> list[str]:
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if Path(os.readlink(entry / "cwd")).is_relative_to(work):
                        found.append(entry.name)
                except OSError:
                    pass
        return found
    deadline = time.monotonic() + 10
    while (left := running()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _leftovers(work: Path, temp: Path) -> list[str]:
    marks = [rel for rel in snapshot(work) if any(m in Path(rel).name for m in LEFTOVER_MARKS)]
    return marks + os.listdir(temp) + [f"process {pid}" for pid in _processes_in(work)]


@pytest.fixture
def place(tmp_path):
    work, temp = tmp_path / "work", tmp_path / "temp"
    work.mkdir()
    temp.mkdir()
    return work, temp


@pytest.mark.parametrize("delay", [0.8, 2.0, 3.5])
@pytest.mark.parametrize("name", list(SIGNALS))
@pytest.mark.slow
def test_signal_during_import_leaves_nothing(place, name, delay):
    work, temp = place
    signum, code = SIGNALS[name]
    proc = _start(["import", str(TRACE), "--out", "out"], work, temp)
    time.sleep(delay)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert "Traceback" not in err, err
    if proc.returncode == 0:  # it had finished: the run is whole
        assert (work / "out" / "run.json").is_file() and (work / "out" / "report" / "report.html").is_file()
    elif proc.returncode == -signum:  # before kernelscope took the signal over: it had written nothing
        assert not (work / "out").exists()
    else:
        assert proc.returncode == code, (proc.returncode, err)
        assert len(err.strip().splitlines()) == 1 and not (work / "out").exists()
    assert _leftovers(work, temp) == []


@pytest.mark.parametrize("delay", [0.8, 2.0])
@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
@pytest.mark.slow
def test_signal_during_a_parallel_import_of_ranks_leaves_nothing(place, name, delay):
    """Several files are read by helper processes (commands/importers/rank_files.py): a signal stops them too and
    removes their spool."""
    work, temp = place
    signum, code = SIGNALS[name]
    files = [str(TRACE)] * 4
    proc = _start(["import", *files, "--out", "out", "--no-report", "--jobs", "2"], work, temp)
    time.sleep(delay)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert "Traceback" not in err, err
    if proc.returncode == 0:
        assert (work / "out" / "kernels.parquet").is_file()
    elif proc.returncode == -signum:
        assert not (work / "out").exists()
    else:
        assert proc.returncode == code, (proc.returncode, err)
        assert len(err.strip().splitlines()) == 1 and not (work / "out").exists()
    assert _leftovers(work, temp) == []


@pytest.fixture(scope="module")
def updated_files(tmp_path_factory) -> set[str]:
    """The entries of the run after an uninterrupted report."""
    import shutil

    work = tmp_path_factory.mktemp("reference")
    shutil.copytree(RUN, work / "run")
    assert subprocess.run([sys.executable, "-m", "kernelscope", "-q", "report", "run"], cwd=work).returncode == 0
    return set(snapshot(work / "run"))


@pytest.mark.parametrize("delay", [1.0, 2.5])
@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
@pytest.mark.slow
def test_signal_during_report_update_leaves_the_run_whole(place, name, delay, updated_files):
    import shutil

    work, temp = place
    signum, code = SIGNALS[name]
    shutil.copytree(RUN, work / "run")
    before = snapshot(work / "run")
    proc = _start(["report", "run"], work, temp)
    time.sleep(delay)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert "Traceback" not in err, err
    assert _leftovers(work, temp) == []
    if proc.returncode != 0:
        assert proc.returncode in (code, -signum), (proc.returncode, err)
        after = snapshot(work / "run")
        # Interrupted before the swap: as it was; after it (the signal waits out the swap): wholly updated.
        assert after == before or set(after) == updated_files
    else:
        assert (work / "run" / "report" / "report.md").is_file()


def test_two_imports_into_one_out_one_refused(place):
    work, temp = place
    procs = [_start(["import", str(TRACE), "--out", "out", "--no-report"], work, temp) for _ in range(2)]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    refused = next(err for code, err in results if code == 2)
    # refused while the other writes (its claim is locked), or after it finished (the run is there)
    assert ("another kernelscope command is writing" in refused or "already exists" in refused) and \
        len(refused.strip().splitlines()) == 1
    assert (work / "out" / "kernels.parquet").is_file() and _leftovers(work, temp) == []


@pytest.mark.slow
def test_two_report_updates_of_one_run_do_not_mix(place):
    import shutil

    work, temp = place
    shutil.copytree(RUN, work / "run")
    procs = [_start(["report", "run", "--lang", "en"], work, temp) for _ in range(2)]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    for code, err in results:
        assert code == 0 or (code == 2 and "another kernelscope command is updating" in err), results
    assert any(code == 0 for code, _ in results)
    assert (work / "run" / "report" / "report.md").is_file() and _leftovers(work, temp) == []


def _rank_started(work: Path) -> bool:
    """A rank of `profile --gpus` is running: its record folder holds the launcher's per-rank log folders."""
    return any(p.name == "stderr.log" for p in work.rglob("stderr.log"))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_signal_while_ranks_run_stops_them_all_and_leaves_nothing(place, name):
    work, temp = place
    signum, code = SIGNALS[name]
    proc = _start(["profile", "--gpus", "2", "--device", "cpu", "--prompt-len", "16", "--new-tokens", "64",
                   "--repeats", "5", "--out", "out"], work, temp)
    deadline = time.monotonic() + 120
    while not _rank_started(work) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None and _rank_started(work)
    time.sleep(2.0)  # the ranks are building the model or generating
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, (proc.returncode, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (work / "out").exists()
    # No rank, launcher or other process of the command is left (ranks run in the command's folder).
    assert _leftovers(work, temp) == []


_SIGNAL_AT_THE_COMMIT = """
import os, signal, sys
from kernelscope import cli
from kernelscope.load import staging

moment = sys.argv[1]
original = staging.mark_output_in_place
def at_the_commit():
    if moment == "before":  # the output was just renamed into place; the signal is held by that block
        os.kill(os.getpid(), signal.{name})
    original()
    if moment == "after":  # the command is over but for returning and printing the run's path
        os.kill(os.getpid(), signal.{name})
staging.mark_output_in_place = at_the_commit
sys.argv = ["kernelscope", "-q", *sys.argv[2:]]
cli.entry()
"""


@pytest.mark.parametrize("moment", ["before", "after"])
@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
@pytest.mark.slow
def test_a_signal_once_the_output_is_in_place_leaves_a_finished_command(place, name, moment):
    """A signal that lands as the finished run is renamed into place, or after it, no longer stops the command:
    it exits 0 with its output whole, never 'interrupted' with the run left behind (which a user would take for
    a partial result)."""
    work, temp = place
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    proc = subprocess.run([sys.executable, "-c", _SIGNAL_AT_THE_COMMIT.replace("{name}", name), moment, "import",
                           str(TRACE), "--out", "out", "--no-report"], cwd=work, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    assert proc.stderr == "" and proc.stdout.strip() == str((work / "out").resolve())
    assert (work / "out" / "kernels.parquet").is_file() and _leftovers(work, temp) == []


_SIGNAL_BEFORE_THE_COMMAND = """
import os, signal, sys
from kernelscope import cli
from kernelscope.report import figure_formats

class Chosen:  # the figure formats' context variable, set by main() after its signal handlers are in place
    def __init__(self, var):
        self.var = var
    def set(self, value):
        os.kill(os.getpid(), signal.{name})
        return self.var.set(value)
    def reset(self, token):
        self.var.reset(token)
    def get(self, *default):
        return self.var.get(*default)

figure_formats.chosen = Chosen(figure_formats.chosen)
sys.argv = ["kernelscope", "-q", *sys.argv[1:]]
cli.entry()
"""


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_a_signal_before_the_command_starts_ends_it_in_one_line(place, name):
    """A signal between the installation of kernelscope's handlers and the command's start (a loaded machine makes
    that window long) ends the command like any other: one line, 128 + the signal's number, no traceback."""
    work, temp = place
    signum, code = SIGNALS[name]
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    proc = subprocess.run([sys.executable, "-c", _SIGNAL_BEFORE_THE_COMMAND.replace("{name}", name), "import",
                           str(TRACE), "--out", "out", "--no-report"], cwd=work, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (work / "out").exists() and _leftovers(work, temp) == []
