"""Traces that kernelscope did not record (tests/data/foreign, tests/data/public): phases and steps from the
trace's own markers, layers and modules from nn.Module frames, source lines from Python frames, CUDA-graph
replays tied to their capture. Expected values are read from the files with plain json (the helpers below),
never from kernelscope's output."""

from __future__ import annotations

import bisect
import gzip
import json
import re
from pathlib import Path

import polars as pl
import pytest

from kernelscope.cli import main

DATA = Path(__file__).resolve().parents[1] / "data"
CAPTURED = DATA / "foreign" / "captured"
TRIMMED = DATA / "foreign" / "trimmed"
TRACELENS = DATA / "public" / "tracelens"
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


# ---------------------------------------------------------------- reading the files independently
def _events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def _launch_times(events: list[dict]) -> dict[int, float]:
    """correlation → launch call start (µs)."""
    return {e["args"]["correlation"]: e["ts"] for e in events
            if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}


def _device(events: list[dict]) -> list[dict]:
    return [e for e in events if e.get("cat") in DEVICE_CATS]


def _enclosing(frames: list[dict], t: float) -> dict | None:
    """The innermost of `frames` (same thread assumed) containing time t."""
    best = None
    for f in frames:
        if f["ts"] <= t < f["ts"] + f["dur"] and (best is None or f["dur"] < best["dur"]):
            best = f
    return best


def _import(tmp_path: Path, *args: str) -> Path:
    out = tmp_path / "run"
    assert main(["-q", "import", *args, "--out", str(out), "--no-report"]) == 0
    return out


def _run(out: Path) -> tuple[dict, pl.DataFrame]:
    return json.loads((out / "run.json").read_text()), pl.read_parquet(out / "kernels.parquet")


# ---------------------------------------------------------------- HF generate with stacks and modules
@pytest.fixture(scope="module")
def hf_stack(tmp_path_factory):
    out = _import(tmp_path_factory.mktemp("hf"), str(CAPTURED / "hf_generate_stack.json.gz"))
    return _run(out)


def test_hf_generate_steps_are_its_forwards(hf_stack):
    info, kernels = hf_stack
    events = _events(CAPTURED / "hf_generate_stack.json.gz")
    forwards = sorted(e["ts"] for e in events if e.get("cat") == "python_function"
                      and re.fullmatch(r"nn\.Module: Qwen2ForCausalLM_\d+", e["name"]))
    lookups = sorted((e["ts"], e["args"]["Input Dims"][1][-1]) for e in events if e["name"] == "aten::embedding")
    assert len(forwards) == 6 and [n for _, n in lookups] == [64, 1, 1, 1, 1, 1]
    steps = info["attribution"]["steps"]
    assert [(s["phase"], s["step"]) for s in steps] == [("prefill", 0)] + [("decode", i) for i in range(5)]
    assert info["attribution"]["phase"]["source"].startswith("model forwards")
    # Each kernel belongs to the forward most recently started at its launch (sampling included).
    launched = _launch_times(events)
    expected: dict[tuple[str, int], int] = {}
    for k in _device(events):
        t = launched.get(k["args"].get("correlation"))
        i = bisect.bisect_right(forwards, t) - 1 if t is not None else -1
        if i >= 0:
            key = ("prefill", 0) if i == 0 else ("decode", i - 1)
            expected[key] = expected.get(key, 0) + 1
    counted = kernels.filter(pl.col("step").is_not_null()).group_by("phase", "step").len()
    assert {(p, s): n for p, s, n in counted.iter_rows()} == expected


def test_hf_generate_every_layer_and_module_found(hf_stack):
    info, kernels = hf_stack
    events = _events(CAPTURED / "hf_generate_stack.json.gz")
    layers = [e for e in events if e.get("cat") == "python_function"
              and re.fullmatch(r"nn\.Module: Qwen2DecoderLayer_\d+", e["name"])]
    assert len({e["name"] for e in layers}) == 4
    launched = _launch_times(events)
    expected = []
    for k in sorted(_device(events), key=lambda e: e["ts"]):
        frame = _enclosing(layers, launched[k["args"]["correlation"]])
        expected.append(int(frame["name"].rsplit("_", 1)[1]) if frame else None)
    assert kernels.sort("start_ns")["layer"].to_list() == expected
    assert info["attribution"]["layer_types"] == {str(i): "Qwen2DecoderLayer" for i in range(4)}
    total = kernels["dur_ns"].sum()
    assert kernels.filter(pl.col("module").is_not_null())["dur_ns"].sum() / total >= 0.95
    assert info["attribution"]["module"]["coverage"] >= 0.95
    # Module names read like profiled runs': the layer index, then the module within the layer.
    q_proj = kernels.filter(pl.col("module").str.ends_with("Qwen2Attention.Linear[0]"))
    assert set(q_proj["module"]) == {f"Qwen2ForCausalLM.Qwen2Model.Qwen2DecoderLayer.{i}.Qwen2Attention.Linear[0]"
                                     for i in range(4)}


def test_hf_generate_source_lines_name_model_code(hf_stack):
    info, kernels = hf_stack
    events = _events(CAPTURED / "hf_generate_stack.json.gz")
    frames = {e["name"] for e in events if e.get("cat") == "python_function"}
    total = kernels["dur_ns"].sum()
    assert kernels.filter(pl.col("source_line").is_not_null())["dur_ns"].sum() / total >= 0.95
    for line in kernels["source_line"].drop_nulls().unique():
        file_line, function = line.split(" ", 1)
        file, number = file_line.rsplit(":", 1)
        assert f"{file}({number}): {function}" in frames  # a frame of the trace, as written
        assert not file.startswith(("torch/", "<"))
    # Inside the layers: the model's code, its KV cache and its activation (transformers' files, no wrappers).
    in_layers = kernels.filter(pl.col("layer").is_not_null())["source_line"]
    files = set(in_layers.str.split(":").list.first())
    assert files == {"transformers/models/qwen2/modeling_qwen2.py", "transformers/cache_utils.py",
                     "transformers/activations.py"}


# ---------------------------------------------------------------- steps without Python frames
def test_embedding_lookups_give_steps_without_frames(tmp_path):
    info, kernels = _run(_import(tmp_path, str(CAPTURED / "hf_generate_plain.json.gz")))
    events = _events(CAPTURED / "hf_generate_plain.json.gz")
    tokens = [e["args"]["Input Dims"][1][-1] for e in sorted(events, key=lambda e: e["ts"])
              if e["name"] == "aten::embedding"]
    phases = ["prefill" if n > 1 else "decode" for n in tokens]
    assert [s["phase"] for s in info["attribution"]["steps"]] == phases
    assert [s["tokens"] for s in info["attribution"]["steps"]] == tokens
    # no module frames: layers come from the repeats of the kernel sequence (tests/unit/test_structure_inference.py)
    assert info["attribution"]["module"]["source"] == "inferred from the trace's regularities"


def test_profiler_steps_of_a_users_loop(tmp_path):
    info, kernels = _run(_import(tmp_path, str(CAPTURED / "own_loop_profiler_steps.json.gz")))
    events = _events(CAPTURED / "own_loop_profiler_steps.json.gz")
    marks = sorted((e for e in events if e["cat"] == "user_annotation" and e["name"].startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
    launched = _launch_times(events)
    counts = []
    for m in marks:
        counts.append(sum(1 for k in _device(events)
                          if m["ts"] <= launched.get(k["args"].get("correlation"), -1) < m["ts"] + m["dur"]))
    assert info["attribution"]["phase"]["source"] == "ProfilerStep#N ranges"
    assert [s["label"] for s in info["attribution"]["steps"]] == [m["name"] for m in marks]
    per_step = kernels.filter(pl.col("step").is_not_null()).sort("start_ns").group_by(
        "phase", "step", maintain_order=True).len()["len"].to_list()
    assert per_step == counts
    assert [s["phase"] for s in info["attribution"]["steps"]] == ["prefill"] + ["decode"] * 5


# ---------------------------------------------------------------- CUDA graphs
def test_replays_take_the_capture_attribution_by_position(tmp_path):
    out = _import(tmp_path, str(CAPTURED / "graph_replay.json.gz"), "--capture", str(CAPTURED / "graph_capture.json.gz"))
    info, kernels = _run(out)
    replay_events = _events(CAPTURED / "graph_replay.json.gz")
    graph_calls = {e["args"]["correlation"] for e in replay_events if e["name"] == "cudaGraphLaunch"}
    replayed = [k for k in _device(replay_events) if k["args"].get("correlation") in graph_calls]
    replays = info["graph_replays"]
    assert (replays["replays"], replays["kernels"]) == (len(graph_calls), len(replayed))
    assert replays["attributed_time_ns"] == replays["time_ns"]
    assert [m["method"] for m in replays["methods"]] == ["position"]
    # Replay kernel i takes the layer of captured launch i: the decoder layer frame open at that call.
    capture = _events(CAPTURED / "graph_capture.json.gz")
    ran = {e["args"]["correlation"] for e in _device(capture)}
    calls = sorted((e for e in capture if e.get("cat") in ("cuda_runtime", "cuda_driver")
                    and re.search(r"LaunchKernel|MemsetAsync|MemcpyAsync", e["name"])
                    and e["args"].get("correlation") not in ran), key=lambda e: e["ts"])
    layers = [e for e in capture if e.get("cat") == "python_function"
              and re.fullmatch(r"nn\.Module: Qwen2DecoderLayer_\d+", e["name"])]
    expected = [int(f["name"].rsplit("_", 1)[1]) if (f := _enclosing(layers, c["ts"])) else None for c in calls]
    graph = kernels.filter(pl.col("launch_api") == "cudaGraphLaunch").sort("start_ns")
    first = graph.filter(pl.col("correlation") == graph["correlation"][0])
    assert first.height == len(calls) and first["layer"].to_list() == expected
    # Each replay, launched outside any forward, is a decode step of its own.
    assert graph.group_by("correlation").agg(pl.col("step").n_unique())["step"].to_list() == [1] * len(graph_calls)
    assert graph["phase"].unique().to_list() == ["decode"]


def test_the_closing_lines_say_how_to_attribute_replays(tmp_path, capsys):
    """Replays left without modules for want of a capture trace: the import's closing lines say how much device
    time that is (from the file: the kernels of its graph launches over all its device time) and what to give."""
    trace = CAPTURED / "hf_generate_compiled.json.gz"
    events = _events(trace)
    graph_calls = {e["args"]["correlation"] for e in events if e["name"] == "cudaGraphLaunch"}
    device = _device(events)
    share = 100 * sum(k["dur"] for k in device if k["args"].get("correlation") in graph_calls) / sum(
        k["dur"] for k in device)
    assert main(["import", str(trace), "--out", str(tmp_path / "run"), "--no-report"]) == 0
    hint = next(line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("graph replays:"))
    assert f"{share:.1f}% of the device time is in {len(graph_calls)} replays" in hint
    assert "import --capture" in hint
    # With every replay attributed (an eager step of the same trace holds them), nothing is suggested.
    assert main(["import", str(CAPTURED / "graph_replay.json.gz"), "--out", str(tmp_path / "eager"), "--no-report"]) == 0
    assert "graph replays:" not in capsys.readouterr().out


def test_without_capture_an_eager_step_of_the_same_trace_serves(tmp_path):
    info, _ = _run(_import(tmp_path, str(CAPTURED / "graph_replay.json.gz")))
    assert [m["method"] for m in info["graph_replays"]["methods"]] == ["eager step"]


def test_compiled_replays_without_a_capture_are_reported_not_guessed(tmp_path):
    info, kernels = _run(_import(tmp_path, str(CAPTURED / "hf_generate_compiled.json.gz")))
    replays = info["graph_replays"]
    events = _events(CAPTURED / "hf_generate_compiled.json.gz")
    graph_calls = {e["args"]["correlation"] for e in events if e["name"] == "cudaGraphLaunch"}
    replay_time = sum(round(k["dur"] * 1000) for k in _device(events) if k["args"].get("correlation") in graph_calls)
    assert replays["attributed_time_ns"] == 0 and replays["methods"] == []
    [reason] = replays["unattributed"]
    assert reason["replays"] == len(graph_calls) and "no capture trace given" in reason["reason"]
    assert abs(reason["time_ns"] - replay_time) <= len(graph_calls) * 400  # per-kernel rounding of µs to ns
    assert [s["phase"] for s in info["attribution"]["steps"]] == ["prefill"] + ["decode"] * 5


@pytest.mark.parametrize(("replay", "capture", "phase"), [
    (TRACELENS / "inference__sglang_decode__sglang_Qwen3-8B_decode.json.gz",
     TRACELENS / "sglang_decode__capture_traces__bs_32_rank0.json.gz", "decode"),
    (TRACELENS / "inference__vllm_decode_full__graph_execution.json.gz",
     TRIMMED / "vllm_decode_full__graph_capture_rank_0.json.gz", "decode"),
    (TRACELENS / "inference__vllm_prefilldecode_piecewise__graph_execution.json.gz",
     TRIMMED / "vllm_prefilldecode_piecewise__graph_capture_rank_0.json.gz", "mixed"),
], ids=["sglang-decode", "vllm-full", "vllm-piecewise"])
def test_serving_replays_attributed_from_their_capture(tmp_path, replay, capture, phase):
    info, kernels = _run(_import(tmp_path, str(replay), "--capture", str(capture)))
    events = _events(replay)
    graph_calls = {e["args"]["correlation"] for e in events if e["name"] == "hipGraphLaunch"}
    replay_ns = sum(round(k["dur"] * 1000) for k in _device(events) if k["args"].get("correlation") in graph_calls)
    replayed = kernels.filter(pl.col("launch_api") == "hipGraphLaunch")
    assert abs(replayed["dur_ns"].sum() - replay_ns) <= replayed.height  # ns rounding per kernel
    known = replayed.filter(pl.col("module").is_not_null() & pl.col("op").is_not_null())
    assert known["dur_ns"].sum() >= 0.9 * replay_ns
    assert {m["method"] for m in info["graph_replays"]["methods"]} == {"exact"}  # ROCm captures name kernels
    assert replayed["phase"].unique().to_list() == [phase]


def test_a_replay_without_its_capture_says_how_much_is_unattributed(tmp_path):
    info, _ = _run(_import(tmp_path, str(TRACELENS / "inference__sglang_decode__sglang_Qwen3-8B_decode.json.gz")))
    replays = info["graph_replays"]
    assert replays["attributed_time_ns"] == 0
    assert sum(u["time_ns"] for u in replays["unattributed"]) == replays["time_ns"] > 0


# ---------------------------------------------------------------- serving annotations
@pytest.mark.parametrize(("path", "phases", "counts"), [
    (TRACELENS / "inference__sglang_prefilldecode__sglang_Qwen3-8B_prefilldecode.json.gz", ["prefill"],
     {"prefill_requests": 15, "prefill_tokens": 15360, "decode_requests": 0}),
    (TRACELENS / "inference__vllm_prefilldecode_piecewise__graph_execution.json.gz", ["mixed"],
     {"prefill_requests": 9, "prefill_tokens": 8155, "decode_requests": 37, "decode_tokens": 37}),
    (TRACELENS / "traces__b200__eager_trace.json.gz", ["prefill"],
     {"prefill_requests": 1, "prefill_tokens": 888, "decode_requests": 0, "decode_tokens": 0}),
], ids=["sglang-extend", "vllm-mixed", "vllm-older"])
@pytest.mark.slow
def test_serving_step_annotations_give_phases(tmp_path, path, phases, counts):
    info, kernels = _run(_import(tmp_path, str(path)))
    steps = info["attribution"]["steps"]
    assert [s["phase"] for s in steps] == phases
    for key, value in counts.items():
        assert steps[0].get(key, 0) == value, key
    # The annotation's own numbers, read back from its name.
    marks = sorted((e for e in _events(path) if e.get("cat") == "user_annotation" and e["name"].startswith("execute_")),
                   key=lambda e: e["ts"])
    assert [s["label"] for s in steps] == [e["name"] for e in marks]
    assert info["attribution"]["phase"]["coverage"] > 0.9


def test_sglang_step_annotation_alone(tmp_path):
    """Ranges named step[DECODE bs=N] give decode steps where no execute annotation is present."""
    from kernelscope.analyze.structure.step_inference import _annotated

    names = ["step[DECODE bs=32]", "step[EXTEND bs=15 toks=15360]", "decode:3", "Prefill", "unrelated"]
    table = pl.DataFrame({"name": names, "thread": [0] * 5, "start_ns": [0, 10, 20, 30, 40], "dur_ns": [5] * 5})
    found = _annotated(table)
    assert found.source == "step annotations (SGLang)"
    assert found.phase == ["decode", "prefill"] and found.counts[1] == {"requests": 15, "tokens": 15360}
    generic = _annotated(table.filter(~pl.col("name").str.starts_with("step[")))
    assert generic.source == "phase ranges (any program)" and generic.phase == ["decode", "prefill"]


# ---------------------------------------------------------------- two GPUs
def test_tensor_parallel_ranks_each_get_steps_and_layers(tmp_path):
    out = _import(tmp_path, str(CAPTURED / "tp2_rank0.json.gz"), str(CAPTURED / "tp2_rank1.json.gz"))
    info, kernels = _run(out)
    for rank in (0, 1):
        ours = kernels.filter(pl.col("rank") == rank)
        assert sorted(ours["layer"].drop_nulls().unique().to_list()) == [0, 1, 2, 3]
        steps = ours.filter(pl.col("step").is_not_null()).select("phase", "step").unique()
        assert steps.height == 6
    assert info["attribution"]["module"]["coverage"] >= 0.95


# ---------------------------------------------------------------- the report of an imported trace
@pytest.mark.slow
def test_imported_report_has_steps_source_lines_and_attribution_sources(tmp_path):
    out = tmp_path / "run"
    assert main(["-q", "import", str(CAPTURED / "hf_generate_stack.json.gz"), "--out", str(out), "--lang", "en"]) == 0
    report = (out / "report" / "report.md").read_text()
    lines = pl.read_csv(out / "report" / "tables" / "source_lines.csv")
    top = lines.row(0, named=True)
    assert "## Where the time comes from in the source" in report
    assert f"| `{top['source_line']}` |" in report
    steps = pl.read_csv(out / "report" / "tables" / "steps.csv")
    assert steps.select("phase", "step").rows() == [("prefill", 0)] + [("decode", i) for i in range(5)]
    assert "| Phase | model forwards (top-level nn.Module frames) |" in report
    assert "| Source line | Python frames (with\\_stack) |" in report
    assert "#### Modules and kernels" in report  # the layer breakdown works for imported traces
    without = tmp_path / "plain"
    assert main(["-q", "import", str(CAPTURED / "hf_generate_plain.json.gz"), "--out", str(without), "--lang", "en"]) == 0
    plain = (without / "report" / "report.md").read_text()
    # No Python frames: the source-line section is left out, and the attribution section says what the trace
    # lacks and how to record it.
    assert "## Where the time comes from in the source" not in plain
    assert "Not in this trace: source line. A trace recorded with `torch.profiler.profile(" \
           "with_stack=True, with_modules=True)`" in plain
    # modules and layers are read from the repeats of its kernel sequence instead, and said to be inferred
    assert "| Module | inferred from the trace's regularities |" in plain
    assert "- Decoder layers (inferred): 4, a unit of" in plain


# ---------------------------------------------------------------- NVTX ranges of an Nsight Systems export
def test_step_annotations_as_nvtx_ranges_of_an_nsys_export(tmp_path):
    """The same serving annotations pushed as NVTX ranges (an nsys export of the vLLM B200 trace, written by the
    schema-following writer) give the same phase and counts as the Kineto file."""
    from kernelscope.load.kineto import load_kineto
    from tests.nsys_sqlite_writer import write_nsys_sqlite

    path = TRACELENS / "traces__b200__eager_trace.json.gz"
    export = write_nsys_sqlite(load_kineto(path), tmp_path / "b200.sqlite", variant="nvtx-textid")
    info, kernels = _run(_import(tmp_path, str(export)))
    marks = sorted((e for e in _events(path) if e.get("cat") == "user_annotation" and e["name"].startswith("execute_")),
                   key=lambda e: e["ts"])
    steps = info["attribution"]["steps"]
    assert [s["label"] for s in steps] == [e["name"] for e in marks] and len(marks) == 1
    tokens = int(re.search(r"execute_context_\d+\((\d+)_", marks[0]["name"]).group(1))
    assert steps[0]["phase"] == "prefill" and steps[0]["prefill_tokens"] == tokens
    # Every kernel launched inside the range is in the prefill phase.
    events = _events(path)
    launched = _launch_times(events)
    inside = [e for e in _device(events)
              if marks[0]["ts"] <= launched.get(e["args"].get("correlation"), -1) <= marks[0]["ts"] + marks[0]["dur"]]
    assert kernels.filter(pl.col("phase") == "prefill").height == len(inside) > 0


def test_modules_and_layers_from_a_scripts_own_annotations(tmp_path):
    """A real script that names its model's parts with record_function (tests/data/public/tokenomics: Model_Forward,
    TransformerLayer_0…3, Attention, FeedForward, …; no nn.Module frames): each kernel's module is the chain of
    annotations open on its launching thread at launch, outermost first, the numbered layers written `.N` and
    their number the layer; torch.distributed's own `nccl:` ranges are not modules. Expected per kernel from the
    file in plain Python (launch call by correlation id, then the ranges around it)."""
    trace = DATA / "public" / "tokenomics" / "llama_trace_4layers0_with_annotations.json.gz"
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    launches = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"
                and isinstance(e.get("args"), dict) and "correlation" in e["args"]}
    annotations = [e for e in events if e.get("cat") == "user_annotation" and not e["name"].startswith("nccl:")]
    expected = {}
    for kernel in (e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")):
        launch = launches[kernel["args"]["correlation"]]
        around = sorted((a for a in annotations if (a["pid"], a["tid"]) == (launch["pid"], launch["tid"])
                         and a["ts"] <= launch["ts"] < a["ts"] + a["dur"]), key=lambda a: (a["ts"], -a["dur"]))
        parts = [re.sub(r"^TransformerLayer_(\d+)$", r"TransformerLayer.\1", a["name"]) for a in around]
        expected[kernel["args"]["correlation"]] = ".".join(parts) or None
    out = tmp_path / "run"
    assert main(["-q", "import", str(trace), "--out", str(out), "--no-report"]) == 0
    kernels = pl.read_parquet(out / "kernels.parquet")
    found = dict(zip(kernels["correlation"].to_list(), kernels["module"].to_list(), strict=True))
    assert found == expected and sum(m is not None for m in expected.values()) == len(expected)
    layers = {c: int(re.search(r"TransformerLayer\.(\d+)", m)[1]) if m and "TransformerLayer." in m else None
              for c, m in expected.items()}
    assert dict(zip(kernels["correlation"].to_list(), kernels["layer"].to_list(), strict=True)) == layers
    assert {n for n in layers.values() if n is not None} == {0, 1, 2, 3}
    attribution = json.loads((out / "run.json").read_text())["attribution"]
    assert attribution["module"]["source"] == "user annotations (record_function)"
    assert attribution["layer_class"] == "TransformerLayer"
