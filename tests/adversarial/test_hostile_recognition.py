"""Model recognition reads names from the trace (Python frames of model files, nn.Module classes, op names): a
real vLLM trace whose frames and module classes carry markup around the names recognition looks for is still
recognised from the parts it trusts, and the markup reaches the report only as inert text."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

from kernelscope.cli import main

SEED = Path(__file__).resolve().parents[1] / "data" / "public" / "tracelens" / "traces__b200__eager_trace.json.gz"
FRAME = "<img src=x onerror=window.__ks_pwned=1>"
CLASS = "<script>window.__ks_pwned=2</script>"


def test_markup_around_recognised_names_is_not_printed(tmp_path):
    doc = json.loads(gzip.decompress(SEED.read_bytes()))
    framed = classed = 0
    for e in doc["traceEvents"]:
        name = e.get("name", "")
        if e.get("cat") == "python_function" and "model_executor/models/gpt_oss.py" in name:
            e["name"] = name.replace("gpt_oss.py", f"gpt_oss.py{FRAME}")
            framed += 1
        elif e.get("cat") == "python_function" and name.startswith("nn.Module: FusedMoE"):
            e["name"] = name.replace("nn.Module: ", f"nn.Module: {CLASS}")
            classed += 1
    assert framed and classed
    trace = tmp_path / "trace.json.gz"
    trace.write_bytes(gzip.compress(json.dumps(doc).encode()))
    out = tmp_path / "run"
    assert main(["-q", "import", str(trace), "--out", str(out)]) == 0
    recognition = json.loads((out / "run.json").read_text())["model_recognition"]
    # The model file's name is read up to `.py`; the class with markup is no class name and is not a clue.
    assert recognition["entry"] == "gpt-oss-120b"
    assert not [c for c in recognition["evidence"] if "<" in c["seen"]]
    # Module paths keep the class as the trace named it, as inert text: inside code spans in Markdown, escaped in
    # HTML.
    for page in ("report.md", "report.zh.md"):
        text = re.sub(r"(`+).+?\1", " ", (out / "report" / page).read_text())
        assert "window.__ks_pwned" not in text, page
    for page in ("report.html", "report.zh.html"):
        text = (out / "report" / page).read_text()
        assert FRAME not in text and CLASS not in text, page
