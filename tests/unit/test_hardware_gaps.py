"""Devices the hardware database does not know, and precisions a known device lacks: every figure that needs no
peak is still made, the report names the missing roofs, and `import --device` supplies a spec by hand."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest

from kernelscope.analyze.costs.roofline import missing_ceilings, place_on_roofline
from kernelscope.analyze.hardware import ceilings_for, identify_spec, load_specs
from kernelscope.cli import main

# ROCm 6.2 names its MI250 GCDs "AMD Radeon Graphics" (104 compute units, 64 GiB), a name no datasheet carries.
RADEON = Path(__file__).resolve().parents[1] / "data" / "public" / "hta" / \
    "data__amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"
# vLLM on ROCm writes an empty device name; the device's properties are those of an MI300X.
UNNAMED = Path(__file__).resolve().parents[1] / "data" / "public" / "tracelens" / \
    "inference__vllm_prefilldecode_piecewise__graph_execution.json.gz"


def _kernels(rows: list[tuple[str, int, float, float, str | None]]) -> pl.DataFrame:
    return pl.DataFrame(
        [{"name": n, "dur_ns": d, "flops": f, "bytes_moved": b, "precision": p, "cost_model": "m",
          "est_occupancy_pct": None, "registers_per_thread": None} for n, d, f, b, p in rows])


def test_a_precision_the_datasheet_lacks_is_named_with_its_share():
    # V100: fp16 and fp32 peaks, no bf16. A bf16 GEMM needs a peak it lacks; a bf16 copy needs only bandwidth.
    kernels = _kernels([("gemm", 6_000, 4e9, 1e7, "bf16"), ("copy", 3_000, 0.0, 2e6, "bf16"),
                        ("gemm16", 1_000, 1e9, 1e6, "fp16")])
    ceilings = ceilings_for("Tesla V100-SXM2-32GB")
    missing = missing_ceilings(kernels, ceilings)
    assert [(m.quantity, m.time_ns) for m in missing] == [("bf16", 6_000)]
    assert missing[0].share == pytest.approx(6_000 / 10_000)
    classes = dict(place_on_roofline(kernels, ceilings).select("name", "roofline_class").iter_rows())
    assert classes["gemm"] == "unclassified" and classes["copy"] != "unclassified"
    assert classes["gemm16"] != "unclassified"


def test_an_unknown_device_lacks_every_roof_its_kernels_need():
    kernels = _kernels([("a", 2_000, 1e6, 1e6, "fp32"), ("b", 1_000, 0.0, 1e6, None), ("c", 1_000, None, None, None)])
    missing = {m.quantity: m.time_ns for m in missing_ceilings(kernels, ceilings_for("AMD Radeon Graphics"))}
    assert missing == {"bandwidth": 3_000, "fp32": 2_000}


def test_unknown_device_report_keeps_figures_and_names_missing_roofs(tmp_path):
    out = tmp_path / "run"
    assert main(["import", str(RADEON), "--out", str(out), "--lang", "en"]) == 0
    report = (out / "report" / "report.md").read_text()
    assert "no hardware spec matches `AMD Radeon Graphics`" in report
    # a training step: its forward, backward and optimizer phases each get their histograms
    assert "![forward](figures/histograms_forward.png)" in report
    assert (out / "report" / "figures" / "histograms_forward.png").stat().st_size > 0
    # The missing bandwidth roof is named with the device-time share of the kernels that have byte counts.
    kernels = pl.read_parquet(out / "kernels.parquet")
    needing = kernels.filter(pl.col("bytes_moved") > 0)["dur_ns"].sum() / kernels["dur_ns"].sum()
    assert f"memory bandwidth (needed by kernels holding {100 * needing:.1f}% of device time)" in report
    assert not list((out / "report" / "figures").glob("roofline_*"))


@pytest.mark.slow
def test_import_device_supplies_the_spec(tmp_path):
    out = tmp_path / "run"
    assert main(["import", str(RADEON), "--out", str(out), "--lang", "en", "--device", "mi250"]) == 0
    hardware = json.loads((out / "run.json").read_text())["hardware"]
    assert hardware["name"] == "AMD Radeon Graphics" and hardware["spec"] == "mi250"
    report = (out / "report" / "report.md").read_text()
    assert "Ceilings of AMD Instinct MI250 (one GCD) (the device named with `import --device`)" in report
    assert list((out / "report" / "figures").glob("roofline_forward*"))  # its training step's phases


def test_import_device_that_matches_nothing_stops_cleanly(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["import", str(RADEON), "--out", str(out), "--device", "nonesuch-9000"]) == 2
    assert "import --device: no device matches 'nonesuch-9000'" in capsys.readouterr().err
    assert not out.exists() and not list(tmp_path.iterdir())


def _properties(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))["deviceProperties"][0]


@pytest.mark.slow
def test_an_unnamed_device_is_identified_by_its_properties(tmp_path):
    props = _properties(UNNAMED)
    assert props["name"] == ""
    # The specs that fit, found here from the hardware data alone: compute units, memory within 12%, warp 64.
    fitting = [s.key for s in load_specs().values() if s.sm_count == props["numSms"] and s.vendor == "AMD"
               and abs(props["totalGlobalMem"] / 2**30 - s.memory_bytes / 1e9) <= 0.12 * s.memory_bytes / 1e9]
    assert len(fitting) == 1
    out = tmp_path / "run"
    assert main(["import", str(UNNAMED), "--out", str(out), "--lang", "en"]) == 0
    hardware = json.loads((out / "run.json").read_text())["hardware"]
    spec = load_specs()[fitting[0]]
    assert (hardware["name"], hardware["spec"], hardware["identified_by"]) == (spec.name, spec.key, "device properties")
    report = (out / "report" / "report.md").read_text()
    assert f"| Device | {spec.name} (inferred: the trace names no device;" in report
    assert f"Ceilings of {spec.name} (the device the trace's properties fit)" in report
    assert list((out / "report" / "figures").glob("roofline_mixed*"))


def test_properties_that_fit_several_devices_or_none_identify_nothing():
    props = _properties(RADEON)  # 104 compute units and 64 GiB: an MI210 and an MI250 GCD alike
    fitting = [s.key for s in load_specs().values() if s.sm_count == props["numSms"] and s.vendor == "AMD"]
    assert len(fitting) > 1
    assert identify_spec(props["numSms"], props["totalGlobalMem"], props["warpSize"]) is None
    mi300 = _properties(UNNAMED)
    assert identify_spec(mi300["numSms"], mi300["totalGlobalMem"], 32) is None  # an NVIDIA warp: no AMD part
    assert identify_spec(mi300["numSms"], None, mi300["warpSize"]) is None
    assert identify_spec(mi300["numSms"], 2 * mi300["totalGlobalMem"], mi300["warpSize"]) is None


def test_a_named_device_is_not_second_guessed(tmp_path):
    out = tmp_path / "run"
    assert main(["import", str(RADEON), "--out", str(out), "--no-report"]) == 0
    hardware = json.loads((out / "run.json").read_text())["hardware"]
    assert hardware["name"] == "AMD Radeon Graphics" and "spec" not in hardware and "identified_by" not in hardware


@pytest.mark.slow
def test_import_device_names_an_unnamed_device(tmp_path):
    out = tmp_path / "run"
    assert main(["import", str(UNNAMED), "--out", str(out), "--lang", "en", "--device", "mi325x"]) == 0
    hardware = json.loads((out / "run.json").read_text())["hardware"]
    assert (hardware["spec"], hardware["identified_by"]) == ("mi325x", "--device")
    report = (out / "report" / "report.md").read_text()
    assert "(named with `--device`; the trace names no device)" in report
    assert "(the device named with `import --device`)" in report
