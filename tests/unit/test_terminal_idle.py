"""The closing lines of an import name the GPUs' idle time between kernels and the largest gap, with the numbers the
trace file itself gives (tests/trace_reference.py)."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from kernelscope.analyze.costs.naming import with_kernel_catalog
from kernelscope.cli import main
from kernelscope.commands.run_summary import terminal_summary
from kernelscope.report import formatting as fmt
from tests.trace_reference import reference

TRACE = (Path(__file__).resolve().parents[1] / "data" / "public" / "tracelens"
         / "inference__sglang_decode__sglang_Qwen3-8B_decode.json.gz")
LINE = re.compile(r"^  GPU idle between kernels: (.+) in ([\d,]+) gaps; the largest, (.+), after (.+); "
                  r"the host called the launch that ended it (.+) into it$")


def test_the_closing_lines_name_the_idle_time_and_the_largest_gap(tmp_path):
    assert main(["-q", "import", str(TRACE), "--no-report", "--out", str(tmp_path / "run")]) == 0
    lines = [LINE.match(line) for line in terminal_summary(tmp_path / "run").splitlines() if "GPU idle" in line]
    assert len(lines) == 1 and lines[0] is not None
    total, count, largest, before, wait = lines[0].groups()
    ref = reference(TRACE)
    gap = ref.largest_gap
    assert gap is not None and gap.host_wait_ns is not None
    # Each gap's ends are rounded to ns: totals agree to the µs printed; gaps under 3 ns may be seen on one side only.
    assert total == fmt.duration(sum(ref.idle_gaps_ns))
    assert sum(g > 2 for g in ref.idle_gaps_ns) <= int(count.replace(",", "")) <= len(ref.idle_gaps_ns)
    assert (largest, wait) == (fmt.duration(gap.ns), fmt.duration(gap.host_wait_ns))
    named = with_kernel_catalog(pl.DataFrame({"name": [gap.before], "kind": ["kernel"]}))
    assert before == named["friendly_name"][0]
