"""The integrity audit's counts of a trace file (docs/run-format.md, "Integrity audit") and the slices a trace
viewer drops, computed with the standard library alone (no kernelscope code), from the file as
tests/trace_reference.py reads it: the reference that tests, benchmarks/corpus and the device scripts compare
kernelscope's audit and its Perfetto export against."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

from tests.trace_reference import (
    DEVICE_CATEGORIES,
    LONGEST_NAME,
    RUNTIME_CATEGORIES,
    read_document,
    rocprof_events,
)

OP_CATEGORIES = {"cpu_op", "operator", "user_annotation", "python_function"}
DEVICE_WORK = ("LaunchKernel", "LaunchCooperativeKernel", "GraphLaunch", "Memcpy", "Memset")
PDL_WORDS = ("LaunchKernelEx", "GraphLaunch")


def _usable(event: dict) -> bool:
    """A complete event with a start the reader keeps: |ts| ≤ 4e15 µs, 0 ≤ dur ≤ 1e12 µs (a missing dur is 0)."""
    if event.get("ph") != "X" or not isinstance(event.get("ts"), int | float) or isinstance(event.get("ts"), bool):
        return False
    dur = event.get("dur")
    dur = 0.0 if dur is None else dur
    return abs(float(event["ts"])) <= 4e15 and 0 <= float(dur) <= 1e12


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def audit_reference(path: Path) -> dict:
    """The audit's counts of a Kineto file (or an nsys export read as one): events as the readers keep them (times in ns from the earliest kept
    event, rounded half to even as the tables are), checked with the standard library only."""
    document, text = read_document(path)
    if isinstance(document, dict) and "rocprofiler-sdk-tool" in document:
        # rocprofv3's records as Kineto events, its GPU agents as devices; it has no flows and no closing bracket.
        gpus = [a for process in document["rocprofiler-sdk-tool"] for a in process.get("agents", [])
                if a.get("type") == 2]
        document = {"traceEvents": rocprof_events(document),
                    "deviceProperties": [{"id": a.get("logical_node_type_id", i)} for i, a in enumerate(gpus)]}
        text = b""
    events = document["traceEvents"] if isinstance(document, dict) else document
    kept = {"device": [], "runtime": [], "op": []}
    dropped = 0
    flows: list[tuple[str, str, str]] = []
    begins, closes = [], []
    for event in events:
        if not isinstance(event, dict):
            continue
        ph, cat = event.get("ph"), str(event.get("cat", "")).lower()
        if ph in ("s", "f", "t"):
            flows.append((event.get("cat", ""), json.dumps(event.get("id")), ph))
        if ph in ("i", "I") and isinstance(event.get("ts"), int | float):
            name = str(event.get("name", ""))
            if name.startswith("Iteration Start"):
                begins.append(float(event["ts"]))
            elif name == "Record Window End":
                closes.append(float(event["ts"]))
        kind = ("device" if cat in DEVICE_CATEGORIES else "runtime" if cat in RUNTIME_CATEGORIES
                else "op" if cat in OP_CATEGORIES else None)
        if kind is None or ph != "X" or event.get("ts") is None:
            continue
        if not _usable(event):
            dropped += 1
            continue
        dropped += len(str(event.get("name", ""))) > LONGEST_NAME  # names cut to the length limit
        kept[kind].append(event)
    every = [e for table in kept.values() for e in table]
    origin = min((float(e["ts"]) for e in every), default=0.0)

    def ns(event: dict) -> tuple[int, int]:
        start = round((float(event["ts"]) - origin) * 1e3)
        return start, start + round(float(event.get("dur") or 0.0) * 1e3)

    def args(event: dict) -> dict:
        return event["args"] if isinstance(event.get("args"), dict) else {}

    calls: dict[int, dict] = {}  # correlation id → the first runtime call with it
    for e in kept["runtime"]:
        correlation = _int(args(e).get("correlation"))
        if correlation is not None:
            calls.setdefault(correlation, e)
    lanes: defaultdict[object, list[tuple[int, int, dict]]] = defaultdict(list)
    for e in kept["device"]:
        a = args(e)
        device = _int(a.get("device")) if a.get("device") is not None else _int(e.get("pid"))
        stream = _int(a.get("stream")) if a.get("stream") is not None else _int(e.get("tid"))
        lanes[(device, stream)].append((*ns(e), e))
    overlaps, overlap_ns, pdl = 0, 0, 0
    for lane in lanes.values():
        lane.sort(key=lambda item: (item[0], item[1]))
        reach, union, stretch = None, 0, None
        for start, end, e in lane:
            if reach is not None and start < reach:
                overlaps += 1
                call = calls.get(_int(args(e).get("correlation")))
                pdl += call is not None and any(w in str(call.get("name", "")) for w in PDL_WORDS)
            if stretch is None or start > stretch[1]:
                if stretch is not None:
                    union += stretch[1] - stretch[0]
                stretch = [start, end]
            else:
                stretch[1] = max(stretch[1], end)
            reach = end if reach is None else max(reach, end)
        union += stretch[1] - stretch[0]
        overlap_ns += sum(end - start for start, end, _ in lane) - union
    device_ids = {_int(args(e).get("correlation")) for e in kept["device"]} - {None}
    launches_without = sum(1 for e in kept["runtime"] if any(w in str(e.get("name", "")) for w in DEVICE_WORK)
                           and _int(args(e).get("correlation")) not in device_ids)
    kernels_without = sum(1 for e in kept["device"] if _int(args(e).get("correlation")) not in calls)
    leads = []
    for e in kept["device"]:
        call = calls.get(_int(args(e).get("correlation")))
        if call is not None and ns(e)[0] < ns(call)[0]:
            leads.append(ns(call)[0] - ns(e)[0])
    window = (min(begins), max(closes)) if begins and closes and min(begins) <= max(closes) else None
    outside = None
    if window is not None:
        first, last = (round((edge - origin) * 1e3) for edge in window)
        outside = sum(1 for e in every if ns(e)[0] < first or ns(e)[1] > last)
    starts = {(c, i) for c, i, ph in flows if ph == "s"}
    ends = {(c, i) for c, i, ph in flows if ph == "f"}
    properties = document.get("deviceProperties") if isinstance(document, dict) else None
    properties = [p for p in properties if isinstance(p, dict)] if isinstance(properties, list) else []
    named = [p.get("id", i) for i, p in enumerate(properties)]
    active = {key[0] for key in lanes}
    stripped = text.strip()
    return {
        "device_events": len(kept["device"]), "stream_overlaps": overlaps, "stream_overlap_ns": overlap_ns,
        "stream_overlaps_pdl": pdl, "outside_window": outside, "launches_without_kernel": launches_without,
        "kernels_without_launch": kernels_without, "flows": len(flows) if text else None,
        "flows_unpaired": len(starts ^ ends) if text else None,  # an nsys export has no flow events
        "clock_jumps": len(leads), "clock_jump_max_ns": max(leads, default=0), "devices_named": len(named),
        "devices_silent": sum(1 for d in named if d not in active),
        "unclosed": stripped.startswith(b"[") and not stripped.endswith(b"]"), "dropped_events": dropped,
    }


# ---- what a trace viewer drops: complete slices that overlap on a track without nesting

def crossing_slices(path: Path) -> dict[str, int]:
    """Of an exported trace (Chrome trace JSON): `crossing`, the complete slices (`ph` X) that start inside another
    on their track (pid, tid) and end after it (Perfetto drops them); `device_overlaps`, device slices (kernel,
    copy, set) that start before another on their track has ended; `slices`. Times read exactly (decimal µs)."""
    from decimal import Decimal

    raw = path.read_bytes()
    text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    document = json.loads(text, parse_float=Decimal)
    events = document["traceEvents"] if isinstance(document, dict) else document
    tracks: defaultdict[object, list[tuple[int, int, bool]]] = defaultdict(list)
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "X" and e.get("ts") is not None:
            start = int(Decimal(e["ts"]) * 1000)
            end = start + int(Decimal(e.get("dur") or 0) * 1000)
            tracks[(e.get("pid"), e.get("tid"))].append((start, end, str(e.get("cat", "")).lower() in DEVICE_CATEGORIES))
    crossing = device_overlaps = 0
    for slices in tracks.values():
        slices.sort(key=lambda x: (x[0], -x[1]))
        stack: list[int] = []
        reach = None
        for start, end, device in slices:
            while stack and stack[-1] <= start:
                stack.pop()
            if stack and end > stack[-1]:
                crossing += 1
            stack.append(end if not stack else min(end, stack[-1]))
            if device:
                device_overlaps += reach is not None and start < reach
                reach = end if reach is None else max(reach, end)
    return {"slices": sum(len(s) for s in tracks.values()), "crossing": crossing, "device_overlaps": device_overlaps}
