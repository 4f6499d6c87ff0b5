"""Devices the hardware database does not know, and precisions a known device lacks: every figure that needs no
peak is still made, the report names the missing roofs, and `import --device` supplies a spec by hand."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from kernelscope.analyze.hardware import ceilings_for
from kernelscope.analyze.roofline import missing_ceilings, place_on_roofline
from kernelscope.cli import main

# ROCm 6.2 names its MI250 GCDs "AMD Radeon Graphics" (104 compute units, 64 GiB), a name no datasheet carries.
RADEON = Path(__file__).resolve().parents[1] / "data" / "public" / "hta" / \
    "data__amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"


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
    assert "![unknown](figures/histograms_unknown.png)" in report
    assert (out / "report" / "figures" / "histograms_unknown.png").stat().st_size > 0
    # The missing bandwidth roof is named with the device-time share of the kernels that have byte counts.
    kernels = pl.read_parquet(out / "kernels.parquet")
    needing = kernels.filter(pl.col("bytes_moved") > 0)["dur_ns"].sum() / kernels["dur_ns"].sum()
    assert f"memory bandwidth (needed by kernels holding {100 * needing:.1f}% of device time)" in report
    assert not list((out / "report" / "figures").glob("roofline_*"))


def test_import_device_supplies_the_spec(tmp_path):
    out = tmp_path / "run"
    assert main(["import", str(RADEON), "--out", str(out), "--lang", "en", "--device", "mi250"]) == 0
    hardware = json.loads((out / "run.json").read_text())["hardware"]
    assert hardware["name"] == "AMD Radeon Graphics" and hardware["spec"] == "mi250"
    report = (out / "report" / "report.md").read_text()
    assert "Ceilings of AMD Instinct MI250 (one GCD) (the device named with `import --device`)" in report
    assert list((out / "report" / "figures").glob("roofline_unknown*"))


def test_import_device_that_matches_nothing_stops_cleanly(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["import", str(RADEON), "--out", str(out), "--device", "nonesuch-9000"]) == 2
    assert "import --device: no device matches 'nonesuch-9000'" in capsys.readouterr().err
    assert not out.exists() and not list(tmp_path.iterdir())
