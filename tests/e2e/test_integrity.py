"""The integrity audit on every import: summary.json `integrity`, run.json's per-file `audit` and the report's section
(English and Chinese) count what the file holds that is not whole or not consistent. Real traces: an H200 run whose
cuBLASLt kernels overlap on their stream under programmatic dependent launch, the same trace cut mid-event, nsys
kernel summaries. Expected counts are computed here from the files (tests/trace_reference.py, the standard
library)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tests.audit_reference import audit_reference
from tests.e2e.test_cli import kernelscope

DATA = Path(__file__).resolve().parents[1] / "data"
PDL_TRACE = DATA / "kineto" / "h200-deepseek-v3-p16-n3.trace.json.gz"
SUMMED = ("stream_overlaps", "stream_overlap_ns", "stream_overlaps_pdl", "outside_window", "launches_without_kernel",
          "kernels_without_launch", "flows", "flows_unpaired", "clock_jumps", "devices_named", "devices_silent",
          "dropped_events")


def _import(tmp_path: Path, *files: Path) -> Path:
    out = tmp_path / "run"
    result = kernelscope("import", *map(str, files), "--out", str(out), "--figure-formats", "none")
    assert result.returncode == 0, result.stderr
    return out


def test_an_import_audits_its_file_in_summary_run_and_report(tmp_path):
    expected = audit_reference(PDL_TRACE)
    assert expected["stream_overlaps"] == expected["stream_overlaps_pdl"] > 0  # cuBLASLt's split-K reduce under PDL
    run = _import(tmp_path, PDL_TRACE)
    audit = json.loads((run / "run.json").read_text())["trace"]["files"][0]["audit"]
    assert {key: audit[key] for key in expected if key != "unclosed"} == {k: v for k, v in expected.items()
                                                                          if k != "unclosed"}
    integrity = json.loads((run / "summary.json").read_text())["integrity"]
    assert integrity["files"] == 1 and integrity["unclosed_files"] == 0
    assert {key: integrity[key] for key in SUMMED} == {key: expected[key] for key in SUMMED}
    assert "stream_overlaps" in integrity["counted"] and "flows_unpaired" in integrity["counted"]
    text = (run / "report" / "report.md").read_text()
    section = text.split("## Integrity audit")[1].split("\n## ")[0]
    row = next(line for line in section.splitlines() if line.startswith("| Kernels overlapping on one stream"))
    assert f"| {expected['stream_overlaps']:,} |" in row and "PDL explains them all" in row
    assert f"{expected['stream_overlap_ns'] / 1e3:.3f} µs" in row
    flows = next(line for line in section.splitlines() if line.startswith("| Flow arrows that point nowhere"))
    assert f"| {expected['flows_unpaired']:,} |" in flows and f"{expected['flows']:,} flow events" in flows
    assert "Integrity audit: 2 checks found something" in text.split("## Setup")[0]
    zh = (run / "report" / "report.zh.md").read_text()
    assert "## 完整性审计" in zh and "全部可由 PDL 解释" in zh


def test_a_cut_file_is_counted_as_truncated(tmp_path):
    with gzip.open(PDL_TRACE) as f:
        events = json.load(f)["traceEvents"]
    whole = ",\n".join(json.dumps(e) for e in events[:-1])
    half = json.dumps(events[-1])[: len(json.dumps(events[-1])) // 2]
    cut = tmp_path / "cut.json"
    cut.write_text("[\n" + whole + ",\n" + half)  # the Chrome array form, cut in the middle of its last event
    run = _import(tmp_path, cut)
    audit = json.loads((run / "run.json").read_text())["trace"]["files"][0]["audit"]
    assert audit["unclosed"] is True and audit["trailing_bytes"] == len(half.encode())
    integrity = json.loads((run / "summary.json").read_text())["integrity"]
    assert integrity["unclosed_files"] == 1 and integrity["trailing_bytes"] == len(half.encode())
    section = (run / "report" / "report.md").read_text().split("## Integrity audit")[1]
    assert "| Truncated files | 1 |" in section and f"| Bytes after the last event | {len(half.encode()):,} |" in section


@pytest.mark.slow
def test_kernel_summaries_have_no_timeline_to_audit(tmp_path):
    run = _import(tmp_path, DATA / "nsys" / "prefill.csv", DATA / "nsys" / "decode.csv")
    integrity = json.loads((run / "summary.json").read_text())["integrity"]
    assert integrity["files"] == 2 and integrity["timeline"] is False and integrity["counted"] == []
    assert all(integrity[key] is None for key in ("stream_overlaps", "outside_window", "flows_unpaired"))
    section = (run / "report" / "report.md").read_text().split("## Integrity audit")[1].split("\n## ")[0]
    assert "Kernel summaries have no timeline" in section
    assert "| Kernels overlapping on one stream | – | Not applicable" in section


@pytest.mark.parametrize("name", ["h200-qwen2-0.5b-p16-n4.trace.json.gz"])
@pytest.mark.slow
def test_a_trace_without_overlaps_says_every_kernel_waits_its_turn(tmp_path, name):
    expected = audit_reference(DATA / "kineto" / name)
    assert expected["stream_overlaps"] == 0
    run = _import(tmp_path, DATA / "kineto" / name)
    section = (run / "report" / "report.md").read_text().split("## Integrity audit")[1]
    assert "| Kernels overlapping on one stream | 0 | Every kernel on a stream starts after the previous one ended. |" \
        in section
