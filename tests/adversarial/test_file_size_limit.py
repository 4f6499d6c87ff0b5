"""A write the system stops (a full disk, `ulimit -f`) ends in one line that names the output the user gave,
with nothing left half-written: the staging folder goes, the output stays absent."""

from __future__ import annotations

import gzip
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
TRACE = DATA / "foreign" / "captured" / "hf_generate_plain.json.gz"


def _limited(limit_bytes: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    return apply


@pytest.mark.parametrize("command", ["import", "export"])
@pytest.mark.slow
def test_a_write_past_the_file_size_limit_names_the_output(tmp_path, command):
    plain = tmp_path / "trace.json"  # plain JSON: read from a map, so only the writes meet the limit
    plain.write_bytes(gzip.decompress(TRACE.read_bytes()))
    env = dict(os.environ, TMPDIR=str(tmp_path))
    if command == "import":
        argv, output = ["import", str(plain), "--out", str(tmp_path / "out"), "--figure-formats", "none"], "out"
    else:
        run = tmp_path / "run"
        subprocess.run([sys.executable, "-m", "kernelscope", "-q", "import", str(plain), "--out", str(run),
                        "--no-report"], check=True, env=env, timeout=300)
        argv, output = ["export", str(run), "--format", "perfetto", "--out", str(tmp_path / "out")], "out"
    result = subprocess.run([sys.executable, "-m", "kernelscope", "-q", *argv], capture_output=True, text=True,
                            env=env, timeout=300, preexec_fn=_limited(64 << 10))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert str(tmp_path / output) in lines[0] and "File too large" in lines[0], lines[0]
    assert not (tmp_path / output).exists()
    assert not [p.name for p in tmp_path.iterdir() if ".partial-" in p.name]
