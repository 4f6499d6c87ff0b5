"""A real trace whose kernel, op, module, phase and device names are hostile (Markdown images of local files,
remote images, script tags, event handlers, javascript: links, line breaks and pipes that would inject headings
and table rows): its report is rendered, read as Markdown, parsed as HTML, and opened in headless Chromium, which
must run no script of the input, make no network request and read no file beyond the page."""

from __future__ import annotations

import copy
import gzip
import html.parser
import json
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from kernelscope.cli import main
from tests.adversarial.cases_kineto import HOSTILE_NAMES
from tests.e2e.test_report import _browser

SEED = Path(__file__).resolve().parents[1] / "data" / "kineto" / "h200-qwen2-0.5b-p16-n4.trace.json.gz"
PAYLOADS = list(HOSTILE_NAMES.values())


def _hostile_trace(path: Path) -> dict[str, str]:
    """The seed with hostile names in every kind of name the report prints; returns what was renamed."""
    with gzip.open(SEED, "rt") as f:
        doc = json.load(f)
    doc = copy.deepcopy(doc)
    events = doc["traceEvents"]
    kernels = {}
    by_name: dict[str, list[dict]] = {}
    for e in events:
        if e.get("cat") == "kernel":
            by_name.setdefault(e["name"], []).append(e)
    # The most frequent kernels get the payloads, so they reach the top-kernel tables of every phase.
    for payload, (name, group) in zip(PAYLOADS, sorted(by_name.items(), key=lambda kv: -len(kv[1])), strict=False):
        for e in group:
            e["name"] = payload
        kernels[name] = payload
    for e in events:
        if e.get("cat") == "cpu_op" and e["name"] == "aten::mm":
            e["name"] = "aten::mm<img src=x onerror=window.__ks_pwned=1>"
        if e.get("cat") == "user_annotation" and e["name"] == "ks.phase:prefill":
            e["name"] = "ks.phase:pre/../fill<script>window.__ks_pwned=1</script>"
        if e.get("cat") == "user_annotation" and e["name"].startswith("ks.module:model.layers.0.mlp.down_proj"):
            e["name"] = e["name"].replace("down_proj", "down_proj![m](/etc/hostname)")
    doc["deviceProperties"][0]["name"] = "NVIDIA H200\n# Injected | cell |\n![d](/etc/passwd)"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return kernels


@pytest.fixture(scope="module")
def hostile_report(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hostile")
    renamed = _hostile_trace(root / "trace.json.gz")
    assert len(renamed) == len(PAYLOADS)
    assert main(["-q", "import", str(root / "trace.json.gz"), "--out", str(root / "run")]) == 0
    return root / "run" / "report"


class _Tags(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


@pytest.mark.parametrize("name", ["report.md", "report.zh.md"])
@pytest.mark.slow
def test_markdown_has_no_markup_from_the_input(hostile_report, name):
    text = (hostile_report / name).read_text()
    assert "### Idle gaps" in text or "### 空闲间隙" in text  # the hostile names stand in the largest-gaps table too
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    inline = [child for t in tokens for child in (t.children or [])]
    images = [c.attrGet("src") for c in inline if c.type == "image"]
    assert images and all(src.startswith("figures/") and "/" not in src[8:] for src in images), images
    assert not [c for c in inline if c.type == "link_open" and not str(c.attrGet("href")).startswith("#")]
    assert not [t for t in tokens if t.type == "html_block"] and not [c for c in inline if c.type == "html_inline"]
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert not [h for h in headings if h.startswith("Injected")]  # the line break did not start a heading
    # The payloads are shown, as text: at least the script payload and the image payload of a top kernel.
    rendered = MarkdownIt("commonmark").enable("table").render(text)
    assert "&lt;script&gt;window.__ks_pwned=1&lt;/script&gt;" in rendered
    assert "![x](/etc/passwd)" in rendered


@pytest.mark.parametrize("name", ["report.md", "report.zh.md"])
@pytest.mark.slow
def test_every_figure_of_hostile_phase_names_is_drawn_inside_the_figures_folder(hostile_report, name):
    """Figures are drawn by helper processes from job keys that carry phase names read from the input: each image
    the report links exists, in figures/, and nothing was written beside the report's own folders."""
    text = (hostile_report / name).read_text()
    inline = [c for t in MarkdownIt("commonmark").parse(text) for c in (t.children or [])]
    images = [c.attrGet("src") for c in inline if c.type == "image"]
    figures = hostile_report / "figures"
    assert images and all((figures / src.removeprefix("figures/")).is_file() for src in images), images
    written = {p.relative_to(hostile_report.parent) for p in hostile_report.parent.rglob("*") if p.is_file()}
    assert all(p.parts[0] != "report" or p.parts[1] in ("figures", "tables") or len(p.parts) == 2 for p in written)
    assert all(p.parent == figures for p in figures.rglob("*"))


@pytest.mark.parametrize("name", ["report.html", "report.zh.html"])
@pytest.mark.slow
def test_html_page_loads_nothing_and_runs_only_its_own_script(hostile_report, name):
    page = (hostile_report / name).read_text()
    parser = _Tags()
    parser.feed(page)
    scripts = [attrs for tag, attrs in parser.tags if tag == "script"]
    assert len(scripts) == 1 and not scripts[0]
    assert all(attrs.get("src", "").startswith("data:image/") for tag, attrs in parser.tags if tag == "img")
    assert not [attrs for _, attrs in parser.tags if any(k.startswith("on") for k in attrs)]
    assert not [attrs for tag, attrs in parser.tags if tag == "a" and not (attrs.get("href") or "").startswith("#")]
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert "root:" not in page  # /etc/passwd was not embedded


@pytest.mark.parametrize("name", ["report.html", "report.zh.html"])
@pytest.mark.slow
def test_headless_chromium_runs_no_input_script_and_requests_nothing(hostile_report, name):
    chromium, playwright = _browser()
    page_path = hostile_report / name
    requests: list[str] = []
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        page = browser.new_page()
        page.on("request", lambda r: requests.append(r.url))
        page.goto(page_path.as_uri())
        page.wait_for_load_state("load")
        pwned = page.evaluate("() => window.__ks_pwned === undefined ? null : window.__ks_pwned")
        images = page.eval_on_selector_all("img", "els => els.map(e => [e.src.slice(0, 11), e.naturalWidth])")
        page.locator("table thead th").nth(0).click()  # our own script still runs under the policy
        sorted_class = page.locator("table thead th").nth(0).get_attribute("class")
        browser.close()
    assert pwned is None
    assert [u for u in requests if u != page_path.as_uri() and not u.startswith("data:")] == []
    assert images and all(src == "data:image/" and width > 0 for src, width in images)
    assert "sorted" in (sorted_class or "")


@pytest.mark.slow
def test_terminal_summary_prints_names_as_inert_text(hostile_report):
    """The closing lines of `import` show hostile names on one line each, with no terminal escape sequence."""
    from kernelscope.commands.run_summary import terminal_summary

    text = terminal_summary(hostile_report.parent)
    assert "\x1b" not in text and "\x00" not in text and "\x07" not in text
    assert not [line for line in text.splitlines() if line.startswith(("#", "!["))]
    assert text.splitlines()[0].startswith("kernelscope: imported trace on NVIDIA H200 # Injected")


REPLAYS = Path(__file__).resolve().parents[1] / "data" / "public" / "tracelens" / \
    "inference__sglang_decode__sglang_Qwen3-8B_decode.json.gz"


@pytest.mark.parametrize("key", ["image-local", "script", "backticks", "newline-heading", "pipe", "jinja"])
@pytest.mark.slow
def test_kernel_names_in_why_a_replay_stayed_unattributed_are_code_not_markup(tmp_path, key):
    """A public SGLang trace whose graph replay matches no eager step: the report names the replay's first kernel
    in its reason. Renamed to a hostile string, it must come out as the text of one code span in both languages,
    with no image, link, HTML or heading from it."""
    payload = HOSTILE_NAMES[key]
    with gzip.open(REPLAYS, "rt") as f:
        doc = json.load(f)
    graph = {e["args"]["correlation"] for e in doc["traceEvents"]
             if e.get("cat") == "cuda_runtime" and "GraphLaunch" in e.get("name", "")}
    replayed = sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel"
                       and e.get("args", {}).get("correlation") in graph), key=lambda e: e["ts"])
    first = replayed[0]["name"]
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and e["name"] == first:
            e["name"] = payload
    trace = tmp_path / "t.json.gz"
    trace.write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert main(["-q", "import", str(trace), "--out", str(tmp_path / "run")]) == 0
    shown = payload.replace("\n", " ")  # kept on one line: each line break is a space
    for name in ("report.md", "report.zh.md"):
        text = (tmp_path / "run" / "report" / name).read_text()
        line = next(line for line in text.splitlines() if line.startswith(("- not attributed:", "- 未归属：")))
        tokens = MarkdownIt("commonmark").parseInline(line.removeprefix("- "))[0].children
        assert not [t for t in tokens if t.type in ("image", "link_open", "html_inline")], (name, line)
        codes = [t.content for t in tokens if t.type == "code_inline"]
        assert shown in codes, (name, codes)


@pytest.mark.parametrize("key", ["image-local", "script", "backticks", "newline-heading", "pipe", "jinja", "control"])
@pytest.mark.slow
def test_a_hostile_file_name_in_the_unrecorded_device_note_is_code_not_markup(tmp_path, key):
    """A trace with its device events taken out, saved under a hostile file name: the note that the device was not
    recorded names the file as the text of one code span in each language, with no image, link, HTML or heading
    from it, and the closing lines print it on one line without escape sequences."""
    payload = HOSTILE_NAMES[key].replace("/", "\u2215").replace("\x00", "")  # a file name holds no slash or NUL
    with gzip.open(SEED, "rt") as f:
        doc = json.load(f)
    doc["traceEvents"] = [e for e in doc["traceEvents"]
                          if str(e.get("cat", "")).lower() not in ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")]
    trace = tmp_path / f"{payload}.json"
    trace.write_text(json.dumps(doc))
    out = tmp_path / "run"
    assert main(["-q", "import", str(trace), "--out", str(out), "--lang", "en,zh"]) == 0
    from kernelscope.commands.run_summary import terminal_summary

    closing = terminal_summary(out)
    note = next(line for line in closing.splitlines() if "no GPU activity" in line)
    assert "\x1b" not in note and "\x07" not in note
    md = MarkdownIt("commonmark").enable("table")
    for report in ("report.md", "report.zh.md"):
        text = (out / "report" / report).read_text()
        line = next(line for line in text.splitlines() if "ProfilerActivity.CUDA" in line)
        tokens = [t for t in md.parse(line) if t.type == "inline"][0].children
        assert not [t for t in tokens if t.type in ("image", "link_open", "html_inline")], (key, report)
        spans = [" ".join(t.content.split()) for t in tokens if t.type == "code_inline"]
        shown = " ".join("".join(" " if ord(c) < 32 else c for c in payload).split())  # control characters as spaces
        assert any(shown in span for span in spans), (key, spans)


def test_hostile_user_annotations_become_modules_as_text(tmp_path):
    """Modules taken from a script's own record_function annotations (tests/data/public/tokenomics) with hostile
    names: in the layer breakdown of both reports as text, never as markup; the pages run only their own script."""
    source = Path(__file__).resolve().parents[1] / "data" / "public" / "tokenomics"
    doc = json.loads(gzip.decompress((source / "llama_trace_4layers0_with_annotations.json.gz").read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("cat") in ("user_annotation", "gpu_user_annotation") and e["name"] == "Attention":
            e["name"] = "Attention<script>window.__ks_pwned=1</script>|x\n# Injected ![m](/etc/hostname)"
    trace = tmp_path / "trace.json.gz"
    trace.write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert main(["-q", "import", str(trace), "--out", str(tmp_path / "run")]) == 0
    report = tmp_path / "run" / "report"
    for name in ("report.md", "report.zh.md"):
        text = (report / name).read_text()
        tokens = MarkdownIt("commonmark").enable("table").parse(text)
        inline = [child for t in tokens for child in (t.children or [])]
        assert not [t for t in tokens if t.type == "html_block"] and not [c for c in inline if c.type == "html_inline"]
        assert all(c.attrGet("src").startswith("figures/") for c in inline if c.type == "image")
        headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
        assert not [h for h in headings if h.startswith("Injected")]
        rendered = MarkdownIt("commonmark").enable("table").render(text)
        assert "Attention&lt;script&gt;window.__ks_pwned=1&lt;/script&gt;" in rendered  # shown, as text
    for name in ("report.html", "report.zh.html"):
        parser = _Tags()
        parser.feed((report / name).read_text())
        scripts = [attrs for tag, attrs in parser.tags if tag == "script"]
        assert len(scripts) == 1 and not scripts[0]
        assert not [attrs for _, attrs in parser.tags if any(k.startswith("on") for k in attrs)]


@pytest.mark.slow
def test_a_hostile_report_without_figures_has_no_image_link_or_markup(tmp_path):
    """`--figure-formats none` on the hostile trace: the pages hold no image at all (none of the input's image
    payloads became one), no link out, no markup of the input, and the run holds nothing beyond its own files."""
    _hostile_trace(tmp_path / "trace.json.gz")
    assert main(["-q", "import", str(tmp_path / "trace.json.gz"), "--out", str(tmp_path / "run"),
                 "--figure-formats", "none"]) == 0
    report = tmp_path / "run" / "report"
    assert sorted(p.name for p in report.iterdir()) == ["report.html", "report.md", "report.zh.html", "report.zh.md",
                                                        "tables"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "trace.json.gz"]
    for name in ("report.md", "report.zh.md"):
        tokens = MarkdownIt("commonmark").enable("table").parse((report / name).read_text())
        inline = [child for t in tokens for child in (t.children or [])]
        assert not [c for c in inline if c.type == "image"]
        assert not [c for c in inline if c.type == "link_open" and not str(c.attrGet("href")).startswith("#")]
        assert not [t for t in tokens if t.type == "html_block"] and not [c for c in inline if c.type == "html_inline"]
    for name in ("report.html", "report.zh.html"):
        parser = _Tags()
        parser.feed((report / name).read_text())
        assert not [tag for tag, _ in parser.tags if tag == "img"]
        assert len([tag for tag, _ in parser.tags if tag == "script"]) == 1
        assert not [attrs for _, attrs in parser.tags if any(k.startswith("on") for k in attrs)]


@pytest.mark.slow
def test_hostile_energy_phase_and_stage_names_are_text(tmp_path):
    """A run.json whose `energy` section was edited: its phase names (listed in the table and, for windows shorter
    than a counter update, in the sentence above it) and a stage name carry markup. Both languages show them as
    text: no image, link, HTML or heading of the input's."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(Path(__file__).resolve().parents[1] / "data" / "runs" / "h200-qwen2-1.5b-b8-p512-energy", run)
    info = json.loads((run / "run.json").read_text())
    payloads = ["setup<img src=x onerror=window.__ks_pwned=1>", "between\n# Injected | cell |\n![x](/etc/passwd)",
                "<script>window.__ks_pwned=1</script>"]
    phases = info["energy"]["phases"]
    phases[2]["phase"], phases[3]["phase"], phases[0]["phase"] = payloads
    info["energy"]["stages"][0]["stage"] = "[link](http://example.com)"
    (run / "run.json").write_text(json.dumps(info))
    assert main(["-q", "report", str(run), "--figure-formats", "none"]) == 0
    for name, heading in (("report.md", "### Energy"), ("report.zh.md", "### 能耗")):
        text = (run / "report" / name).read_text()
        section = text.split(heading, 1)[1].split("\n### ", 1)[0]
        tokens = MarkdownIt("commonmark").enable("table").parse(section)
        inline = [child for t in tokens for child in (t.children or [])]
        assert not [c for c in inline if c.type in ("image", "link_open", "html_inline")]
        assert not [t for t in tokens if t.type in ("html_block", "heading_open")]
        rendered = MarkdownIt("commonmark").enable("table").render(section)
        assert "&lt;script&gt;window.__ks_pwned=1&lt;/script&gt;" in rendered  # shown, as text
        assert "&lt;img src=x onerror=window.__ks_pwned=1&gt;" in rendered
