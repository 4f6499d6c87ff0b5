"""The HTML renderer itself, given Markdown that holds markup (as if a name had slipped past the report's
escaping): no tag, event handler or script link of the input reaches the page (docs/guarantees.md)."""

from __future__ import annotations

import html.parser

import pytest

from kernelscope.report.html import SCRIPT, page_with_figure_links

HOSTILE_MARKDOWN = [
    "# Title\n\nA <script>window.__ks_pwned=1</script> kernel",
    "## <img src=x onerror=alert(1)> heading\n\ntext",
    "<div onclick=\"alert(1)\">block</div>\n\n<iframe src=\"https://example.com\"></iframe>",
    "| kernel | time |\n| --- | ---: |\n| <svg onload=alert(1)> | 1 ms |",
    "[a link](javascript:alert(1)) and [another](vbscript:msgbox(1)) and <javascript:alert(1)>",
    "![image](https://example.com/x.png) and ![local](/etc/hostname)",
]


class _Tags(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


@pytest.mark.parametrize("markdown", HOSTILE_MARKDOWN)
def test_markup_in_the_markdown_stays_out_of_the_page(markdown):
    page = page_with_figure_links(markdown, "en", "title")
    body = page[page.index("<body>"):].replace(f"<script>{SCRIPT}</script>", "")  # the page's own script
    parser = _Tags()
    parser.feed(body)
    tags = {tag for tag, _ in parser.tags}
    assert not tags & {"script", "iframe", "svg", "object", "embed"}, tags  # (divs are the page's table boxes)
    for tag, attrs in parser.tags:
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        assert tag != "div" or attrs == {"class": "table"}, attrs
        for key in ("href", "src"):
            value = (attrs.get(key) or "").strip().lower()
            assert not value.startswith(("javascript:", "vbscript:")), (tag, attrs)
    assert page.count("<script") == 1  # the page's own, whose hash its Content-Security-Policy names
