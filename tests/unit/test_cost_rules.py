"""The cost models as data (data/cost_models.toml): every rule readable, documented and sourced; formulas that are
arithmetic and nothing else; a model's config.json read as untrusted input; a step's attention work from its
annotation. Expected values are counted here by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelscope.analyze.costs.cost_expressions import FormulaError, Missing, Scope, compile_formula, evaluate
from kernelscope.analyze.costs.cost_rules import Signature, rule_cost, rules
from kernelscope.analyze.costs.step_tokens import step_tokens
from kernelscope.cli import main
from kernelscope.contracts.run_info import StepInfo
from kernelscope.load import knowledge

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "tests" / "data" / "kineto" / "h200-qwen2-0.5b-p16-n4.shapeless.trace.json.gz"


def test_every_rule_is_readable_sourced_and_documented():
    raw = knowledge.cost_models()
    ids = [r["id"] for r in raw["op"]]
    assert len(ids) == len(set(ids)) and len(rules()) == len(ids)
    doc = (ROOT / "docs" / "roofline.md").read_text()
    for rule in raw["op"]:
        assert rule.get("source"), rule["id"]
        assert f"`{rule['id']}`" in doc, f"{rule['id']} is not in docs/roofline.md"
    for role in raw["role"]:
        assert f"`{role['id']}`" in doc, f"role {role['id']} is not in docs/roofline.md"


@pytest.mark.parametrize("text", ["__import__('os')", "x.y", "x[0]", "'text'", "lambda: 1", "open(1)",
                                  "[a for a in b]", "f(x=1)"])
def test_formulas_are_arithmetic_only(text):
    with pytest.raises(FormulaError):
        compile_formula(text, frozenset({"min", "max"}))


def test_formula_evaluation_and_missing_values():
    scope = Scope(lambda name: {"a": 3, "b": 4}.get(name), {"max": max})
    assert evaluate(compile_formula("2 * a + max(a, b) ** 2 if a < b else 0", frozenset({"max"})), scope) == 22
    assert scope.used == {"a", "b"}
    with pytest.raises(Missing):
        evaluate(compile_formula("a + c", frozenset()), scope)


def test_a_rule_that_needs_the_step_waits_for_it():
    """vLLM's unified attention: queries [T, Hq, D], keys [T, Hkv, D]; without a step's counts no cost, with them
    2·Hq·(D + Dv) per query-key pair."""
    sig = Signature("vllm::unified_attention_with_output", json.dumps([[4, 8, 64], [4, 2, 64], [4, 2, 64], [4, 8, 64]]),
                    json.dumps(["c10::BFloat16"] * 4), None)
    assert rule_cost(sig, None, None) is None
    step = step_tokens(StepInfo(phase="decode", step=0, prefill_tokens=0, decode_tokens=4, decode_requests=4,
                                prefill_requests=0, decode_kv_tokens=400, prefill_kv_tokens=0))
    made = rule_cost(sig, step, None)
    assert made.cost.flops == 2 * 8 * 128 * 400  # decode: one query a request, its whole context each
    assert made.cost.bytes == 4 * 8 * 128 * 2 + 400 * 2 * 128 * 2
    assert any(name.startswith("step_") for name in made.used)


@pytest.mark.parametrize(("info", "expected"), [
    # execute_8192_context_9(sq8155sk8430sqsq7475785sqsk7671310)_generation_37(sq37sk34489sqsq37sqsk34489)
    (dict(prefill_tokens=8155, prefill_kv_tokens=8430, prefill_query_squares=7475785,
          prefill_query_kv_products=7671310, decode_tokens=37, decode_kv_tokens=34489, decode_query_squares=37,
          decode_query_kv_products=34489), (8192, 8430 + 34489, 7671310 - (7475785 - 8155) / 2 + 34489)),
    # execute_context_1(888_788544)_generation_0(0): the products only; keys taken to be the queries
    (dict(prefill_tokens=888, prefill_query_kv_products=788544, decode_tokens=0), (888, 888, (788544 + 888) / 2)),
    # SGLang's step[DECODE bs=32]: no token sums
    (dict(requests=32), (None, None, None)),
])
def test_step_tokens_from_annotation_sums(info, expected):
    tokens = step_tokens(StepInfo(phase="mixed", step=0, **info))
    assert (tokens.q_tokens, tokens.kv_tokens, tokens.pairs) == expected


@pytest.mark.parametrize(("content", "message"), [
    ("not json {", "not a JSON file"),
    ("[1, 2]", "expected a JSON object"),
    ('{"hidden_size": "big", "num_attention_heads": 8}', "`hidden_size` should be a positive whole number"),
    ('{"hidden_size": 1024, "num_attention_heads": -2}', "`num_attention_heads` should be a positive whole number"),
    ('{"hidden_size": 1024, "num_attention_heads": 8, "model_type": "<script>"}', "`model_type` should be a short name"),
    ('{"vocab_size": 1000}', "names no hidden size and attention heads"),
])
def test_a_bad_model_config_is_refused_in_one_line(tmp_path, capsys, content, message):
    config = tmp_path / "config.json"
    config.write_text(content)
    out = tmp_path / "run"
    assert main(["import", str(TRACE), "--model-config", str(config), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and str(config) in err
    assert not out.exists()


def test_model_config_flags_are_checked_before_any_trace_is_read(tmp_path, capsys):
    assert main(["import", str(TRACE), "--model-config", str(tmp_path / "absent.json"), "--out", str(tmp_path / "a")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["import", str(TRACE), "--batch-size", "4", "--out", str(tmp_path / "b")]) == 2
    assert "give it too" in capsys.readouterr().err


def test_the_config_keeps_only_checked_keys(tmp_path):
    from kernelscope.load.model_config import read_model_config

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 64, "num_attention_heads": 4, "auto_map": {"x": "evil.py"},
                                "text_config": {"hidden_size": 32, "num_attention_heads": 2, "nested": [1]},
                                "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}))
    assert read_model_config(path) == {"hidden_size": 64, "num_attention_heads": 4,
                                       "text_config": {"hidden_size": 32, "num_attention_heads": 2},
                                       "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}


def test_a_prefill_marker_without_sums_is_taken_as_equal_prompts_and_says_so():
    """SGLang's `step[EXTEND bs=15 toks=15360]`: 15 prompts of 1,024 tokens, nothing cached, labelled estimated."""
    tokens = step_tokens(StepInfo(phase="prefill", step=0, requests=15, tokens=15360))
    assert (tokens.q_tokens, tokens.kv_tokens, tokens.pairs, tokens.estimated) == (
        15360, 15360, 15 * 1024 * 1025 / 2, True)
    assert step_tokens(StepInfo(phase="decode", step=0, requests=32)).q_tokens is None


HOSTILE_DIMS = ['[["x", 2], [3]]', "[[1e308, 1e308], [1e308, 1e308], [1e308, 1e308], [1e308, 1e308], [1]]",
                "[[-4, 8, 64], [4, -2, 64], [4, 2, 64]]", "[5, [[[[[]]]]]]", "not json", '[{"a": 1}]',
                "[[" + "[" * 200 + "]" * 200 + "]]", "[[99999999999999999999999, 3], [3, 4]]"]


@pytest.mark.parametrize("dims", HOSTILE_DIMS)
@pytest.mark.parametrize("name", [r["ops"][0].replace("\\", "").split("(")[0].rstrip("?") for r in
                                  knowledge.cost_models()["op"]])
def test_hostile_shapes_leave_an_op_uncosted_never_raise(name, dims):
    """Whatever a trace writes as an op's shapes and scalars, a rule gives a finite cost or none."""
    types = json.dumps(["c10::BFloat16"] * 8)
    step = step_tokens(StepInfo(phase="decode", step=0, prefill_tokens=0, decode_tokens=4, decode_kv_tokens=64))
    for concrete in (None, '["nan", "inf", "-1", "1e400", "", "x"]'):
        made = rule_cost(Signature(name, dims, types, concrete, '{"top_k": 1e400, "up_n": "x"}'), step,
                         {"hidden": 8.0, "top_k": 2.0, "moe_intermediate": 4.0, "expert_weight_bytes": 1.0})
        assert made is None or (made.cost.flops >= 0 and made.cost.bytes >= 0
                                and made.cost.flops < float("inf") and made.cost.bytes < float("inf"))


@pytest.mark.parametrize("dims", HOSTILE_DIMS)
def test_hostile_shapes_inside_a_fused_op_give_no_summary_or_a_sane_one(dims):
    from kernelscope.analyze.costs.fused_inner import inner_summary

    inner = [("TopK", dims, '["c10::BFloat16"]', '["", "inf"]'), ("aten::view", dims, '["unsigned char"]', None)]
    for hidden in ([32, 3072], [32, "x"], 7, [2**70, 2**70]):
        summary = inner_summary(hidden, 32, inner)
        assert summary is None or isinstance(json.loads(summary), dict)


@pytest.mark.parametrize("dims", HOSTILE_DIMS)
@pytest.mark.parametrize("name", ["aten::mm", "aten::addmm", "aten::linear", "aten::_scaled_mm", "aten::_grouped_mm",
                                  "aten::scaled_dot_product_attention", "aten::add", "aten::sum", "aten::cat",
                                  "aten::embedding", "aten::topk", "aten::convolution", "aten::rms_norm"])
def test_hostile_shapes_leave_an_aten_op_uncosted_never_raise(name, dims):
    from kernelscope.analyze.costs.op_costs import op_cost

    for concrete in (None, '["nan", "inf", "-1", "1e400", "", "x", "[1, 2]", "[[[]]]", "True"]'):
        cost = op_cost(name, dims, json.dumps(["c10::BFloat16"] * 8), concrete)
        assert cost is None or (0 <= cost.flops < float("inf") and 0 <= cost.bytes < float("inf"))
