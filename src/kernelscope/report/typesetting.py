"""Chinese typesetting of a rendered report: one space between Chinese characters and Latin letters or digits
(`34,045 个 CPU 算子`, `占 49.2% 的`), as common Chinese typesetting guides ask. Code spans are left as written."""

from __future__ import annotations

import re

_CJK = r"\u3400-\u4dbf\u4e00-\u9fff"
_CODE = re.compile(r"(`+)(?:.+?)(?<!`)\1(?!`)")
_CJK_THEN_LATIN = re.compile(rf"([{_CJK}])([A-Za-z0-9`])")
_LATIN_THEN_CJK = re.compile(rf"([A-Za-z0-9%`])([{_CJK}])")


def _space(text: str) -> str:
    return _LATIN_THEN_CJK.sub(r"\1 \2", _CJK_THEN_LATIN.sub(r"\1 \2", text))


def space_cjk(markdown: str) -> str:
    """`markdown` with a space wherever a Chinese character touches a Latin letter, a digit, a percent sign or
    a code span; the inside of code spans is unchanged."""
    spans: list[str] = []

    def hold(match: re.Match[str]) -> str:
        spans.append(match.group(0))
        return f"`\ue000{len(spans) - 1}\ue000`"

    spaced = _space(_CODE.sub(hold, markdown))
    return re.sub("`\ue000(\\d+)\ue000`", lambda m: spans[int(m.group(1))], spaced)
