"""The Gluon streaming probe's kernels (benchmarks/engine/gluon_kernels.py) compile for sm_90a on a machine without
a GPU: one configuration of each kernel kind (gluon_compile_check.py --quick), each within a Hopper block's shared
memory, without spills, holding at least its ring, and with every TMA box the configured [BN, BK] tile (the host
descriptor carries that box). Runs the real compiler in a child process (the test session sets TRITON_INTERPRET).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "engine" / "gluon_compile_check.py"
SMEM_LIMIT = 227 * 1024  # dynamic shared memory a Hopper block may use


@pytest.mark.slow
def test_gluon_probe_kernels_compile_for_sm90(tmp_path):
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "cache")
    out = tmp_path / "compile.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--json", str(out)], env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    kinds = {(row["kernel"], row["sync"], row["batch"], row["mma"]) for row in rows}
    assert {kind[0] for kind in kinds} == {"chain_ws", "gemv_ws", "gemv_pipe"} and any(kind[3] for kind in kinds)
    for row in rows:
        assert "error" not in row, row["name"]
        ring = row["stages"] * row["bn"] * row["bk"] * 2
        assert ring <= row["shared_bytes"] <= SMEM_LIMIT, row["name"]
        assert row["local_bytes"] == 0, row["name"]
        descriptors = 4 if row["kernel"] == "chain_ws" else 1
        assert row["tma_boxes"] == [[row["bn"], row["bk"]]] * descriptors, row["name"]
        assert row["ptx_tma_copies"] > 0 and row["ptx_mbarrier_waits"] > 0, row["name"]
