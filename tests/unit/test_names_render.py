"""Names read from inputs render literally: in Markdown table cells (as text and as code), in the sentences of
findings (rendered once, never escaped twice), in the HTML page's title, and in figure labels (no mathtext)."""

from __future__ import annotations

import html
import re
from pathlib import Path
from types import SimpleNamespace

import msgspec
import pytest
from markdown_it import MarkdownIt

from kernelscope.analyze.findings import Finding, Metric
from kernelscope.contracts.trace_records import UnattributedReplays
from kernelscope.report import figures
from kernelscope.report import formatting as fmt
from kernelscope.report.html import markdown_to_html
from kernelscope.report.report_context import _findings
from kernelscope.report.report_context import report_environment as _env

NAMES = ["aten::__or__", "aten::__and__", "a|b", "x\ny", "*bold*", "**", "$x$ and $y$", "`tick`", "_a_",
         "<b>x</b>", "a\\|b", "\\", "a\\", "[x](y)", "&amp;", "~~s~~", "1. x", "- x", "# h", "| x |", "```",
         "__init__", "a*b*c", "{{ x }}", "{% if %}"]
MD = MarkdownIt("commonmark", {"html": False}).enable("table")


def _cell_texts(markdown: str) -> list[str]:
    cells = re.findall(r"<td>(.*?)</td>", MD.render(markdown), re.S)
    return [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in cells]


@pytest.mark.parametrize("name", NAMES)
def test_a_name_in_a_table_cell_reads_as_written(name):
    table = fmt.markdown_table(["Kernel", "Full name"], [False, False], [[fmt.markdown_text(name), fmt.code(name)]])
    # A line break cannot stand in a table cell: it is one space, everything else is kept.
    assert _cell_texts(table) == [name.replace("\n", " ")] * 2
    assert table.count("\n") == 2  # header, alignment, one row: nothing opened another row


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_name_a_finding_prints_is_escaped_once(lang):
    rule = {"en": "Attention runs on {{ kernel }} ({{ library }}).", "zh": "注意力由 {{ kernel }}（{{ library }}）执行。"}
    finding = Finding("attention", "observation", {"kernel": Metric("aten::__or__"), "library": Metric("lib|x")}, rule)
    (out,) = _findings(SimpleNamespace(findings=[finding]), lang)
    # Printed by the report's template, as report.md.j2 prints findings.
    rendered = MD.render(_env(lang).from_string("- **{{ f.id }}** {{ f.text }}").render(f=out))
    text = html.unescape(re.sub(r"<[^>]+>", "", rendered))
    assert "aten::__or__" in text and "lib|x" in text
    assert "<strong>or</strong>" not in rendered and "\\" not in text


def test_the_html_title_is_the_heading_as_shown(tmp_path: Path):
    page = markdown_to_html("# Report of " + fmt.markdown_text("tiny_model__x__") + "\n\ntext\n", tmp_path, "en",
                            title="unused")
    assert "<title>Report of tiny_model__x__</title>" in page


def test_figure_labels_are_not_mathtext():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    label = ax.text(0, 0, figures.literal("cost_$x$_$y$"))
    fig.canvas.draw()
    # Drawn as plain text: matplotlib's own check says it is no math, and the escapes are gone when shown.
    shown, is_math = label._preprocess_math(label.get_text())
    plt.close(fig)
    assert (shown, is_math) == ("cost_$x$_$y$", False)


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("name", ["<b>x</b>", "`tick`", "{{ x }}", "a|b", "x\ny"])
def test_why_a_replay_stayed_unattributed_is_worded_in_the_page_language_with_names_as_code(lang, name):
    """The reason comes as data (contracts.trace_records.UnattributedReplays): the sentence is the page's own, in its
    language, with the kernel names read from the trace as code, rendered literally."""
    u = UnattributedReplays(reason="English text of an older run", replays=2, kernels=6, time_ns=5,
                            kernels_per_replay=3, captures_given=False, eager_steps=True, step=4, kernel=1,
                            replay_kernel=name, step_kernel="gemm_" + name)
    line = _unattributed_line(lang, u)
    assert "English text" not in line and "\\`" not in line
    assert ("no capture trace given" in line) == (lang == "en") and "`import --capture`" in line
    codes = [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<code>(.*?)</code>", MD.render(line), re.S)]
    assert codes == ["import --capture", name.replace("\n", " "), "gemm_" + name.replace("\n", " ")]
    # A run written before the reason was data keeps its own words.
    old = UnattributedReplays(reason="English text of an older run", replays=2, kernels=6, time_ns=5)
    assert _unattributed_line(lang, old).endswith("English text of an older run")


def _unattributed_line(lang: str, u: UnattributedReplays) -> str:
    # As the report hands a run's record to its words (report_context._replays).
    values = {**msgspec.structs.asdict(u), "share": 0.5}
    return str(_env(lang).from_string("{{ say('replays_unattributed', u=u) }}").render(u=values))


@pytest.mark.parametrize("name", NAMES)
def test_a_name_as_code_in_a_sentence_reads_as_written(name):
    # Outside tables a code span shows a backslash before a pipe as it is: inline_code leaves pipes alone.
    sentence = f"Source: {fmt.inline_code(name)}."
    codes = [html.unescape(c) for c in re.findall(r"<code>(.*?)</code>", MD.render(sentence), re.S)]
    assert codes == [name.replace("\n", " ")]


def test_why_events_were_left_out_is_worded_in_the_page_language(tmp_path):
    """The reader's reasons for leaving out or repairing events are words of the page: a kernel name over the
    length limit is counted, and each language says why in its own words."""
    from kernelscope.cli import main
    from kernelscope.load.names import MAX_NAME
    from tests.conftest import write_trace

    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 10,
         "args": {"External id": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1, "dur": 2,
         "args": {"External id": 1, "correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "k" * (MAX_NAME + 10), "pid": 0, "tid": 7, "ts": 3, "dur": 4,
         "args": {"External id": 1, "correlation": 7, "device": 0, "stream": 7}},
    ]
    out = tmp_path / "run"
    assert main(["-q", "import", str(write_trace(tmp_path / "t.json", events)), "--out", str(out),
                 "--lang", "en,zh"]) == 0
    en = (out / "report" / "report.md").read_text().split("\n## ")[1]
    zh = (out / "report" / "report.zh.md").read_text().split("\n## ")[1]
    assert "1 (name cut to the length limit)" in en
    assert "1（名称超长被截断）" in zh and "length limit" not in zh


def test_an_empty_name_is_a_dash_not_an_empty_code_span():
    """An empty code span (two backticks) is no markup: it prints as backticks. Empty or blank text reads as a dash,
    in tables and in sentences; other text keeps its code span."""
    for blank in ("", "   ", None):
        assert fmt.code(blank) == "–" and fmt.inline_code(blank) == "–"
    assert fmt.code("x") == "`x`"
