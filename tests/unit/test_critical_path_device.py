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


@pytest.mark.slow
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


CAPTURED = ROOT / "tests" / "data" / "foreign" / "captured"


@pytest.mark.parametrize("name, expect_on_path", [("spin_on_path_interleaved", True),
                                                  ("spin_side_stream_interleaved", False)])
@pytest.mark.slow
def test_re_timing_against_the_measured_change_of_interleaved_steps(tmp_path, name, expect_on_path):
    """The device check as recorded on an H200: steps alternate spins ten times shorter and at full length. The
    measured change (the file's odd steps against its even ones, step times from the file in plain Python) is what
    the check compares with; a spin on the chain's stream is predicted within 10% of it, one on a side stream that
    the chain never waits for is predicted to cost nothing."""
    from tests.step_reference import step_walls

    check = _check_module()
    trace = CAPTURED / f"{name}.json.gz"
    result = check.analyse_interleaved(trace, tmp_path / "work")
    walls = step_walls([trace], "ks")  # the steps in the order they end: 0, 1, 2, …
    short = sorted(walls[i] for i in range(2, len(walls)) if i % 2 == 0)
    long = sorted(walls[i] for i in range(2, len(walls)) if i % 2 == 1)
    median = lambda xs: (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2  # noqa: E731
    assert result["measured_change_ns"] == pytest.approx(median(long) - median(short), abs=10)  # ns: µs rounding
    if expect_on_path:
        assert result["passed"] and abs(result["error_of_measured"]) <= check.TOLERANCE
        assert result["predicted_change_ns"] == pytest.approx(result["spins_saved_ns"], rel=0.05)
    else:
        assert result["predicted_change_ns"] == 0
        assert result["measured_change_ns"] < 0.2 * result["spins_saved_ns"]  # most of the spin hides
        # Off the path the scale is the intervention's own size: the spins' change, not the (near-zero) measured one.
        off = check.analyse_interleaved(trace, tmp_path / "off", expect="off_path")
        assert off["rule"].startswith("off the path")
        assert off["passed"] == (abs(off["measured_change_ns"]) <= check.TOLERANCE * off["spins_saved_ns"])
