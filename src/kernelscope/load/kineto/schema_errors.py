"""Why a file is not a Kineto trace, in words: the decoder's validation messages name types and JSON paths
(``Expected `float | null`, got `str` - at `$[0].ts` ``); a user reads which field of an event is of the wrong kind."""

from __future__ import annotations

import re

_EXPECTED = re.compile(r"Expected `(?P<want>[^`]+)`, got `(?P<got>[^`]+)`(?: - at `(?P<path>[^`]+)`)?")
_MISSING = re.compile(r"Object missing required field `(?P<field>[^`]+)`(?: - at `(?P<path>[^`]+)`)?")
# A path into the event array; indices count from a chunk's start, not the file's, so they are not shown.
_EVENT_FIELD = re.compile(r"\$(?:\.traceEvents)?\[\d+\](?:\.(?P<field>\w+))?.*")
_TYPE_WORDS = {"str": "text", "float": "a number", "int": "a whole number", "null": "null", "object": "an object",
               "array": "a list", "bool": "true or false"}
# Timelines that write their times as text: Ascend's torch_npu profiler (trace_view.json).
_TEXT_TIMES_HINT = " (Ascend torch_npu timelines write their times as text; they are not read here)"


def _words(types: str) -> str:
    return " or ".join(_TYPE_WORDS.get(t.strip(), t.strip()) for t in types.split("|"))


def _subject(path: str | None) -> tuple[str, str | None]:
    """What the path points at, in words, and the event field it names (if any)."""
    if not path or path == "$":
        return "the document", None
    event = _EVENT_FIELD.fullmatch(path)
    if event is None:
        return f"`{path}`", None
    field = event["field"]
    return (f"an event's `{field}`" if field else "an event"), field


def describe(message: str) -> str:
    """The decoder's validation message as a sentence; a message of another form is kept as it is."""
    expected = _EXPECTED.fullmatch(message.strip())
    if expected is not None:
        subject, field = _subject(expected["path"])
        hint = _TEXT_TIMES_HINT if field in ("ts", "dur") and expected["got"] == "str" else ""
        return f"{subject} is {_words(expected['got'])} where Kineto writes {_words(expected['want'])}{hint}"
    missing = _MISSING.fullmatch(message.strip())
    if missing is not None:
        subject, _ = _subject(missing["path"])
        return f"{subject} lacks the field `{missing['field']}`"
    return message
