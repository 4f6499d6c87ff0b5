"""`import` shows its stages as they run: reading the file (with its chunks counted as they are decoded, for a large
trace), attribution, the tables and the report. On the committed H200 trace (12.5 MB of JSON: two chunks of the
native reader's 8 MB, one of msgspec's 16 MB)."""

from __future__ import annotations

import gzip
import io
import re
from pathlib import Path

from rich.console import Console

from kernelscope.commands.importers.traces import import_traces
from kernelscope.load.kineto.reader import default_chunk_bytes
from kernelscope.progress import Steps

TRACE = Path(__file__).resolve().parents[1] / "data" / "kineto" / "h200-llama-3-8b-p16-n3.trace.json.gz"


def test_import_shows_each_stage_and_the_chunks_read(tmp_path):
    screen = io.StringIO()
    steps = Steps(Console(file=screen, force_terminal=True, width=200, color_system=None))
    plain = tmp_path / "trace.json"
    plain.write_bytes(gzip.decompress(TRACE.read_bytes()))
    import_traces([plain], tmp_path / "run", tmp_path, report=False, jobs=1, steps=steps)
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())
    chunks = -(-plain.stat().st_size // default_chunk_bytes())
    assert f"Reading trace.json ({plain.stat().st_size / 1e6:,.1f} MB)" in shown
    assert f"{chunks}/{chunks}" in shown
    for stage in ("Auditing the trace and attributing its kernels", "Costs, names and the run's summary",
                  "Writing the tables"):
        assert stage in shown, stage
