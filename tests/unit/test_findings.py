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
