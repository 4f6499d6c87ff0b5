"""Each step's wall time as a trace file holds it, with the standard library alone (no kernelscope code): what the
critical-path tests compare the path's length with (docs/critical-path.md defines the step's wall time).

A step's work is the device work (kernels, copies, sets) whose launch call (the runtime call with the same
`correlation`, else the CPU op with the same External id) starts inside the step's marker on the same thread; on
a file without device activity, the CPU ops that start inside it. Its wall time runs from the end of the step that
ended before it (the first: from its first launch call or work) to the end of its last work. Markers, by family:
- `ks`: kernelscope's ranges `ks.phase:<phase>[:<i>]` (the innermost one holds the launch);
- `profiler_step`: `ProfilerStep#N` ranges;
- `execute`: serving engines' step annotations (the first of vLLM's `execute_<n>_context_…`, its older
  `execute_context_…`, SGLang's `step[…]` that the file holds);
- `forwards`: top-level `nn.Module: …` Python frames, each lasting until the next one starts on its thread;
- `lookups`: the vocabulary embedding lookups (`aten::embedding` of the largest table) and the compiled-graph
  calls (`## Call CompiledFxGraph … ##`) holding none, each lasting until the next one starts on its thread;
- `run`: no markers: the whole file is one step.
Times in ns: `ts` µs × 1000 plus the file's baseTimeNanoseconds (less the first file's), so that files of several
ranks share a clock."""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from pathlib import Path

DEVICE = {"kernel", "gpu_memcpy", "memcpy", "gpu_memset", "memset", "mtia_ccp_events"}
RUNTIME = {"cuda_runtime", "runtime", "cuda_driver", "xpu_runtime", "privateuse1_runtime", "mtia_runtime"}
EXECUTE = [r"^execute_\d+_context_\d+\(", r"^execute_context_\d+\(", r"^step\["]
COMPILED = re.compile(r"^## Call CompiledFxGraph \S+ ##$")


def _document(path: Path) -> dict | list:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw)


def _thread(value) -> object:
    return int(value) if isinstance(value, str) and value.lstrip("-").isdigit() else value


def step_walls(paths: list[Path], family: str) -> list[float]:
    """Every step's wall time (ns), in the order the steps end, over the files of one run (its ranks)."""
    work: list[tuple[object, float, float, float]] = []  # (step, first launch or start, end, own start)
    documents = [_document(path) for path in paths]
    bases = [d.get("baseTimeNanoseconds", 0) if isinstance(d, dict) else 0 for d in documents]
    bases = [b if isinstance(b, int) else 0 for b in bases]
    for rank, document in enumerate(documents):
        events = document["traceEvents"] if isinstance(document, dict) else document
        # Relative to the first file's base: an epoch in ns (~1.8e18) as a float would round away hundreds of ns.
        work += _work(events, bases[rank] - bases[0], family, rank)
    steps: dict[object, list[float]] = {}
    for key, launch, end, start in work:
        if key is None:
            continue
        own = min(launch, start)
        entry = steps.setdefault(key, [own, end])
        entry[0], entry[1] = min(entry[0], own), max(entry[1], end)
    ordered = sorted(steps.values(), key=lambda e: (e[1], e[0]))
    walls, previous = [], None
    for own, end in ordered:
        start = own if previous is None else previous
        if end > start:
            walls.append(end - start)
        previous = end
    return walls


def _work(events: list, base: int, family: str, rank: int) -> list[tuple[object, float, float, float]]:
    """Per device event (CPU op, on a file without device activity): its step, launch time, end and start."""
    timed = [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))]
    ns = lambda e: e["ts"] * 1000.0 + base  # noqa: E731
    dur = lambda e: float(e.get("dur") or 0) * 1000.0  # noqa: E731
    cat = lambda e: str(e.get("cat", "")).lower()  # noqa: E731
    device = [e for e in timed if cat(e) in DEVICE]
    calls = defaultdict(list)
    for e in timed:
        if cat(e) in RUNTIME and isinstance(e.get("args"), dict) and e["args"].get("correlation") is not None:
            calls[e["args"]["correlation"]].append(e)
    ops_by_external = {}
    for e in timed:
        if cat(e) in ("cpu_op", "operator") and isinstance(e.get("args"), dict):
            external = e["args"].get("External id", e["args"].get("external id"))
            ops_by_external.setdefault(external, e)
    markers = _markers(timed, family, ns, dur, cat)
    out = []
    if not device:  # a file without device activity: its CPU ops are the work
        for e in timed:
            if cat(e) in ("cpu_op", "operator"):
                key = _step_of(markers, _thread(e.get("tid")), ns(e), family)
                out.append((key, ns(e), ns(e) + dur(e), ns(e)))
        return out
    for e in device:
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        owners = calls.get(args.get("correlation"), [])
        launch = owners[0] if len(owners) == 1 else ops_by_external.get(args.get("External id", args.get("external id")))
        key = _step_of(markers, _thread(launch.get("tid")), ns(launch), family) if launch is not None else None
        if family == "run":
            key = "run"
        start = ns(e)
        out.append((key, ns(launch) if launch is not None else start, start + dur(e), start))
    return out


def _markers(timed: list, family: str, ns, dur, cat) -> dict[object, list[tuple[float, float, object]]]:
    """Per thread: (start, end, name) of the step markers of `family` (end: the next marker's start for markers that
    last until the next one)."""
    ranges = [e for e in timed if cat(e) in ("user_annotation", "cpu_op", "operator")]
    chosen: list[dict] = []
    until_next = False
    if family == "ks":
        chosen = [e for e in ranges if cat(e) == "user_annotation" and str(e.get("name", "")).startswith("ks.phase:")]
    elif family == "profiler_step":
        chosen = [e for e in ranges if re.match(r"^ProfilerStep#\d+$", str(e.get("name", "")))]
    elif family == "execute":
        for pattern in EXECUTE:
            chosen = [e for e in ranges if cat(e) == "user_annotation" and re.match(pattern, str(e.get("name", "")))]
            if chosen:
                break
    elif family == "forwards":
        frames = [e for e in timed if cat(e) == "python_function" and str(e.get("name", "")).startswith("nn.Module: ")]
        frames.sort(key=lambda e: (str(e.get("tid")), ns(e), -dur(e)))
        outer_end: dict[object, float] = {}
        for e in frames:  # a frame no earlier frame of its thread encloses
            if ns(e) >= outer_end.get(e.get("tid"), float("-inf")):
                chosen.append(e)
                outer_end[e.get("tid")] = ns(e) + dur(e)
        until_next = True
    elif family == "lookups":
        dims = lambda e: e["args"].get("Input Dims") or e["args"].get("Input dims")  # noqa: E731  (older spelling)
        lookups = [e for e in ranges if cat(e) in ("cpu_op", "operator") and e.get("name") == "aten::embedding"
                   and isinstance(e.get("args"), dict) and dims(e)]
        largest = max((dims(e)[0][0] for e in lookups if dims(e)[0]), default=None)
        lookups = [e for e in lookups if dims(e)[0] and dims(e)[0][0] == largest]
        compiled = [e for e in ranges if cat(e) == "user_annotation" and COMPILED.match(str(e.get("name", "")))
                    and not any(o.get("tid") == e.get("tid") and ns(e) <= ns(o) < ns(e) + dur(e) for o in lookups)]
        chosen = lookups + compiled
        until_next = True
    # A marker's step: its name where names repeat on every rank (ks, ProfilerStep), else its place in time order.
    named = family in ("ks", "profiler_step")
    order = {id(e): i for i, e in enumerate(sorted(chosen, key=ns))}
    per_thread: dict[object, list[tuple[float, float, object]]] = defaultdict(list)
    for e in chosen:
        key = e.get("name") if named else order[id(e)]
        per_thread[_thread(e.get("tid"))].append((ns(e), ns(e) + max(dur(e), 1.0), key))
    for thread, items in per_thread.items():
        items.sort(key=lambda item: (item[0], -item[1]))
        if until_next:
            per_thread[thread] = [(s, items[i + 1][0] if i + 1 < len(items) else float("inf"), k)
                                  for i, (s, _, k) in enumerate(items)]
    return per_thread


def _step_of(markers: dict, thread: object, t: float, family: str) -> object:
    """The innermost marker on `thread` holding `t` (the latest-starting one that still holds it)."""
    if family == "run":
        return "run"
    holding = [(s, -e, i) for i, (s, e, _) in enumerate(markers.get(thread, [])) if s <= t < e]
    return markers[thread][max(holding)[2]][2] if holding else None
