"""One self-contained HTML page from the Markdown report: figures embedded as data URIs, a table of contents,
tables sortable by a click on their header, appendices collapsed. No external resource: it opens offline, and its
Content-Security-Policy forbids any network load and any script but its own."""

from __future__ import annotations

import base64
import hashlib
import html
import re
from pathlib import Path

import cmarkgfm

STYLE = """
body{font-family:-apple-system,"Segoe UI",Roboto,"Noto Sans","Noto Sans CJK SC","PingFang SC",sans-serif;
 margin:0;color:#1b1f24;line-height:1.5}
main{max-width:1180px;margin:0 auto;padding:24px 32px 64px;overflow-wrap:break-word}
nav.toc{background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;padding:12px 20px;margin:16px 0}
nav.toc ul{margin:4px 0;padding-left:18px} nav.toc>ul{columns:2;column-gap:32px} nav.toc li{break-inside:avoid} nav.toc a{text-decoration:none;color:#0969da}
h1{border-bottom:2px solid #d0d7de;padding-bottom:6px} h2{border-bottom:1px solid #d0d7de;padding-bottom:4px;margin-top:36px}
div.table{overflow-x:auto;max-width:100%;margin:10px 0}
table{border-collapse:collapse;font-size:13px}
th,td{border:1px solid #d0d7de;padding:4px 8px;vertical-align:top} th{background:#f6f8fa;cursor:pointer;white-space:nowrap}
td[align="right"]{white-space:nowrap;font-variant-numeric:tabular-nums}
th.sorted-asc::after{content:" ▲"} th.sorted-desc::after{content:" ▼"} tr:nth-child(even) td{background:#fbfcfd}
code{background:#f0f2f4;padding:1px 4px;border-radius:4px;font-size:12px}
td code{word-break:normal;overflow-wrap:normal}
td:not([align]){min-width:6em}
img{max-width:100%;height:auto;border:1px solid #eee;margin:8px 0}
details{border:1px solid #d0d7de;border-radius:6px;padding:6px 14px;margin:24px 0}
details>summary{font-size:1.4em;font-weight:600;cursor:pointer}
figure.ks-explorer,figure.ks-steps{margin:12px 0}
svg.ks-icicle{width:100%;height:auto;display:block;cursor:zoom-in;font-size:11px}
svg.ks-icicle text{fill:#fff;pointer-events:none} svg.ks-icicle rect{stroke:#fff;stroke-width:0.5}
svg.ks-icicle g.node:hover rect{fill-opacity:1}
svg.ks-strip{width:100%;height:80px;display:block;background:#f6f8fa} svg.ks-strip rect{fill:#4c72b0}
svg.ks-strip rect:hover{fill:#c44e52} figcaption{font-size:12px;color:#57606a}
@media (max-width:700px){main{padding:12px 12px 48px} nav.toc>ul{columns:1} h1{font-size:1.5em}}
"""

# Sorting understands the report's units, so "850 ns" sorts below "1.2 µs".
SCRIPT = """
(function(){
 var units={"ns":1e-9,"µs":1e-6,"us":1e-6,"ms":1e-3,"s":1,"%":1,"MB":1e6,"GB":1e9,"KiB":1024,"MiB":1048576,
  "GB/s":1e9,"TB/s":1e12,"TFLOP/s":1e12};
 function key(text){
  var t=text.trim().replace(/,/g,"");var m=t.match(/^(-?[0-9.]+(?:e[-+]?[0-9]+)?)\\s*([^\\s]*)/i);
  if(!m||isNaN(parseFloat(m[1])))return null;return parseFloat(m[1])*(units[m[2]]||1);}
 // The icicle explorer: a click on a block spreads it over the whole width (its ancestors stay above it, its
 // descendants below); a click on the block shown whole goes back one level.
 document.querySelectorAll("svg.ks-icicle").forEach(function(svg){
  var W=1000,nodes=Array.prototype.slice.call(svg.querySelectorAll("g.node")),stack=[[0,1,0]];
  function show(x0,x1,depth){
   nodes.forEach(function(g){
    var a=+g.getAttribute("data-x0"),b=+g.getAttribute("data-x1"),d=+g.getAttribute("data-depth");
    var l=Math.max(0,(a-x0)/(x1-x0)*W),r=Math.min(W,(b-x0)/(x1-x0)*W),on=r-l>0.3&&(d>=depth||(a<=x0+1e-9&&b>=x1-1e-9));
    g.style.display=on?"":"none";if(!on)return;
    var rect=g.querySelector("rect"),text=g.querySelector("text"),label=g.getAttribute("data-label"),room=r-l-6,cut=label;
    rect.setAttribute("x",l.toFixed(2));rect.setAttribute("width",Math.max(r-l-0.5,0.1).toFixed(2));
    text.setAttribute("x",(l+3).toFixed(2));text.textContent=label;
    // The label as far as it fits its block, measured as drawn (Chinese characters are wider than Latin ones).
    while(cut.length&&text.getComputedTextLength()>room){cut=cut.slice(0,-1);text.textContent=cut+"\u2026";}
    if(!cut.length)text.textContent="";
   });
  }
  show(0,1,0);
  svg.addEventListener("click",function(e){
   var g=e.target.closest?e.target.closest("g.node"):null;if(!g)return;
   var a=+g.getAttribute("data-x0"),b=+g.getAttribute("data-x1"),d=+g.getAttribute("data-depth"),top=stack[stack.length-1];
   if(Math.abs(a-top[0])<1e-9&&Math.abs(b-top[1])<1e-9){if(stack.length>1)stack.pop();}else{stack.push([a,b,d]);}
   top=stack[stack.length-1];show(top[0],top[1],top[2]);svg.setAttribute("data-zoom",top[0]+"-"+top[1]);
  });
 });
 document.querySelectorAll("table").forEach(function(table){
  var head=table.querySelectorAll("thead th");
  head.forEach(function(th,col){th.addEventListener("click",function(){
   var body=table.tBodies[0];if(!body)return;var rows=Array.prototype.slice.call(body.rows);
   var asc=!th.classList.contains("sorted-asc");
   head.forEach(function(h){h.classList.remove("sorted-asc","sorted-desc");});
   th.classList.add(asc?"sorted-asc":"sorted-desc");
   rows.sort(function(a,b){var x=a.cells[col].textContent,y=b.cells[col].textContent;var kx=key(x),ky=key(y);
    var r=(kx!==null&&ky!==null)?kx-ky:x.localeCompare(y);return asc?r:-r;});
   rows.forEach(function(r){body.appendChild(r);});});});
 });
})();
"""

APPENDIX = re.compile(r"^(Appendix|附录)")


def _slug(text: str, seen: dict[str, int]) -> str:
    base = re.sub(r"[^\w\u4e00-\u9fff]+", "-", text.lower()).strip("-") or "section"
    seen[base] = seen.get(base, 0) + 1
    return base if seen[base] == 1 else f"{base}-{seen[base]}"


FIGURES = "figures"
_IMG = re.compile(r"<img\b[^>]*>")
_SRC = re.compile(r'\bsrc="([^"]*)"')
_ALT = re.compile(r'\balt="([^"]*)"')


def embed_figures(page: str, base: Path) -> str:
    """The page made self-contained once its figures exist (page_with_figure_links makes it before): every image
    becomes a data URI of a figure kernelscope wrote into `base`/figures (an .svg or .png named directly there, no
    other folder, no link out of it); any other image (a remote address, a path elsewhere) is replaced by its alt
    text, so the page never loads or reads anything else."""
    folder = (base / FIGURES).resolve()

    def replace(match: re.Match[str]) -> str:
        tag = match.group(0)
        src = _SRC.search(tag)
        alt = _ALT.search(tag)
        data = _figure_data(html.unescape(src.group(1)) if src else "", folder)
        if data is None:
            return alt.group(1) if alt else ""
        return _SRC.sub(lambda _: f'src="{data}"', tag, count=1)

    return _IMG.sub(replace, page)


def _figure_data(src: str, folder: Path) -> str | None:
    parts = src.split("/")
    if len(parts) != 2 or parts[0] != FIGURES or Path(parts[1]).suffix not in (".svg", ".png"):
        return None
    path = folder / parts[1]
    if path.is_symlink() or not path.is_file() or path.resolve().parent != folder:
        return None
    kind = "image/svg+xml" if path.suffix == ".svg" else "image/png"
    return f"data:{kind};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


def content_security_policy() -> str:
    """Nothing from the network, no script but the page's own (by its hash), images only as embedded data."""
    digest = base64.b64encode(hashlib.sha256(SCRIPT.encode("utf-8")).digest()).decode("ascii")
    return (f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-{digest}'; "
            "base-uri 'none'; form-action 'none'; connect-src 'none'; font-src 'none'; object-src 'none'")


def markdown_to_html(markdown: str, base: Path, lang: str, title: str,
                     after_headings: dict[str, str] | None = None) -> str:
    """The page, its figures embedded from `base`/figures; `title` stands in where the Markdown has no level-1
    heading. `after_headings`: HTML of ours (report/explorer.py) placed right after the first h2 or h3 whose
    text, as shown, is the key."""
    return embed_figures(page_with_figure_links(markdown, lang, title, after_headings), base)


def page_with_figure_links(markdown: str, lang: str, title: str, after_headings: dict[str, str] | None = None) -> str:
    """The page of markdown_to_html with its images still linked (figures/<file>), not embedded: it can be made
    before the figures are drawn."""
    body, toc, title = _headings_anchored(cmarkgfm.markdown_to_html_with_extensions(markdown, extensions=["table"]),
                                          title)
    first_anchor: dict[str, str] = {}
    for _, text, anchor in toc:
        first_anchor.setdefault(text, anchor)
    body = _insert_after_headings(body, {first_anchor[text]: fragment for text, fragment in (after_headings or {}).items()
                                         if text in first_anchor})
    body = _scrolling_tables(body)
    body = _collapse_appendices(body)
    return "\n".join([
        "<!DOCTYPE html>", f'<html lang="{"zh-CN" if lang == "zh" else "en"}">', "<head>", '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f'<meta http-equiv="Content-Security-Policy" content="{content_security_policy()}">',
        f"<title>{html.escape(title)}</title>", f"<style>{STYLE}</style>", "</head>", "<body><main>",
        _after_title(body, _toc(toc, lang)), f"<script>{SCRIPT}</script>", "</main></body></html>",
    ])


def _insert_after_headings(body: str, fragments: dict[str, str]) -> str:
    """Each fragment right after the heading with that anchor (the first one only)."""
    for anchor, fragment in fragments.items():
        match = re.search(rf'<h[23] id="{re.escape(anchor)}">.*?</h[23]>', body, flags=re.S)
        if match:
            body = body[:match.end()] + fragment + body[match.end():]
    return body


_TABLE = re.compile(r"<table>.*?</table>", re.S)
_CODE = re.compile(r"<code>(.*?)</code>", re.S)
# Where a long name may break: after the separators of qualified names, template and argument lists.
_BREAK_AFTER = re.compile(r"(::|,|&lt;|\(|/|\.(?=[A-Za-z]))")


def _scrolling_tables(body: str) -> str:
    """Every table in a box that scrolls sideways when the table is wider than the page (numbers never wrap,
    see STYLE); names in table cells may break only after `::`, `,`, `<`, `(`, `/` or `.`, never inside a word."""
    def table(match: re.Match[str]) -> str:
        cells = _CODE.sub(lambda m: "<code>" + _BREAK_AFTER.sub(r"\1<wbr>", m.group(1)) + "</code>", match.group(0))
        return f'<div class="table">{cells}</div>'

    return _TABLE.sub(table, body)


_HEADING = re.compile(r"<h([1-3])>(.*?)</h\1>", re.S)
_TAG = re.compile(r"<[^>]+>")


def _headings_anchored(body: str, title: str) -> tuple[str, list[tuple[int, str, str]], str]:
    """The body with an id on every h2 and h3 (the contents' entries: level, text, anchor) and the page's title:
    the last h1's text, else `title`."""
    seen: dict[str, int] = {}
    toc: list[tuple[int, str, str]] = []
    titles: list[str] = []

    def anchored(match: re.Match[str]) -> str:
        level, inner = int(match.group(1)), match.group(2)
        text = _plain_text(inner)
        if level == 1:
            titles.append(text)
            return match.group(0)
        anchor = _slug(text, seen)
        toc.append((level, text, anchor))
        return f'<h{level} id="{anchor}">{inner}</h{level}>'

    body = _HEADING.sub(anchored, body)
    return body, toc, next((text for text in reversed(titles) if text), title)  # the last h1 with words, as shown


def _plain_text(inner: str) -> str:
    """A heading's text as shown (its markup dropped, escapes resolved), for its anchor and the contents."""
    return html.unescape(_TAG.sub("", inner))


def _after_title(body: str, toc: str) -> str:
    """The table of contents goes right under the page's title."""
    end = body.find("</h1>")
    return body[: end + 5] + toc + body[end + 5 :] if end >= 0 else toc + body


def _toc(entries: list[tuple[int, str, str]], lang: str) -> str:
    label = "目录" if lang == "zh" else "Contents"
    items, open_sub = [], False
    for level, text, anchor in entries:
        link = f'<a href="#{anchor}">{html.escape(text)}</a>'
        if level == 2:
            if open_sub:
                items.append("</ul></li>")
                open_sub = False
            items.append(f"<li>{link}")
        else:
            if not open_sub:
                items.append("<ul>")
                open_sub = True
            items.append(f"<li>{link}</li>")
    if open_sub:
        items.append("</ul></li>")
    return f'<nav class="toc"><strong>{label}</strong><ul>{"".join(items)}</ul></nav>'


def _collapse_appendices(body: str) -> str:
    """Wrap every appendix section (an h2 whose title starts with Appendix / 附录) in <details>."""
    parts = re.split(r"(?=<h2[ >])", body)
    out = []
    for part in parts:
        match = re.match(r"<h2([^>]*)>(.*?)</h2>(.*)", part, flags=re.S)
        if match and APPENDIX.match(html.unescape(re.sub(r"<[^>]+>", "", match.group(2)))):
            out.append(f"<details{match.group(1)}><summary>{match.group(2)}</summary>{match.group(3)}</details>")
        else:
            out.append(part)
    return "".join(out)
