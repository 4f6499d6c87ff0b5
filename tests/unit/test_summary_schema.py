"""summary.json carries its schema version like run.json: written by every new run, absent from files written
before it had one (read as version 1), and a newer version refused with one line naming the file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from kernelscope.cli import main

DATA = Path(__file__).resolve().parents[1] / "data"
TRACE = DATA / "kineto" / "h200-qwen2-0.5b-p16-n4.trace.json.gz"
OLD_RUN = DATA / "runs" / "h100-qwen2-1.5b-b1-slim"


def test_a_new_run_writes_the_version(tmp_path):
    assert main(["-q", "import", str(TRACE), "--out", str(tmp_path / "run"), "--no-report"]) == 0
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert written["schema_version"] == 1  # docs/run-format.md: this document describes version 1
    run_json = json.loads((tmp_path / "run" / "run.json").read_text())
    assert written["source"] == run_json["source"] and written["device"] == run_json["hardware"]["name"]


def test_a_summary_without_the_key_is_read(tmp_path):
    assert "schema_version" not in json.loads((OLD_RUN / "summary.json").read_text())
    run = tmp_path / "run"
    shutil.copytree(OLD_RUN, run)
    assert main(["-q", "report", str(run), "--lang", "en", "--figure-formats", "none"]) == 0
    assert (run / "report" / "report.md").is_file()


def test_a_newer_summary_is_refused_with_one_line(tmp_path, capsys):
    """compare reads the runs' summaries (a report writes its own anew)."""
    for name in ("a", "b"):
        shutil.copytree(OLD_RUN, tmp_path / name)
    data = json.loads((tmp_path / "b" / "summary.json").read_text())
    data["schema_version"] = 2
    (tmp_path / "b" / "summary.json").write_text(json.dumps(data))
    argv = ["-q", "compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "c"), "--lang", "en",
            "--figure-formats", "none"]
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "summary.json" in lines[0] and "schema version" in lines[0]
    assert not (tmp_path / "c").exists()
