"""What a Kineto trace file holds, computed with the standard library alone (no kernelscope code): the reference
that tests and benchmarks/corpus compare imports against.

Device activity is every complete event ("ph": "X") whose category (any case) is a kernel, a memory copy or a
memory set: kernel, gpu_memcpy, memcpy, gpu_memset, memset, and MTIA's mtia_ccp_events. Durations are in µs in the
file; the reference rounds each to whole ns, as a table of int64 ns would. Names longer than 4,096 characters are
cut as docs/importing.md says: the first 4,082 characters, `…#` and the first 12 hex digits of the SHA-256 of
the whole name (UTF-8).

Busy time: the union of the device events' intervals ([ts, ts + dur]) per device (`args.device`, else `pid`),
summed over the devices; in a file without device activity, the union of the CPU ops' whole calls per thread
(pid, tid), summed over the threads. In µs as the file writes them, counted from each lane's first start (a
timestamp of ~1.7e15 µs is a float with a quarter-µs step: adding a duration to it would round the end), rounded
to ns at the end.

Idle gaps: per device, from the end of everything that started before to the next start, where that is later.

Kernel launch calls: the runtime or driver calls that launched kernels, each once (a graph launch starts many): for
each kernel with a correlation id, the call with the same id, where the file holds exactly one (the device's
events sit under another pid than the host's)."""

from __future__ import annotations

import gzip
import hashlib
import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from tests.nsys_reference import SQLITE_MAGIC, nsys_document

DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "memcpy", "gpu_memset", "memset", "mtia_ccp_events"}
LONGEST_NAME = 4096


def documented_name(name: str) -> str:
    """A name as a table holds it (the documented cut of names longer than LONGEST_NAME characters)."""
    if len(name) <= LONGEST_NAME:
        return name
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:12]
    return name[:LONGEST_NAME - 14] + "…#" + digest


@dataclass
class Reference:
    launches: int = 0
    device_ns: int = 0
    by_name: dict[str, tuple[int, int]] = field(default_factory=dict)  # name → (launches, total ns)
    cpu_ops: int = 0
    busy_ns: int | None = None  # None: no event with a time
    busy_stretches: int = 0  # busy stretches (each stretch's two ends are rounded once)
    kernel_launch_calls_ns: list[int] = field(default_factory=list)  # each call that launched kernels, once
    idle_gaps_ns: list[int] = field(default_factory=list)  # between a device's busy stretches, largest first
    largest_gap: Gap | None = None  # the largest of them, with the events around it
    gap_host_wait_ns: int = 0  # summed over the gaps whose closing kernel's launch call is in the file
    gap_with_call_ns: int = 0  # those gaps' length


@dataclass
class Gap:
    ns: int
    before: str  # the event that reached furthest before the gap (documented name)
    after: str  # the event whose start ended it
    host_wait_ns: int | None  # from the gap's start to the start of the runtime call that launched `after`


# Runtime and driver calls (the host side of a launch), tied to the kernels they launched by `args.correlation`.
KERNEL_CATEGORIES = {"kernel", "mtia_ccp_events"}
RUNTIME_CATEGORIES = {"cuda_runtime", "runtime", "cuda_driver", "xpu_runtime", "privateuse1_runtime", "mtia_runtime"}


def read_document(path: Path) -> tuple[dict | list, bytes]:
    """The file's document and its text (an Nsight Systems SQLite export: as Kineto events, tests/nsys_reference.py)."""
    raw = path.read_bytes()
    if raw.startswith(SQLITE_MAGIC):
        return nsys_document(path), b""
    text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    return json.loads(text), text


def read_events(path: Path) -> list[dict]:
    document, _ = read_document(path)
    if isinstance(document, dict) and "rocprofiler-sdk-tool" in document:
        return rocprof_events(document)
    return document["traceEvents"] if isinstance(document, dict) else document


def rocprof_events(document: dict) -> list[dict]:
    """rocprofv3's JSON output as the events a Kineto trace would hold: each kernel dispatch and memory copy (times
    in µs from its ns), named by the kernel symbol's demangled name without the code object's `.kd` suffix, and each
    HIP API call, tied to its dispatches by the internal correlation id."""
    events = []
    for process in document["rocprofiler-sdk-tool"]:
        pid = process["metadata"]["pid"]
        symbols = {s["kernel_id"]: s for s in process.get("kernel_symbols", [])}
        gpus = {a["id"]["handle"]: a.get("logical_node_type_id", i)
                for i, a in enumerate(a for a in process.get("agents", []) if a.get("type") == 2)}
        strings = {r["kind"]: r["operations"] for r in process.get("strings", {}).get("buffer_records", [])}
        records = process.get("buffer_records", {})
        for d in records.get("kernel_dispatch", []):
            info = d["dispatch_info"]
            name = symbols[info["kernel_id"]]["demangled_kernel_name"]
            name = name[:-3] if name.endswith(".kd") else name
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": pid, "ts": d["start_timestamp"] / 1000,
                           "dur": (d["end_timestamp"] - d["start_timestamp"]) / 1000,
                           "args": {"device": gpus.get(info["agent_id"]["handle"], info["agent_id"]["handle"]),
                                    "stream": (d.get("stream_id") or info.get("queue_id") or {}).get("handle"),
                                    "correlation": d["correlation_id"]["internal"]}})
        for c in records.get("memory_copy", []):
            direction = strings.get("MEMORY_COPY", [])[c["operation"]].removeprefix("MEMORY_COPY_")
            direction = "Memcpy " + {"HOST_TO_DEVICE": "HtoD", "DEVICE_TO_HOST": "DtoH", "DEVICE_TO_DEVICE": "DtoD",
                                     "HOST_TO_HOST": "HtoH"}.get(direction, direction)
            events.append({"ph": "X", "cat": "gpu_memcpy", "name": direction, "pid": pid,
                           "ts": c["start_timestamp"] / 1000, "dur": (c["end_timestamp"] - c["start_timestamp"]) / 1000,
                           "args": {"device": c.get("dst_agent_id", {}).get("handle")}})
        for a in records.get("hip_api", []):
            events.append({"ph": "X", "cat": "cuda_runtime", "name": strings["HIP_RUNTIME_API"][a["operation"]],
                           "pid": pid, "tid": a["thread_id"], "ts": a["start_timestamp"] / 1000,
                           "dur": (a["end_timestamp"] - a["start_timestamp"]) / 1000,
                           "args": {"correlation": a["correlation_id"]["internal"]}})
    return events


def reference(path: Path) -> Reference:
    events = read_events(path)
    counts: Counter[str] = Counter()
    totals: defaultdict[str, int] = defaultdict(int)
    ref = Reference()
    device_intervals: defaultdict[object, list[tuple[float, float]]] = defaultdict(list)
    device_events: defaultdict[object, list[dict]] = defaultdict(list)
    cpu_intervals: defaultdict[object, list[tuple[float, float]]] = defaultdict(list)
    calls: defaultdict[object, list[int]] = defaultdict(list)  # (pid, correlation) → indices of runtime calls
    kernel_calls: list[object] = []  # the correlation id of each kernel
    for index, event in enumerate(events):
        if event.get("ph") != "X" or event.get("ts") is None:
            continue
        category = str(event.get("cat", "")).lower()
        start, dur = float(event["ts"]), float(event.get("dur") or 0.0)
        if category in ("cpu_op", "operator"):
            ref.cpu_ops += 1
            cpu_intervals[(event.get("pid"), event.get("tid"))].append((start, dur))
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        if category in RUNTIME_CATEGORIES and args.get("correlation") is not None:
            calls[(event.get("pid"), args["correlation"])].append(index)
        if category not in DEVICE_CATEGORIES:
            continue
        if category in KERNEL_CATEGORIES and args.get("correlation") is not None:
            kernel_calls.append(args["correlation"])
        device_intervals[args.get("device", event.get("pid"))].append((start, dur))
        device_events[args.get("device", event.get("pid"))].append(event)
        ns = round(float(event.get("dur") or 0.0) * 1000)
        name = documented_name(str(event.get("name", "")))
        counts[name] += 1
        totals[name] += ns
        ref.launches += 1
        ref.device_ns += ns
    ref.by_name = {name: (counts[name], totals[name]) for name in counts}
    # A kernel's launch: the one runtime call of the host process (the same pid) with its correlation id.
    # Each call once, however many kernels it launched (a CUDA-graph launch).
    host_pids = {pid for pid, _ in calls}
    launched: set[int] = set()
    for correlation in kernel_calls:
        found = [index for host in host_pids for index in calls.get((host, correlation), [])]
        if len(found) == 1:
            launched.add(found[0])
    ref.kernel_launch_calls_ns = [round(float(events[index].get("dur") or 0.0) * 1000) for index in sorted(launched)]
    ref.idle_gaps_ns = sorted((round(gap * 1000) for intervals in device_intervals.values()
                               for gap in _gaps_us(intervals)), reverse=True)
    ref.largest_gap, ref.gap_host_wait_ns, ref.gap_with_call_ns = _gap_details(device_events, calls, events)
    lanes = device_intervals if device_intervals else cpu_intervals
    if lanes:
        unions = [_union_us(intervals) for intervals in lanes.values()]
        ref.busy_ns = round(sum(total for total, _ in unions) * 1000)
        ref.busy_stretches = sum(stretches for _, stretches in unions)
    return ref


def _union_us(intervals: list[tuple[float, float]]) -> tuple[float, int]:
    """Total length of the union of (start, duration) intervals, and how many separate stretches it has."""
    total, stretches, current = 0.0, 0, None
    first = min(start for start, _ in intervals)
    # start - first is exact for the file's floats (Sterbenz); the end is that plus the duration.
    for start, end in sorted((start - first, start - first + dur) for start, dur in intervals):
        if current is None or start > current[1]:
            if current is not None:
                total += current[1] - current[0]
            current, stretches = [start, end], stretches + 1
        else:
            current[1] = max(current[1], end)
    return total + current[1] - current[0], stretches


def _gaps_us(intervals: list[tuple[float, float]]) -> list[float]:
    """The gaps between the busy stretches of (start, duration) intervals: from the end of all that started before
    to the next start."""
    first = min(start for start, _ in intervals)
    gaps, reach = [], None
    for start, end in sorted((start - first, start - first + dur) for start, dur in intervals):
        if reach is not None and start > reach:
            gaps.append(start - reach)
        reach = end if reach is None else max(reach, end)
    return gaps


def _gap_details(lanes: dict[object, list[dict]], calls: dict[object, list[int]],
                 events: list[dict]) -> tuple[Gap | None, int, int]:
    """The largest gap of any device, with the event that reached furthest before it, the one that ended it and how
    long after it began the host called that one's launch (the runtime call of the same correlation id); and over
    every gap whose closing kernel's call is found, that host wait and the gaps' length, summed (ns)."""
    best: tuple[float, dict, dict, float, float] | None = None
    wait_total, known_total = 0.0, 0.0
    for lane in lanes.values():
        first = min(float(e["ts"]) for e in lane)
        ordered = sorted(lane, key=lambda e: (float(e["ts"]), float(e.get("dur") or 0.0)))
        reach, holder = None, None
        for event in ordered:
            start = float(event["ts"]) - first
            end = start + float(event.get("dur") or 0.0)
            if reach is not None and start > reach:
                wait = _host_wait(event, first, reach, start - reach, calls, events)
                if wait is not None:
                    wait_total, known_total = wait_total + wait, known_total + (start - reach)
                if best is None or start - reach > best[0]:
                    best = (start - reach, holder, event, first, reach)
            if reach is None or end >= reach:
                reach, holder = end, event
    if best is None:
        return None, 0, 0
    gap, before, after, first, opened = best
    wait = _host_wait(after, first, opened, gap, calls, events)
    return (Gap(round(gap * 1000), documented_name(str(before.get("name", ""))),
                documented_name(str(after.get("name", ""))), None if wait is None else round(wait * 1000)),
            round(wait_total * 1000), round(known_total * 1000))


def _host_wait(event: dict, first: float, opened: float, gap: float, calls: dict[object, list[int]],
                events: list[dict]) -> float | None:
    """µs from `opened` (counted from the lane's `first` start, as the call's start is: exact for the file's floats)
    to the start of the one runtime call of the event's correlation id, within [0, gap]."""
    args = event.get("args") if isinstance(event.get("args"), dict) else {}
    correlation = args.get("correlation")
    if correlation is None:  # (any device event: a copy's or memset's call starts it too)
        return None
    found = [index for (_, key), indices in calls.items() if key == correlation for index in indices]
    if len(found) != 1:
        return None
    return min(max((float(events[found[0]]["ts"]) - first) - opened, 0.0), gap)
