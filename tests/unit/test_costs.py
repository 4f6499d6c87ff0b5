"""Cost formulas against independent counts: torch.utils.flop_counter where it covers the op, hand counts
elsewhere."""

import json

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from kernelscope.analyze.attribution.attribution import attribute
from kernelscope.analyze.costs.cost_rules import Signature
from kernelscope.analyze.costs.kernel_costs import has_model, op_costs, signature_cost
from kernelscope.analyze.costs.op_costs import op_cost
from kernelscope.load.kineto import load_kineto
from tests.conftest import KINETO


def _dims(*tensors):
    return json.dumps([list(t.shape) if isinstance(t, torch.Tensor) else [] for t in tensors])


def _types(*tensors):
    names = {torch.bfloat16: "c10::BFloat16", torch.float16: "c10::Half", torch.float32: "float"}
    return json.dumps([names[t.dtype] if isinstance(t, torch.Tensor) else "Scalar" for t in tensors])


def _torch_flops(fn, *args):
    with FlopCounterMode(display=False) as counter:
        fn(*args)
    return counter.get_total_flops()


@pytest.mark.parametrize(("m", "n", "k"), [(1, 1536, 8960), (16, 896, 896), (7, 33, 65)])
def test_gemm_family_matches_flop_counter(m, n, k):
    a, b, bias = torch.randn(m, k), torch.randn(k, n), torch.randn(n)
    mm = op_cost("aten::mm", _dims(a, b), _types(a, b), None)
    assert mm.flops == _torch_flops(torch.mm, a, b) == 2 * m * n * k
    assert mm.bytes == 4 * (m * k + k * n + m * n) and mm.precision == "fp32"
    addmm = op_cost("aten::addmm", _dims(bias, a, b), _types(bias, a, b), None)
    assert addmm.flops == _torch_flops(torch.addmm, bias, a, b)
    assert addmm.bytes == mm.bytes + 4 * n
    x, w = torch.randn(2, m, k, dtype=torch.bfloat16), torch.randn(n, k, dtype=torch.bfloat16)
    linear = op_cost("aten::linear", _dims(x, w), _types(x, w), None)
    assert linear.flops == _torch_flops(torch.nn.functional.linear, x.float(), w.float())
    assert linear.precision == "bf16"


def test_bmm_matches_flop_counter():
    a, b = torch.randn(3, 5, 7), torch.randn(3, 7, 11)
    cost = op_cost("aten::bmm", _dims(a, b), _types(a, b), None)
    assert cost.flops == _torch_flops(torch.bmm, a, b)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_matches_flop_counter_and_hand_count(causal):
    q = torch.randn(2, 4, 16, 32)
    k = torch.randn(2, 4, 16, 32)
    v = torch.randn(2, 4, 16, 32)
    concrete = json.dumps(["", "", "", "", "0.", "True" if causal else "False", "", ""])
    cost = op_cost("aten::scaled_dot_product_attention", _dims(q, k, v), _types(q, k, v), concrete)
    full = 2 * 2 * 4 * 16 * 16 * (32 + 32)
    if causal:
        assert cost.flops == 2 * 2 * 4 * (16 * 17 / 2) * (32 + 32)  # only the lower triangle is computed
    else:
        # The same attention written as two matrix products, counted by torch.
        def attention(q, k, v):
            return (q @ k.transpose(-1, -2)).softmax(-1) @ v

        assert cost.flops == full == _torch_flops(attention, q, k, v)
    assert cost.bytes == 4 * (3 * 2 * 4 * 16 * 32 + 2 * 4 * 16 * 32)


def test_decode_attention_with_gqa_against_a_cache():
    # One new query per sequence against 129 cached keys; 12 query heads share 2 KV heads.
    q = "[[8, 12, 1, 128], [8, 2, 129, 128], [8, 2, 129, 128]]"
    types = '["c10::BFloat16", "c10::BFloat16", "c10::BFloat16"]'
    concrete = json.dumps([""] * 10 + ["False"])
    cost = op_cost("aten::_cudnn_attention_forward", q, types, concrete)
    assert cost.flops == 2 * 8 * 12 * 1 * 129 * (128 + 128)
    assert cost.bytes == 2 * (8 * 12 * 128 + 2 * 8 * 2 * 129 * 128 + 8 * 12 * 128)


def test_pointwise_reduction_and_movement_hand_counts():
    f = '["c10::BFloat16", "c10::BFloat16"]'
    add = op_cost("aten::add", "[[4, 1536], [4, 1536]]", f, None)
    assert (add.flops, add.bytes) == (4 * 1536, 3 * 4 * 1536 * 2)
    broadcast = op_cost("aten::mul", "[[4, 1536], [1536]]", f, None)
    assert broadcast.flops == 4 * 1536 and broadcast.bytes == 2 * (4 * 1536 + 1536 + 4 * 1536)
    cast = op_cost("aten::copy_", "[[8, 16], [8, 16]]", '["float", "c10::BFloat16"]', None)
    assert (cast.flops, cast.bytes) == (0, 8 * 16 * (4 + 2))
    mean = op_cost("aten::mean", "[[1, 16, 1536], [], [], []]", '["float", "ScalarList", "Scalar", ""]',
                   json.dumps(["", "[-1]", "True", ""]))
    assert (mean.flops, mean.bytes) == (16 * 1536, 4 * (16 * 1536 + 16))
    emb = op_cost("aten::embedding", "[[151936, 1536], [8, 16], [], [], []]",
                  '["c10::BFloat16", "long int", "Scalar", "Scalar", "Scalar"]', None)
    assert emb.flops == 0 and emb.bytes == 2 * (8 * 16 * 1536 * 2) + 8 * 16 * 8
    cat = op_cost("aten::cat", "[[[1, 2, 3, 4], [1, 2, 5, 4]], []]", '["TensorList", "Scalar"]', None)
    assert cat.bytes == 2 * 2 * (24 + 40)


def test_grouped_moe_gemm_counts_touched_experts():
    dims = "[[8, 7168], [256, 7168, 4096], [256], [], []]"
    cost = op_cost("aten::_grouped_mm", dims, '["c10::BFloat16", "c10::BFloat16", "int", "", ""]', None)
    assert cost.flops == 2 * 8 * 7168 * 4096
    assert cost.bytes == 2 * (8 * 7168 + 8 * 7168 * 4096 + 8 * 4096)  # at most 8 of 256 experts hold tokens


def test_convolution_hand_count():
    x, w = torch.randn(1, 3, 32, 32), torch.randn(8, 3, 3, 3)
    concrete = json.dumps(["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"])
    cost = op_cost("aten::convolution", _dims(x, w, None), _types(x, w, None), concrete)
    out = torch.nn.functional.conv2d(x, w, stride=1, padding=1)
    assert cost.flops == _torch_flops(torch.nn.functional.conv2d, x, w, None, 1, 1) == 2 * out.numel() * 27


def test_unknown_or_unreadable_ops_have_no_cost():
    assert op_cost("aten::frobnicate", "[[2, 2]]", '["float"]', None) is None
    assert op_cost("aten::mm", "[[2, 3]]", '["float"]', None) is None  # one operand missing


@pytest.mark.parametrize("trace", ["h200-llama-3-8b-p16-n3.trace.json.gz", "h200-deepseek-v3-p16-n3.trace.json.gz"])
def test_op_costs_give_each_modelled_op_its_own_cost(trace):
    """op_costs computes each distinct name + shapes + scalars once: every CPU op with a model must still get
    exactly what op_cost gives its own row (checked row by row in plain Python), and no other op a cost."""
    _, ops = attribute(load_kineto(KINETO / trace))
    expected = {}
    for row in ops.iter_rows(named=True):
        if row["cat"] == "cpu_op" and has_model(row["name"]):
            made = signature_cost(Signature(row["name"], row["input_dims"], row["input_types"],
                                            row["concrete_inputs"]), None, (), "op_shapes")
            if made is not None:
                cost = made.cost
                expected[row["op_id"]] = (cost.flops, cost.bytes, cost.precision, cost.model)
    got = {op_id: (flops, nbytes, precision, model)
           for op_id, flops, nbytes, precision, model in op_costs(ops).iter_rows()}
    assert len(expected) > 100
    assert got == expected


def test_a_profile_runs_cost_context_counts_its_own_ranks():
    """A profile run records its own trace (no imported files): its ranks come from its parallel settings."""
    import json
    from pathlib import Path

    from kernelscope.analyze.costs.kernel_costs import cost_context
    from kernelscope.load.rundir import read_run_info

    run = Path(__file__).resolve().parents[1] / "data" / "runs" / "h200-qwen2-0.5b-ncu"
    recorded = json.loads((run / "run.json").read_text())
    assert "files" not in (recorded.get("trace") or {})  # a profile run's trace lists no imported files
    world = (recorded.get("parallel") or {}).get("world_size") or 1
    assert dict(cost_context(read_run_info(run)).config).get("ranks") in (None, float(world))
