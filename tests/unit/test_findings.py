from pathlib import Path

import pytest

from kernelscope.analyze.findings import Metric, _holds, evaluate, load_rules


def metrics(**values):
    return {name: Metric(value) for name, value in values.items()}


def test_conditions():
    m = metrics(a=10.0, b=20.0, name="x", missing=None)
    assert _holds("a >= 10", m) and not _holds("a > 10", m) and _holds("a < b", m)
    assert not _holds("missing >= 0", m) and not _holds("absent >= 0", m) and not _holds("a < absent", m)
    with pytest.raises(ValueError):
        _holds("a is big", m)


def test_every_rule_has_both_languages_and_known_fields():
    for rule in load_rules():
        assert {"id", "kind", "when", "uses", "en", "zh"} <= set(rule), rule["id"]
        assert rule["kind"] in ("bottleneck", "observation")
        assert ("recommend_en" in rule) == ("recommend_zh" in rule), rule["id"]


def test_a_rule_fires_only_when_it_holds_and_has_its_numbers():
    fired = {f.id for f in evaluate(metrics(prefill_compute_far_pct=25.0, decode_compute_far_pct=3.0))}
    assert "prefill-compute-far" in fired and "decode-compute-far" not in fired
    # decode-host-bound needs more numbers than its condition: without them it prints nothing.
    assert "decode-host-bound" not in {f.id for f in evaluate(metrics(decode_idle_pct=90.0))}
    full = metrics(decode_idle_pct=90.0, decode_idle_pct_min=85.0, decode_device_ns_per_step=2e6, tpot_ms=20.0,
                   decode_kernels_per_step=1000.0, decode_host_ms_per_step=18.0)
    assert "decode-host-bound" in {f.id for f in evaluate(full)}
    # The median run waits for the host, the fastest one does not: within the spread, so no finding.
    noisy = {**full, "decode_idle_pct_min": Metric(30.0)}
    assert "decode-host-bound" not in {f.id for f in evaluate(noisy)}


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_a_waiting_rank_is_told_its_cause(phase):
    """A rank that waits most of its collective time: when the last rank's extra work explains most of the wait, the
    finding says the loads differ and recommends balancing them; otherwise it says the last rank started late."""
    base = {f"{phase}_wait_rank": 1.0, f"{phase}_wait_ns_per_step": 2e6, f"{phase}_wait_share": 95.0,
            f"{phase}_wait_rank_comm_pct": 40.0}
    loads = {f.id: f for f in evaluate(metrics(**base, **{f"{phase}_wait_imbalance_pct": 80.0}))}
    assert f"{phase}-rank-imbalance" in loads and f"{phase}-rank-wait" not in loads
    assert "the ranks' loads differ" in loads[f"{phase}-rank-imbalance"].rule["en"]
    late = {f.id: f for f in evaluate(metrics(**base, **{f"{phase}_wait_imbalance_pct": 10.0}))}
    assert f"{phase}-rank-wait" in late and f"{phase}-rank-imbalance" not in late
    assert "starts its kernels later" in late[f"{phase}-rank-wait"].rule["en"]


PUBLIC = Path(__file__).resolve().parents[1] / "data" / "public" / "tracelens"


@pytest.mark.parametrize(("trace", "rule", "phase"), [
    ("traces__b200__eager_trace.json.gz", "prefill-waits-for-host", "prefill"),
    ("inference__sglang_decode__sglang_Qwen3-8B_decode.json.gz", "decode-one-idle-gap", "decode"),
])
@pytest.mark.slow
def test_idle_gap_findings_on_public_traces_hold_the_files_numbers(tmp_path, trace, rule, phase):
    """An eager vLLM prefill on a B200 whose GPU mostly waits for the host's launches, and an SGLang decode window
    whose idle time is one long stretch: each gets its finding, with numbers the file itself gives
    (tests/trace_reference.py: the gaps between the union of its intervals, the runtime calls that started the
    kernels closing them)."""
    import csv

    from kernelscope.cli import main
    from tests.trace_reference import reference

    path = PUBLIC / trace
    assert main(["-q", "import", str(path), "--out", str(tmp_path / "run")]) == 0
    with open(tmp_path / "run" / "report" / "tables" / "findings.csv", newline="") as table:
        rows = list(csv.DictReader(table))
    numbers = {row["number"]: float(row["value"]) for row in rows if row["rule"] == rule}
    assert numbers, [row["rule"] for row in rows]
    ref = reference(path)
    if rule.endswith("waits-for-host"):
        assert numbers[f"{phase}_gap_host_wait_pct"] == pytest.approx(
            100.0 * ref.gap_host_wait_ns / ref.gap_with_call_ns, abs=0.01)
        assert numbers[f"{phase}_gap_idle_ns"] == pytest.approx(sum(ref.idle_gaps_ns), abs=2 * len(ref.idle_gaps_ns))
    else:
        assert numbers[f"{phase}_largest_gap_ns"] == pytest.approx(ref.largest_gap.ns, abs=2)
        assert numbers[f"{phase}_largest_gap_pct"] == pytest.approx(100.0 * ref.largest_gap.ns / sum(ref.idle_gaps_ns),
                                                                    abs=0.01)
    assert not [row for row in rows if row["rule"].endswith(("waits-for-host", "one-idle-gap")) and row["rule"] != rule]
