"""The CPU side of benchmarks/device/critical_path_check.py: its comparison of a predicted and a re-measured step
change, on a real trace that holds spin kernels (HTA's CUDA event synchronisation trace: `torch.cuda._sleep`'s
spin_kernel), the measured trace standing in for both baseline and intervention."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.step_reference import _document

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "tests" / "data" / "public" / "hta" / "critical_path__cuda_event_sync__event_sync_trace.json.gz"


def _check_module():
    spec = importlib.util.spec_from_file_location("critical_path_check", ROOT / "benchmarks/device/critical_path_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_script_loads_no_torch_to_compare():
    before = "torch" in sys.modules
    _check_module()
    assert ("torch" in sys.modules) == before


def test_the_comparison_on_a_trace_with_spins(tmp_path):
    check = _check_module()
    spins = [e["dur"] * 1000.0 for e in _document(TRACE)["traceEvents"]
             if e.get("cat") == "kernel" and "spin_kernel" in e.get("name", "")]
    assert spins
    result = check.analyse(TRACE, TRACE, tmp_path / "work", phase="unknown")
    assert result["matched_launches"] == len(spins)
    assert result["measured_change_ns"] == 0  # the same trace twice
    assert result["sum_of_spins_ns"] == pytest.approx(sum(spins) * (1 - 1 / check.SHORTER), rel=1e-6)
    # Taking a kernel away saves at most its own time, and here the spin decides the step (the host waits on it).
    assert 0 < result["predicted_change_ns"] <= sum(spins) + 1
    assert result["passed"] is (abs(result["predicted_change_ns"]) <= check.SMALL * result["baseline_step_ns"])
    for key in ("baseline_step_ns", "intervened_step_ns", "retimed_step_ns", "error_ns", "rule", "steps_compared"):
        assert key in result


def test_unknown_cases_are_refused():
    check = _check_module()
    with pytest.raises(SystemExit):
        check.main(["--out", "/nonexistent/never", "--cases", "no_such_case"])
