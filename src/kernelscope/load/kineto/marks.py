"""What a Kineto trace holds besides the events the tables read, and that says whether those are whole: flow arrows
(ph `s`, `f`, `t`: each start should have an end), and the profiler's window (the instants `Iteration Start: …` and
`Record Window End`). The integrity audit (analyze/integrity.py) counts from them.

One chunk of the event array is scanned as bytes: the flat objects (no nested braces) whose `ph` is a flow are found
by one regular expression and decoded together, so no object is made for the other events; the window's instants by
their names. The scan checks itself: where it found fewer flow objects than the chunk has flow `ph` values (a flow
of an unusual shape), the chunk is decoded whole for them instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import msgspec

FLOW_PHASES = ("s", "f", "t")
WINDOW_START = "Iteration Start"  # Kineto's instant at the start of the recorded window ("Iteration Start: …")
WINDOW_END = "Record Window End"
_FLOW_PH = re.compile(rb'"ph"\s*:\s*"[sft]"')
# A flow as Kineto writes it (`"ph": "f", "id": 9, "pid": 723, "tid": 723, "ts": …, "cat": "ac2g"`): its phase, id
# and category straight from one expression; any flow of another layout leaves the optional part empty.
_KINETO_FLOW = re.compile(rb'"ph"\s*:\s*"([sft])"(?:, "id": (-?\d+), "pid": [^,{}]*, "tid": [^,{}]*, "ts": [^,{}]*,'
                          rb'\s*"cat": "([^"\\]*)")?')
_WINDOW_NAMES = (b'"' + WINDOW_START.encode(), b'"' + WINDOW_END.encode() + b'"')


class _Mark(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    id: int | str | None = None  # flows are paired by (category, id)
    ts: float | None = None


class _AnyIdMark(msgspec.Struct, gc=False):
    """A mark whose id is of another JSON type (a float, an object): read as its text."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    id: msgspec.Raw = msgspec.Raw(b"null")
    ts: float | None = None


@dataclass
class ChunkMarks:
    """One chunk's flow events as (category, id, ph) and its window instants as (name, ts µs)."""

    flows: list[tuple[str, str, str]] = field(default_factory=list)
    instants: list[tuple[str, float]] = field(default_factory=list)


def scan_marks(text: bytes | bytearray | memoryview) -> ChunkMarks:
    """The flows and window instants of one chunk (a JSON array of events, or a piece of one)."""
    text = text if isinstance(text, bytes | bytearray) else bytes(text)
    laid_out = _KINETO_FLOW.findall(text)
    if all(cat for _, _, cat in laid_out):  # every flow as Kineto lays it out: no object made per flow
        marks: list = []
        flows = [(cat.decode(), flow_id.decode(), ph.decode()) for ph, flow_id, cat in laid_out]
    else:
        found = [_around(text, m.start()) for m in _FLOW_PH.finditer(text)]
        marks = _decoded(b"[" + b",".join(found) + b"]") if found else []
        if marks is None or sum(m.ph in FLOW_PHASES for m in marks) != len(found):
            return _collect(_decoded_whole(text))  # a flow object with nested braces: read them all exactly
        flows = []
    for name in _WINDOW_NAMES:  # a few per trace: each read from the object around it
        at = text.find(name)
        while at >= 0:
            around = _decoded(b"[" + _around(text, at) + b"]")
            marks += [m for m in around or [] if m.ph in ("i", "I")]
            at = text.find(name, at + 1)
    collected = _collect(marks)
    collected.flows += flows
    return collected


def _around(text: bytes | bytearray, at: int) -> bytes:
    """The object around position `at`, if it has no nested braces (otherwise a piece that does not decode as
    one, which the caller notices)."""
    start, end = text.rfind(b"{", 0, at), text.find(b"}", at)
    return bytes(text[start:end + 1]) if 0 <= start < end else b"null"


def marks_of_events(events: list) -> ChunkMarks:
    """The same from events the msgspec path has decoded (objects with ph, cat, name, id, ts)."""
    return _collect([e for e in events if e.ph in ("s", "f", "t", "i", "I")])


def _collect(marks: list) -> ChunkMarks:
    out = ChunkMarks()
    flows = out.flows
    for m in marks:
        if m.ph in FLOW_PHASES:
            flows.append((m.cat, _key(m.id), m.ph))
        elif m.ts is not None and m.ph in ("i", "I") and (m.name.startswith(WINDOW_START) or m.name == WINDOW_END):
            out.instants.append((m.name, float(m.ts)))
    return out


def _key(flow_id: object) -> str:
    """A flow id as the text that pairs it: an integer or a string as JSON writes it, any other value its JSON."""
    if isinstance(flow_id, msgspec.Raw):
        return bytes(flow_id).decode("utf-8", "replace")
    return msgspec.json.encode(flow_id).decode() if isinstance(flow_id, str) else str(flow_id)


def _decoded(text: bytes) -> list[_Mark] | list[_AnyIdMark] | None:
    for struct in (_Mark, _AnyIdMark):
        try:
            return msgspec.json.decode(text, type=list[struct])
        except msgspec.ValidationError:
            continue
        except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
            return None
    return None


def _decoded_whole(text: bytes | bytearray | memoryview) -> list[_AnyIdMark]:
    """Every event of the chunk (lenient: an event of another shape is skipped), keeping the flows and instants."""
    data = bytes(text)
    if not data.lstrip().startswith(b"["):
        data = b"[" + data
    if not data.rstrip().endswith(b"]"):
        data = data + b"]"
    try:
        events = msgspec.json.decode(data, type=list[msgspec.Raw])
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        return []
    decoder = msgspec.json.Decoder(_AnyIdMark)
    out = []
    for raw in events:
        try:
            event = decoder.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            continue
        if event.ph in ("s", "f", "t", "i", "I"):
            out.append(event)
    return out
