"""Structure from the trace's regularities alone (analyze/structure/structure_inference.py), checked on real traces whose
annotations are the truth: the test removes them (kernelscope's ranges, record_function ranges, nn.Module frames,
recorded shapes, every CPU op) and compares what kernelscope infers with what the removed annotations said. Every
expected value is read from the file with plain json."""

from __future__ import annotations

import bisect
import gzip
import json
import re
from pathlib import Path

import polars as pl
import pytest

from kernelscope.analyze.attribution.attribution_sources import attribution_info
from kernelscope.analyze.structure.structure_summary import structure_summary
from kernelscope.cli import main
from kernelscope.commands.importers.rank_files import read_rank

DATA = Path(__file__).resolve().parents[1] / "data"
KINETO = DATA / "kineto"
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver"}


# ---------------------------------------------------------------- the truth, read from the file
def _load(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def _launches(events: list[dict]) -> dict[int, tuple[float, int]]:
    """correlation → (launch call start, thread)."""
    return {e["args"]["correlation"]: (e["ts"], e["tid"]) for e in events
            if e.get("cat") in LAUNCH_CATS and "correlation" in e.get("args", {})}


def _innermost(ranges: list[dict], tid: int, t: float) -> dict | None:
    best = None
    for r in ranges:
        if r["tid"] == tid and r["ts"] <= t < r["ts"] + r["dur"] and (best is None or r["dur"] < best["dur"]):
            best = r
    return best


def _truth(events: list[dict], layer_of: re.Pattern[str], phase_of: re.Pattern[str] | None,
           range_cats: set[str]) -> list[tuple[float, int | None, str | None]]:
    """Per device event in start order: (start, its layer per the annotations, its phase range's name)."""
    launched = _launches(events)
    layered = [e for e in events if e.get("cat") in range_cats and layer_of.search(e.get("name", ""))]
    phased = [e for e in events if phase_of and e.get("cat") in range_cats and phase_of.search(e.get("name", ""))]
    out = []
    for k in sorted((e for e in events if e.get("cat") in DEVICE_CATS), key=lambda e: e["ts"]):
        t, tid = launched.get(k["args"].get("correlation"), (None, None))
        layer = phase = None
        if t is not None:
            frame = _innermost(layered, tid, t)
            layer = int(layer_of.search(frame["name"]).group(1)) if frame else None
            step = _innermost(phased, tid, t)
            phase = phase_of.search(step["name"]).group(1) if step and phase_of else None
        out.append((k["ts"], layer, phase))
    return out


def _stripped(path: Path, tmp_path: Path, drop: str) -> Path:
    """The trace without what `drop` names: "ranges" (kernelscope's ks.* ranges), "shapes" (and the ops' recorded
    shapes), "ops" (and every CPU op, range and Python frame: kernels and runtime calls only), "frames" (Python
    frames), "user" (record_function ranges)."""
    doc = _load(path)
    kept = []
    for e in doc["traceEvents"]:
        name, cat = str(e.get("name", "")), e.get("cat")
        if drop in ("ranges", "shapes", "ops") and name.startswith("ks."):
            continue
        if drop == "ops" and cat in ("cpu_op", "user_annotation", "gpu_user_annotation", "python_function"):
            continue
        if drop == "frames" and cat == "python_function":
            continue
        if drop == "user" and cat in ("user_annotation", "gpu_user_annotation") and not name.startswith("ProfilerStep"):
            continue
        if drop == "shapes" and cat == "cpu_op":
            e = {**e, "args": {k: v for k, v in e.get("args", {}).items()
                               if k not in ("Input Dims", "Input type", "Concrete Inputs")}}
        kept.append(e)
    out = tmp_path / f"{path.name.split('.')[0]}-{drop}.json.gz"
    with gzip.open(out, "wt") as f:
        json.dump({**doc, "traceEvents": kept}, f)
    return out


def _inferred(path: Path):
    rank = read_rank(str(path), workers=1)
    info = attribution_info(rank.kernels, [rank.sources])
    return rank.kernels.sort("start_ns", "kernel_id"), info, structure_summary(rank.kernels, info)


def _level(info, level: str):
    return next((s for s in info.structure if s.level == level), None)


# ---------------------------------------------------------------- kernelscope's own H200/H100 traces, ranges removed
KS_LAYER = re.compile(r"^ks\.module:model\.layers\.(\d+)(?:\.|$)")
KS_PHASE = re.compile(r"^ks\.phase:(prefill|decode:\d+)$")


@pytest.mark.parametrize(("trace", "drop"), [
    ("h200-qwen2-0.5b-p16-n4", "ranges"),
    ("h200-qwen2-0.5b-p16-n4", "ops"),
    ("h200-qwen2-1.5b-b8-p16-n3", "shapes"),
    ("h200-llama-3-8b-p16-n3", "ops"),
    ("h200-deepseek-v3-p16-n3", "ranges"),
    ("h200-deepseek-v3-p16-n3", "ops"),
])
@pytest.mark.slow
def test_passes_phases_and_layers_of_a_trace_without_its_ranges(tmp_path, trace, drop):
    source = KINETO / f"{trace}.trace.json.gz"
    events = _load(source)["traceEvents"]
    truth = _truth(events, KS_LAYER, KS_PHASE, {"user_annotation"})
    phases = sorted({p for _, _, p in truth if p})
    layers = {layer for _, layer, _ in truth if layer is not None}
    kernels, info, summary = _inferred(_stripped(source, tmp_path, drop))
    # How many passes, prefill and decode steps and layers.
    assert summary.forward_passes == len(phases)
    assert summary.prefill_steps == sum(p == "prefill" for p in phases)
    assert summary.decode_steps == sum(p.startswith("decode") for p in phases)
    assert summary.layers == len(layers) and _level(info, "layers").count == len(layers)
    # Every kernel in the layer the ranges put it in (None outside layers), in the phase of its pass (from the first
    # forward on: generate()'s setup before it, prefill by kernelscope's ranges, has no step where shapes gave them).
    assert kernels.height == len(truth)
    assert kernels["layer"].to_list() == [layer for _, layer, _ in truth]
    first = next(i for i, (_, layer, _) in enumerate(truth) if layer is not None)
    for (_, _, phase), ours, step in list(zip(truth, kernels["phase"], kernels["step"], strict=True))[first:]:
        if phase is not None:
            assert (ours, step) == (("prefill", 0) if phase == "prefill" else ("decode", int(phase.split(":")[1])))
    assert set(kernels.filter(pl.col("layer").is_not_null())["attribution_source"]) == {"inferred"}
    assert info.module.source == "inferred from the trace's regularities"


@pytest.mark.slow
def test_parts_of_a_layer_follow_its_modules(tmp_path):
    """The parts named by position (attention, norms, MLP) match the module ranges' names for most kernels; the
    residual addition after the attention is the one kernel of a layer read into the norm after it."""
    source = KINETO / "h200-llama-3-8b-p16-n3.trace.json.gz"
    events = _load(source)["traceEvents"]
    module = re.compile(r"^ks\.module:model\.layers\.(\d+)")
    launched = _launches(events)
    ranges = [e for e in events if e.get("cat") == "user_annotation" and module.search(e["name"])]
    expected = []
    for k in sorted((e for e in events if e.get("cat") in DEVICE_CATS), key=lambda e: e["ts"]):
        t, tid = launched[k["args"]["correlation"]]
        frame = _innermost(ranges, tid, t)
        inner = re.sub(r"^ks\.module:model\.layers\.\d+\.?", "", frame["name"]) if frame else None
        expected.append(None if inner is None else "attention" if inner.startswith("self_attn")
                        else "input_norm" if inner == "input_layernorm"
                        else "post_attention_norm" if inner == "post_attention_layernorm"
                        else "mlp" if inner.startswith("mlp") else "")
    kernels, info, _ = _inferred(_stripped(source, tmp_path, "ops"))
    ours = [None if m is None or not m.startswith("layers.") else re.sub(r"^layers\.\d+\.?", "", m)
            for m in kernels["module"].to_list()]
    in_layers = [(a, b) for a, b in zip(expected, ours, strict=True) if a is not None]
    agree = sum(a == b for a, b in in_layers) / len(in_layers)
    assert agree >= 0.95
    assert _level(info, "modules").status == "inferred"


def test_dense_layer_before_moe_layers_is_a_layer(tmp_path):
    """DeepSeek-V3's first layer is dense, the others MoE: one repeat and a layer of another kind before it."""
    source = KINETO / "h200-deepseek-v3-p16-n3.trace.json.gz"
    kernels, info, _ = _inferred(_stripped(source, tmp_path, "ops"))
    truth = _truth(_load(source)["traceEvents"], KS_LAYER, None, {"user_annotation"})
    assert sorted(kernels["layer"].drop_nulls().unique().to_list()) == sorted({x for _, x, _ in truth if x is not None})
    assert set(info.layer_types.values()) == {"inferred layer (dense)", "inferred layer (MoE)"}


# ---------------------------------------------------------------- other programs' traces, their annotations removed
def test_record_function_layers_removed(tmp_path):
    """A 4-layer Llama whose parts were named by record_function (TransformerLayer_0…3): without them the layers
    are found again, kernel for kernel; one forward pass, whose phase nothing tells."""
    source = DATA / "public" / "tokenomics" / "llama_trace_4layers0_with_annotations.json.gz"
    truth = _truth(_load(source)["traceEvents"], re.compile(r"^TransformerLayer_(\d+)$"), None, {"user_annotation"})
    kernels, info, summary = _inferred(_stripped(source, tmp_path, "user"))
    assert kernels["layer"].to_list() == [layer for _, layer, _ in truth]
    assert summary.forward_passes == 1 and summary.layers == 4
    phases = _level(info, "phases")
    assert (phases.status, phases.code) == ("unknown", "no_repeat")
    assert set(kernels["phase"]) == {"unknown"}


@pytest.mark.slow
def test_module_frames_removed(tmp_path):
    """HF generate recorded with stacks and modules: without its Python frames, each kernel's layer is the one its
    Qwen2DecoderLayer frame gave, and its steps those of its top-level forwards."""
    source = DATA / "foreign" / "captured" / "hf_generate_stack.json.gz"
    events = _load(source)["traceEvents"]
    truth = _truth(events, re.compile(r"^nn\.Module: Qwen2DecoderLayer_(\d+)$"), None, {"python_function"})
    forwards = sorted(e["ts"] for e in events if e.get("cat") == "python_function"
                      and re.fullmatch(r"nn\.Module: Qwen2ForCausalLM_\d+", e["name"]))
    kernels, info, summary = _inferred(_stripped(source, tmp_path, "frames"))
    assert kernels["layer"].to_list() == [layer for _, layer, _ in truth]
    assert summary.forward_passes == len(forwards) and (summary.prefill_steps, summary.decode_steps) == (1, 5)


@pytest.mark.slow
def test_counts_that_differ_leave_layers_unknown(tmp_path):
    """Passes that repeat their layer unit a different number of times (the last decode pass cut short by the end of
    the capture, here made so by dropping its last layers' kernels) are two readings: layers stay unknown, said why."""
    source = KINETO / "h200-qwen2-0.5b-p16-n4.trace.json.gz"
    doc = _load(source)
    events = doc["traceEvents"]
    launched = _launches(events)
    last = max((e for e in events if e.get("name", "").startswith("ks.phase:decode")), key=lambda e: e["ts"])
    late_layers = [e for e in events if e.get("cat") == "user_annotation"
                   and re.match(r"^ks\.module:model\.layers\.(1[2-9]|2\d)$", e.get("name", ""))
                   and last["ts"] <= e["ts"] < last["ts"] + last["dur"]]
    cut = set()
    for k in events:
        if k.get("cat") in DEVICE_CATS:
            t, tid = launched.get(k["args"].get("correlation"), (None, None))
            if t is not None and _innermost(late_layers, tid, t):
                cut.add(id(k))
    assert cut
    doc["traceEvents"] = [e for e in events if id(e) not in cut and not str(e.get("name", "")).startswith("ks.")]
    path = tmp_path / "cut.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    kernels, info, summary = _inferred(path)
    layers = _level(info, "layers")
    assert (layers.status, layers.code) == ("unknown", "counts_differ")
    assert "24 (3 passes)" in layers.values["counts"]
    assert kernels["layer"].null_count() == kernels.height and summary.layers is None
    assert summary.unknown["layers"].startswith("the passes repeat their layer unit a different number of times")


def test_no_attention_no_layers_by_signature():
    """A recommendation model's training rank (HTA): its kernel names show no layer repeat, and read by signature
    (runs of one kernel counted once) a few kernels recur by chance in one forward part only. The coarser reading
    places decoder layers only, each with its attention kernel, in every pass alike: with no attention in the file,
    layers stay unknown and no kernel gets one."""
    source = DATA / "public" / "hta" / "data__trace_filter__sampled_rank-0.json.gz"
    events = _load(source)["traceEvents"]
    attention = re.compile(r"attention|flash|fmha|sdpa", re.IGNORECASE)
    assert not any(e.get("cat") in ("kernel", "cpu_op") and attention.search(e.get("name", "")) for e in events)
    kernels, info, summary = _inferred(source)
    layers = _level(info, "layers")
    assert (layers.status, layers.code) == ("unknown", "no_repeat")
    assert kernels["layer"].null_count() == kernels.height and summary.layers is None


# ---------------------------------------------------------------- training
def test_training_steps_are_forward_backward_optimizer():
    """A training trace (AMD MI250, 2 profiler steps): each kernel's part is that of the op that launched it — an
    autograd function's is backward, the optimizer's range or its foreach ops optimizer, the rest forward."""
    source = DATA / "public" / "hta" / "data__amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    events = _load(source)["traceEvents"]
    launched = _launches(events)
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    optimizer = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("Optimizer.step#")]
    steps = sorted((e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
    expected = []
    for k in sorted((e for e in events if e.get("cat") in DEVICE_CATS), key=lambda e: e["ts"]):
        t, tid = launched[k["args"]["correlation"]]
        outer = max((o for o in ops if o["tid"] == tid and o["ts"] <= t < o["ts"] + o["dur"]),
                    key=lambda o: o["dur"], default=None)
        part = ("optimizer" if _innermost(optimizer, tid, t) or (outer and outer["name"].startswith("aten::_foreach"))
                else "backward" if outer and outer["name"].startswith("autograd::engine::evaluate_function")
                else "forward")
        step = bisect.bisect_right([s["ts"] for s in steps], t) - 1
        expected.append((part, step))
    kernels, info, summary = _inferred(source)
    assert list(zip(kernels["phase"], kernels["step"], strict=True)) == expected
    assert summary.training_steps == len({step for _, step in expected}) and _level(info, "training").code == "ops"


# ---------------------------------------------------------------- the report says it, in both languages
def test_report_says_what_was_inferred_and_what_not(tmp_path):
    source = _stripped(DATA / "public" / "tokenomics" / "llama_trace_4layers0_with_annotations.json.gz", tmp_path,
                       "user")
    out = tmp_path / "run"
    assert main(["-q", "import", str(source), "--out", str(out), "--figure-formats", "none"]) == 0
    en = (out / "report" / "report.md").read_text()
    zh = (out / "report" / "report.zh.md").read_text()
    assert "- Decoder layers (inferred): 4, a unit of 34 kernels repeated once per layer in each of 1 pass." in en
    assert "- Prefill and decode: unknown — no two passes launch the same kernels" in en
    assert "- 解码器层（推断）：4 层" in zh and "- 预填充与解码：未知——没有两次前向启动相同的内核" in zh
    summary = json.loads((out / "summary.json").read_text())
    assert summary["structure"]["layers"] == 4 and summary["structure"]["source"] == "inferred"
    assert "phases" in summary["structure"]["unknown"]
    kernels = pl.read_parquet(out / "kernels.parquet")
    assert set(kernels["attribution_source"].drop_nulls()) == {"inferred"}


def test_compiled_decode_passes_get_their_layers():
    """HF generate with a compiled decode replayed from CUDA graphs: the compiled layers fuse their first and last
    layers with the embedding and the final norm, yet every pass gets as many layers as the model has (read from
    the module frames of the same model's capture with stacks)."""
    stack = _load(DATA / "foreign" / "captured" / "hf_generate_stack.json.gz")["traceEvents"]
    model_layers = len({e["name"] for e in stack if e.get("cat") == "python_function"
                        and re.fullmatch(r"nn\.Module: Qwen2DecoderLayer_\d+", e["name"])})
    kernels, info, summary = _inferred(DATA / "foreign" / "captured" / "hf_generate_compiled.json.gz")
    assert summary.layers == model_layers
    per_step = kernels.filter(pl.col("step").is_not_null()).group_by("phase", "step").agg(
        pl.col("layer").drop_nulls().unique().sort())
    assert all(layers.to_list() == list(range(model_layers)) for layers in per_step["layer"])
    assert (summary.prefill_steps, summary.decode_steps) == (1, 5)


def test_training_without_ops_or_optimizer_kernels_is_unknown(tmp_path):
    """Without CPU ops, backward kernels are known by name only, and names miss backward kernels named otherwise
    (a weight-gradient GEMM): without an optimizer kernel closing each step nothing splits it, and the trace says
    so rather than calling everything forward."""
    source = _stripped(DATA / "public" / "hta" / "data__amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz",
                       tmp_path, "ops")
    doc = _load(source)
    optimizer = re.compile(r"multi_tensor_apply_kernel|(?i:fused_adam|fused_sgd|adamw?_kernel)")
    doc["traceEvents"] = [e for e in doc["traceEvents"]
                          if not (e.get("cat") == "kernel" and optimizer.search(e.get("name", "")))]
    assert any(e.get("cat") == "kernel" and "backward" in e["name"].lower() for e in doc["traceEvents"])
    path = tmp_path / "no-optimizer.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    kernels, info, summary = _inferred(path)
    training = _level(info, "training")
    assert (training.status, training.code) == ("unknown", "no_optimizer")
    assert not set(kernels["phase"].drop_nulls()) & {"forward", "backward", "optimizer"}
    assert summary.training_steps is None and "training" in summary.unknown


def test_backward_ops_without_kernels_leave_training_unknown(tmp_path):
    """Autograd's backward ops that launched no kernel (the MI250 training step with the kernels launched from its
    backward ops removed): nothing to split, and the reason says so (not "no optimizer")."""
    source = DATA / "public" / "hta" / "data__amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    doc = _load(source)
    events = doc["traceEvents"]
    backward = [e for e in events if e.get("cat") == "cpu_op"
                and re.search(r"^autograd::engine::evaluate_function|Backward\d*$", e["name"])]
    launched = _launches(events)
    inside = {c for c, (t, tid) in launched.items()
              if any(b["tid"] == tid and b["ts"] <= t < b["ts"] + b["dur"] for b in backward)}
    assert backward and inside
    doc["traceEvents"] = [e for e in events if not (e.get("cat") in DEVICE_CATS
                                                    and e["args"].get("correlation") in inside)]
    path = tmp_path / "no-backward-kernels.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    kernels, info, summary = _inferred(path)
    training = _level(info, "training")
    assert (training.status, training.code) == ("unknown", "no_backward_kernels")
    assert not set(kernels["phase"].drop_nulls()) & {"forward", "backward", "optimizer"}
