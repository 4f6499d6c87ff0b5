"""`whatif`'s energy per token on the committed H200 run measured with `profile --energy`: the formula on a kernel
subset with given terms, and the study's calibration against the measured joules per token, each recomputed here
from the run's Parquet files and run.json; bad terms are one line and exit code 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from kernelscope.analyze.costs.kernel_costs import with_costs_and_names
from kernelscope.analyze.projection.energy_projection import EVERY, EnergyTerms, estimate, phase_work
from kernelscope.cli import main
from kernelscope.commands.whatif_terms import terms_from_arguments
from kernelscope.errors import UserError
from kernelscope.load import rundir

RUN = Path(__file__).resolve().parents[1] / "data" / "runs" / "h200-qwen2-1.5b-b8-p512-energy"
TERMS = ["--pj-per-flop", "bf16=0.5,fp32=2", "--pj-per-byte", "7", "--static-watts", "100"]


def _dynamic_joules(rows: list[dict], pj: dict[str, float], pj_byte: float) -> float:
    flops = sum(r["flops"] * pj[r["precision"]] for r in rows if r["flops"])
    moved = sum(r["bytes_moved"] for r in rows if r["bytes_moved"])
    return (flops + moved * pj_byte) * 1e-12


def test_the_formula_on_a_kernel_subset():
    kernels = with_costs_and_names(rundir.read_run(RUN, ops=False)).kernels
    subset = kernels.filter((pl.col("phase") == "decode") & (pl.col("step") < 4))
    steps = subset["step"].n_unique()
    terms = EnergyTerms(pj_per_flop={"bf16": 0.5, "fp32": 2.0}, pj_per_byte=7.0, static_watts=100.0)
    (work,) = phase_work(subset, {"decode": steps}, {"decode": 8})
    result = estimate(work, terms, time_ns=25e6)
    rows = subset.select("flops", "bytes_moved", "precision").to_dicts()
    dynamic = _dynamic_joules(rows, {"bf16": 0.5, "fp32": 2.0}, 7.0) / steps
    assert result.dynamic_joules == pytest.approx(dynamic)
    assert result.static_joules == pytest.approx(100.0 * 25e-3)
    assert result.joules_per_token == pytest.approx((dynamic + 2.5) / 8)
    one_term = estimate(work, EnergyTerms(pj_per_flop={EVERY: 1.0}, pj_per_byte=0.0, static_watts=0.0), 0.0)
    assert one_term.dynamic_joules == pytest.approx(sum(r["flops"] or 0 for r in rows) * 1e-12 / steps)


@pytest.mark.parametrize("flag, value", [("--pj-per-flop", "abc"), ("--pj-per-flop", "bf17=1"),
                                         ("--pj-per-byte", "-1"), ("--static-watts", "nan")])
def test_bad_terms_are_one_line(flag, value):
    arguments = {"--pj-per-flop": None, "--pj-per-byte": None, "--static-watts": None, flag: value}
    with pytest.raises(UserError) as error:
        terms_from_arguments(*arguments.values())
    assert flag in str(error.value) and "\n" not in str(error.value)


def test_a_bad_term_on_the_command_line_exits_2(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    assert main(["-q", "whatif", str(run), "--static-watts", "-3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--static-watts" in err[0]
    assert not (run / "whatif").exists()


@pytest.mark.slow
def test_the_study_calibrates_on_the_measured_energy(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    assert main(["-q", "whatif", str(run), *TERMS, "--figure-formats", "none"]) == 0
    study = json.loads((run / "whatif" / "h200" / "whatif.json").read_text())
    energy = study["energy"]
    assert energy["status"] == "estimated"
    info = json.loads((run / "run.json").read_text())
    kernels = with_costs_and_names(rundir.read_run(RUN, ops=False)).kernels
    decode = kernels.filter(pl.col("phase") == "decode")
    steps = decode["step"].n_unique()
    dynamic = _dynamic_joules(decode.select("flops", "bytes_moved", "precision").to_dicts(),
                              {"bf16": 0.5, "fp32": 2.0}, 7.0) / steps
    # On the measuring device the time per step is the device time plus the host time around it: TPOT.
    tpot_s = info["timings"]["plain"]["tpot_ms"] * 1e-3
    per_token = (100.0 * tpot_s + dynamic) / info["workload"]["batch_size"]
    phase = energy["phases"]["decode"]
    assert phase["source"]["joules_per_token"] == pytest.approx(per_token)
    assert phase["calibration_ratio"] == pytest.approx(per_token / info["energy"]["decode_joules_per_token"])
    text = (run / "whatif" / "h200" / "whatif.md").read_text()
    assert "## Energy per token (estimated)" in text
    assert "## 每 token 能耗（估计）" in (run / "whatif" / "h200" / "whatif.zh.md").read_text()


@pytest.mark.slow
def test_without_terms_the_study_says_which_are_missing(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    assert main(["-q", "whatif", str(run), "--hw", "h100-sxm", "--figure-formats", "none"]) == 0
    (folder,) = (run / "whatif").iterdir()
    energy = json.loads((folder / "whatif.json").read_text())["energy"]
    assert energy == {"status": "no terms", "missing": ["pj_per_flop", "pj_per_byte", "static_watts"],
                      "measured": True}
    assert "No energy per token" in (folder / "whatif.md").read_text()


@pytest.mark.parametrize("energy, accepted", [("pj_per_flop = { bf16 = 0.4 }\npj_per_byte = 6\nstatic_watts = 90", True),
                                              ("pj_per_flop = \"much\"", False),
                                              ("pj_per_watt = 3", False)])
def test_a_spec_files_energy_table(tmp_path, capsys, energy, accepted):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    spec = tmp_path / "npu.toml"
    spec.write_text(f'name = "NPU-1"\nmemory_bandwidth = "6TB/s"\n[peak]\nbf16 = "1.2PFLOPS"\n[energy]\n{energy}\n')
    code = main(["-q", "whatif", str(run), "--hw", str(spec), "--figure-formats", "none"])
    if not accepted:
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and "npu.toml" in err[0] and not (run / "whatif").exists()
        return
    assert code == 0
    (folder,) = (run / "whatif").iterdir()
    energy = json.loads((folder / "whatif.json").read_text())["energy"]
    assert energy["target_terms"]["static_watts"] == 90.0 and energy["source_terms_from_target"]
    assert energy["target_terms"]["source"]["pj_per_byte"] == "spec file npu.toml"
