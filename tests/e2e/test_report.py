"""The full report of a real H200 run with Nsight Compute data: both languages, every section, findings whose
numbers come from the tables, golden structure and numbers, and the HTML page in a real headless Chromium."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from kernelscope.pipeline import rerender

DATA = Path(__file__).parents[1] / "data"
RUN = DATA / "runs" / "h200-qwen2-0.5b-ncu"
GOLDEN = DATA / "golden" / "h200-qwen2-0.5b-ncu"

SECTIONS_EN = ["Overview", "Setup", "Timings", "Top kernels by total time", "Critical path", "Key observations",
               "Kernel classification", "Performance characteristics by class", "Metric definitions",
               "Top kernels by single-launch duration", "Histograms", "Roofline",
               "Layer → module → kernel breakdown", "Op groups", "Conclusions",
               "Recommendations for accelerator (NPU) design", "Attribution", "Appendix: methodology",
               "Appendix: full kernel names"]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("report") / "run"
    shutil.copytree(RUN, run)
    rerender(run, 20)
    return run / "report"


def sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## ", text, flags=re.M)[1:]
    return {p.split("\n", 1)[0].strip(): p.split("\n", 1)[1] if "\n" in p else "" for p in parts}


NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?")


def table_numbers(text: str) -> Counter:
    """Numbers in table rows, with the units that follow them (identical in every language)."""
    rows = [line for line in text.splitlines() if line.startswith("|") and not set(line) <= set("|-: ")]
    return Counter(n for row in rows for n in re.findall(r"-?\d[\d,]*(?:\.\d+)?(?:\s?(?:ns|µs|ms|s|%|MB|GB|MiB|KiB))?", row))


@pytest.mark.slow
def test_all_sections_in_both_languages(report):
    en, zh = (report / "report.md").read_text(), (report / "report.zh.md").read_text()
    assert list(sections(en)) == SECTIONS_EN
    assert len(sections(zh)) == len(SECTIONS_EN)
    assert "内存受限" in zh and "解码" in zh and "屋脊线" in zh
    for (name_en, body_en), (name_zh, body_zh) in zip(sections(en).items(), sections(zh).items(), strict=True):
        assert table_numbers(body_en) == table_numbers(body_zh), f"tables differ in section {name_en} / {name_zh}"


def test_sections_have_content(report):
    text = (report / "report.md").read_text()
    body = sections(text)
    assert "| Time % | Library | Category | Kernel |" in body["Top kernels by total time"]
    assert "memory-bound" in body["Kernel classification"]
    assert "| SM throughput |" in body["Kernel classification"]  # measured classes (ncu)
    assert "](figures/roofline_decode.png)" in body["Roofline"]
    assert "](figures/ncu_roofline.png)" in body["Roofline"]
    assert "](figures/ncu_histograms.png)" in body["Histograms"]
    assert "**F1**" in body["Key observations"] and "(answers F" in body["Conclusions"]
    assert "Bandwidth needed" in body["Recommendations for accelerator (NPU) design"]
    assert "KV cache grows by" in body["Recommendations for accelerator (NPU) design"]
    for name in ["roofline_decode", "ncu_roofline", "ncu_histograms", "histograms_decode"]:
        assert (report / "figures" / f"{name}.png").stat().st_size > 5000


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_every_number_a_finding_prints_is_in_its_table(report):
    rows = _csv(report / "tables" / "findings.csv")
    assert rows, "the fixture run should trigger findings"
    text = (report / "report.md").read_text()
    values: dict[str, float] = {}
    for row in rows:
        if not row["table"]:
            continue
        table = _csv(report / "tables" / f"{row['table']}.csv")
        wanted = json.loads(row["rows"]) if row["rows"] else {}
        def as_text(v):  # CSV spells booleans in lower case
            return str(v).lower() if isinstance(v, bool) else str(v)

        selected = [r for r in table if all(r[k] in [as_text(v) for v in vs] for k, vs in wanted.items())]
        if row["agg"] == "first":
            expected = selected[0][row["column"]] if selected else None
            assert expected is not None
            try:
                assert float(row["value"]) == pytest.approx(float(expected), rel=1e-9)
            except ValueError:
                assert row["value"] == expected
                assert expected in text  # a printed name
        elif row["agg"] == "sum":
            total = sum(float(r[row["column"]]) for r in selected)
            assert float(row["value"]) == pytest.approx(total, rel=1e-9, abs=1e-9), row
            values[row["number"]] = total
        elif row["agg"] == "count_below_25":
            count = sum(1 for r in table if r[row["column"]] and float(r[row["column"]]) < 25)
            assert float(row["value"]) == count
    # Percentages that findings print are the table values, rounded to one decimal.
    for name, value in values.items():
        if name.endswith("_pct"):
            assert f"{value:.1f}%" in text, name


def test_golden_report_section_by_section(report):
    """Structure and numbers against the committed report of the same run. After an intended change, refresh
    with: python -m kernelscope report tests/data/runs/h200-qwen2-0.5b-ncu-copy, then copy report.md and
    report.zh.md here (see tests/data/golden/README.md)."""
    for name in ("report.md", "report.zh.md"):
        golden, current = sections((GOLDEN / name).read_text()), sections((report / name).read_text())
        assert list(current) == list(golden), name
        for title in golden:
            assert table_numbers(current[title]) == table_numbers(golden[title]), f"{name}: {title}"


def _browser():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        if os.environ.get("KERNELSCOPE_REQUIRE_BROWSER"):
            pytest.fail("chromium is required here (scripts/install-test-deps.sh installs it)")
        pytest.skip("chromium not installed")
    playwright = pytest.importorskip("playwright.sync_api")
    return chromium, playwright


def open_page(p, chromium: str, page_path: Path):
    """A headless Chromium showing page_path; errors collects console errors and uncaught exceptions."""
    browser = p.chromium.launch(executable_path=chromium, args=[
        "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"])
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(page_path.as_uri())
    page.wait_for_load_state("load")
    return browser, page, errors


@pytest.mark.parametrize("page_name", ["report.html", "report.zh.html"])
@pytest.mark.slow
def test_html_in_headless_chromium(report, tmp_path, page_name):
    chromium, playwright = _browser()
    page_path = report / page_name
    text = page_path.read_text()
    assert "src=\"figures/" not in text and "http://" not in text.replace("http://www.w3.org", "")  # self-contained
    with playwright.sync_playwright() as p:
        browser, page, errors = open_page(p, chromium, page_path)
        sizes = page.eval_on_selector_all("img", "els => els.map(e => [e.naturalWidth, e.naturalHeight])")
        toc = page.eval_on_selector_all("nav.toc a", "els => els.length")
        details = page.eval_on_selector_all("details", "els => els.length")
        # Sorting: a click on a table header orders its rows by that column.
        first = page.locator("table").nth(0)
        page.locator("table thead th").nth(0).click()
        sorted_class = first.locator("thead th").nth(0).get_attribute("class")
        shot = tmp_path / f"{page_name}.png"
        page.screenshot(path=str(shot), full_page=False)
        browser.close()
    assert errors == []
    assert len(sizes) >= 8 and all(w > 0 and h > 0 for w, h in sizes)
    assert toc >= 15 and details == 2 and "sorted" in (sorted_class or "")
    assert shot.stat().st_size > 20_000


LAYOUT = """() => {
  const width = window.innerWidth;
  const out = {pageWidth: document.documentElement.scrollWidth, width: width, wider: [], wrapped: [], overlaps: []};
  // Blocks of the page (not the insides of a scrolling table box) stay within the window.
  const blocks = document.querySelectorAll("main > *, details > *, nav.toc");
  blocks.forEach(el => { const r = el.getBoundingClientRect();
    if (r.right > width + 0.5) out.wider.push(el.tagName + " " + el.textContent.slice(0, 60)); });
  // A number is on one line: its cell's text makes a single line box.
  document.querySelectorAll("td[align=right]").forEach(td => {
    const range = document.createRange(); range.selectNodeContents(td);
    const rects = Array.from(range.getClientRects()).filter(r => r.width > 0);
    const tops = new Set(rects.map(r => Math.round(r.top)));
    if (tops.size > 1) out.wrapped.push(td.textContent); });
  // Consecutive blocks do not overlap: each starts below the end of the one before.
  const siblings = Array.from(document.querySelectorAll("main > *")).filter(el => el.getClientRects().length);
  for (let i = 1; i < siblings.length; i++) {
    const a = siblings[i - 1].getBoundingClientRect(), b = siblings[i].getBoundingClientRect();
    if (b.top < a.bottom - 1 && b.left < a.right && a.left < b.right)
      out.overlaps.push(siblings[i - 1].tagName + " / " + siblings[i].tagName + " " + siblings[i].textContent.slice(0, 60)); }
  // Labels in the explorer's figure stay inside their blocks and never overlap one another.
  out.labelClash = [];
  document.querySelectorAll("svg.ks-icicle").forEach(svg => {
    const boxes = Array.from(svg.querySelectorAll("g.node")).filter(g => g.style.display !== "none")
      .map(g => [g.querySelector("text"), g.querySelector("rect")]).filter(([t]) => t.textContent)
      .map(([t, r]) => [t.textContent, t.getBoundingClientRect(), r.getBoundingClientRect()]);
    out.labels = (out.labels || 0) + boxes.length;
    boxes.forEach(([label, t, r], i) => {
      if (t.right > r.right + 0.5 || t.left < r.left - 0.5) out.labelClash.push("outside: " + label);
      boxes.slice(i + 1).forEach(([other, u]) => {
        if (t.left < u.right && u.left < t.right && t.top < u.bottom && u.top < t.bottom)
          out.labelClash.push(label + " / " + other); }); }); });
  out.headers = Array.from(document.querySelectorAll("table")).slice(0, 6).map(t => t.tHead.innerText.trim());
  out.scrollers = document.querySelectorAll("div.table").length;
  out.tables = document.querySelectorAll("table").length;
  return out;
}"""


@pytest.mark.parametrize("width", [1400, 390])
@pytest.mark.parametrize("page_name", ["report.html", "report.zh.html"])
@pytest.mark.slow
def test_html_layout_at_desktop_and_phone_width(report, tmp_path, page_name, width):
    chromium, playwright = _browser()
    with playwright.sync_playwright() as p:
        browser, page, errors = open_page(p, chromium, report / page_name)
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_timeout(50)
        layout = page.evaluate(LAYOUT)
        shot = tmp_path / f"{page_name}-{width}.png"
        page.screenshot(path=str(shot), full_page=True)
        browser.close()
    assert errors == []
    assert layout["pageWidth"] <= width, "the page scrolls sideways"
    assert layout["wider"] == [] and layout["overlaps"] == [] and layout["labelClash"] == []
    assert layout["labels"] >= (10 if width > 1000 else 3)  # the explorer's blocks are named
    assert layout["wrapped"] == [], f"numbers broken over lines: {layout['wrapped'][:5]}"
    assert layout["scrollers"] == layout["tables"]  # every table scrolls inside its own box
    # Key-value tables have a real header row, not their first item as a header.
    assert not [h for h in layout["headers"] if h.startswith(("Device", "设备\t", "kernelscope"))]
    assert shot.stat().st_size > 50_000


@pytest.mark.parametrize("page_name", ["report.html", "report.zh.html"])
@pytest.mark.slow
def test_breakdown_explorer_and_step_strip_work_offline(report, page_name):
    """The icicle of layer → module → kernel zooms on a click and back on a second one, under the page's strict
    Content-Security-Policy (a blocked script would be a console error); the step strip has one bar per decode
    step of the run, each with its time."""
    import polars as pl

    chromium, playwright = _browser()
    kernels = pl.read_parquet(RUN / "kernels.parquet")
    decode_steps = kernels.filter((pl.col("phase") == "decode") & pl.col("step").is_not_null())["step"].n_unique()
    with playwright.sync_playwright() as p:
        browser, page, errors = open_page(p, chromium, report / page_name)
        icicles = page.locator("svg.ks-icicle")
        assert icicles.count() == 2  # prefill and decode
        decode = icicles.nth(1)
        module = decode.locator("g.node[data-depth='2']").first
        before = float(module.locator("rect").get_attribute("width"))
        module.click()
        zoomed = float(module.locator("rect").get_attribute("width"))
        hidden_kernels = decode.locator("g.node[data-depth='3']").evaluate_all(
            "els => els.filter(e => e.style.display === 'none').length")
        module.click()  # the block shown whole: back to the whole phase
        after = float(module.locator("rect").get_attribute("width"))
        bars = page.locator("svg.ks-strip rect.step")
        titles = bars.evaluate_all("els => els.map(e => e.querySelector('title').textContent)")
        browser.close()
    assert errors == []
    assert before < 900 and zoomed >= 999 and hidden_kernels > 0 and after == pytest.approx(before, abs=0.01)
    assert len(titles) == decode_steps and all(re.search(r"\d (ns|µs|ms)$", t) for t in titles)
