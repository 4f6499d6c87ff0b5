from __future__ import annotations

import atexit
import gzip
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# Compiled report templates (report/template_cache.py) go to a folder of this test session, not the user's cache:
# every session starts cold, and the tests that run reports twice read what the first wrote.
os.environ["KERNELSCOPE_CACHE_DIR"] = tempfile.mkdtemp(prefix="kernelscope-test-cache-")
atexit.register(shutil.rmtree, os.environ["KERNELSCOPE_CACHE_DIR"], True)

DATA = Path(__file__).parent / "data"
KINETO = DATA / "kineto"


def _eager(path: Path) -> bool:
    """A trace without CUDA-graph launches: every kernel has the op that launched it (replays get theirs from the
    graph-replay pass, not from attribute())."""
    with gzip.open(path, "rb") as f:
        return b"cudaGraphLaunch" not in f.read()


# Our own GPU captures (H200); the eager ones: every kernel under an op, prefill and decode ranges.
GPU_TRACES = sorted(KINETO.glob("h200-*.trace.json.gz"))
EAGER_GPU_TRACES = [p for p in GPU_TRACES if _eager(p)]


@pytest.fixture(scope="session")
def qwen_gpu_trace() -> Path:
    return KINETO / "h200-qwen2-0.5b-p16-n4.trace.json.gz"


def write_trace(path: Path, events: list[dict], **fields) -> Path:
    """A small Kineto-shaped trace file (gzip when the name ends in .gz)."""
    document = {"schemaVersion": 1, **fields, "traceEvents": events}
    text = json.dumps(document, indent=2)
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path
