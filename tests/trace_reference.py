"""What a Kineto trace file holds, computed with the standard library alone (no kernelscope code): the reference
that tests and benchmarks/corpus compare imports against.

Device activity is every complete event ("ph": "X") whose category (any case) is a kernel, a memory copy or a
memory set: kernel, gpu_memcpy, memcpy, gpu_memset, memset, and MTIA's mtia_ccp_events. Durations are in µs in the
file; the reference rounds each to whole ns, as a table of int64 ns would. Names longer than 4,096 characters are
cut as docs/importing.md says: the first 4,082 characters, `…#` and the first 12 hex digits of the SHA-256 of
the whole name (UTF-8)."""

from __future__ import annotations

import gzip
import hashlib
import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

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


def read_events(path: Path) -> list[dict]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    document = json.loads(raw)
    return document["traceEvents"] if isinstance(document, dict) else document


def reference(path: Path) -> Reference:
    events = read_events(path)
    counts: Counter[str] = Counter()
    totals: defaultdict[str, int] = defaultdict(int)
    ref = Reference()
    for event in events:
        if event.get("ph") != "X" or event.get("ts") is None:
            continue
        category = str(event.get("cat", "")).lower()
        if category in ("cpu_op", "operator"):
            ref.cpu_ops += 1
        if category not in DEVICE_CATEGORIES:
            continue
        ns = round(float(event.get("dur") or 0.0) * 1000)
        name = documented_name(str(event.get("name", "")))
        counts[name] += 1
        totals[name] += ns
        ref.launches += 1
        ref.device_ns += ns
    ref.by_name = {name: (counts[name], totals[name]) for name in counts}
    return ref
