"""A public model recognised from a trace's own evidence and costed from the catalog's config (docs/roofline.md,
"Recognised models"). Every expectation is read from the input in plain Python: the trace's JSON events (its op
shapes, its frames, its distributedInfo), the catalog's JSON file, the configs of tests/data/configs and the
presets the kernelscope captures ran; never from kernelscope's own output."""

from __future__ import annotations

import gzip
import json
import math
import re
import tomllib
from pathlib import Path

import polars as pl
import pytest

from kernelscope.cli import main

DATA = Path(__file__).resolve().parents[1] / "data"
TRACELENS = DATA / "public" / "tracelens"
B200 = TRACELENS / "traces__b200__eager_trace.json.gz"
CATALOG = Path(__file__).resolve().parents[2] / "src" / "kernelscope" / "data" / "model_catalog"
PRESETS = Path(__file__).resolve().parents[2] / "src" / "kernelscope" / "data" / "presets.toml"
SIZES = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
         "vocab_size", "head_dim", "moe_intermediate_size", "num_experts_per_tok")
EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts")


def _events(path: Path) -> dict:
    with gzip.open(path) as f:
        return json.load(f)


def _catalog(name: str) -> dict:
    """The catalog file of an entry, as JSON (plain read, not kernelscope's loader)."""
    for path in CATALOG.glob("*.json"):
        entry = json.loads(path.read_text())
        if entry["name"] == name:
            return entry
    raise AssertionError(f"no catalog entry {name}")


def _import(tmp: Path, files: list[Path], *args: str) -> tuple[dict, dict, pl.DataFrame]:
    out = tmp / "run"
    assert main(["-q", "import", *map(str, files), "--out", str(out), "--no-report", *args]) == 0
    return (json.loads((out / "run.json").read_text()), json.loads((out / "summary.json").read_text()),
            pl.read_parquet(out / "kernels.parquet"))


def _costed_share(kernels: pl.DataFrame) -> float:
    """Share of device time whose kernels have FLOPs or bytes."""
    costed = kernels.filter(pl.col("flops").is_not_null() | pl.col("bytes_moved").is_not_null())["dur_ns"].sum()
    return costed / kernels["dur_ns"].sum()


@pytest.fixture(scope="module")
def b200(tmp_path_factory):
    return _import(tmp_path_factory.mktemp("b200"), [B200])


def test_the_b200_vllm_trace_is_recognised_as_gpt_oss_120b_by_its_code_and_its_shapes(b200):
    trace = _events(B200)
    events = trace["traceEvents"]
    names = {e.get("name", "") for e in events}
    moe = [e for e in events if e.get("name") == "vllm::moe_forward" and e.get("cat") == "cpu_op"]
    router_width = {e["args"]["Input Dims"][1][1] for e in moe}
    blocks = {int(m.group(1)) for n in names if (m := re.fullmatch(r"nn\.Module: TransformerBlock_(\d+)", n))}
    entry = _catalog("gpt-oss-120b")
    # What the file says, checked against the entry: its stack names vLLM's gpt_oss model, its router has the
    # entry's experts and it runs the entry's layers (and the other gpt-oss has neither).
    assert any("vllm/model_executor/models/gpt_oss.py" in n for n in names)
    assert router_width == {entry["config"]["num_local_experts"]}
    assert len(blocks) == len(moe) == entry["config"]["num_hidden_layers"]
    assert _catalog("gpt-oss-20b")["config"]["num_local_experts"] not in router_width

    run, summary, _ = b200
    recognition = run["model_recognition"]
    assert recognition["entry"] == "gpt-oss-120b" and recognition["source"] == entry["source"]
    assert recognition["tensor_parallel"] == trace["distributedInfo"]["world_size"]
    seen = {(c["kind"], c["seen"]) for c in recognition["evidence"]}
    assert ("source file", "vllm/model_executor/models/gpt_oss.py") in seen
    assert ("module class", "GptOssForCausalLM") in seen
    assert any(kind == "moe" and f", {router_width.pop()}]" in text for kind, text in seen)
    assert {"hidden", "experts", "layers", "vocab"} <= set(recognition["checked"])
    assert run["model"]["config_source"] == "catalog"
    assert run["model"]["config"] == entry["config"]
    assert summary["model_config_source"] == "catalog" and summary["recognised_model"] == "gpt-oss-120b"


def test_recognised_the_b200_trace_is_costed_without_a_config(b200, tmp_path):
    _, _, kernels = b200
    assert _costed_share(kernels) >= 0.95
    moe = kernels.filter(pl.col("top_op") == "vllm::moe_forward")
    assert moe.height and (moe["cost_source"] == "model_config").all()
    _, plain_summary, plain = _import(tmp_path, [B200], "--no-model-recognition")
    assert _costed_share(plain) < 0.95 and "recognised_model" not in plain_summary
    assert plain.filter(pl.col("top_op") == "vllm::moe_forward")["flops"].is_null().all()


def test_a_moe_expert_gemm_costs_what_the_catalog_config_and_the_ops_tokens_give(b200):
    """The fused MoE's first expert GEMM (gate and up) of one rank: 2 · T·top_k · H · 2·I/ranks FLOPs, T and H
    (padded) from the op's recorded input dims, top_k and I from the catalog file, ranks from distributedInfo."""
    trace = _events(B200)
    config = _catalog("gpt-oss-120b")["config"]
    top_k, inter = config["num_experts_per_tok"], config["intermediate_size"]
    ranks = trace["distributedInfo"]["world_size"]
    calls = [e for e in trace["traceEvents"] if e.get("name") == "vllm::moe_forward" and e.get("cat") == "cpu_op"]
    (tokens, hidden), _ = calls[0]["args"]["Input Dims"][:2]
    assert {tuple(e["args"]["Input Dims"][0]) for e in calls} == {(tokens, hidden)}  # one prefill step
    up = 2.0 * tokens * top_k * hidden * 2 * inter / ranks
    down = 2.0 * tokens * top_k * (inter / ranks) * hidden

    _, _, kernels = b200
    gemms = (kernels.filter((pl.col("top_op") == "vllm::moe_forward") & (pl.col("category") == "GEMM"))
             .sort("start_ns").group_by("top_op_id", maintain_order=True).agg(pl.col("flops")))
    assert gemms.height == len(calls)
    for flops in gemms["flops"].to_list():
        assert flops == [pytest.approx(up, rel=1e-9), pytest.approx(down, rel=1e-9)]


def test_a_given_model_config_wins_over_recognition(tmp_path):
    config = DATA / "configs" / "gpt-oss-120b" / "config.json"
    run, summary, _ = _import(tmp_path, [B200], "--model-config", str(config))
    assert run["model"]["config_source"] == "--model-config" and "model_recognition" not in run
    assert summary["model_config_source"] == "--model-config" and "recognised_model" not in summary


def test_a_tampered_trace_whose_router_has_7_experts_is_not_recognised(tmp_path):
    """The same trace with its router's width changed to 7 (the logits and the router's weight): the stack still
    says gpt_oss, but no gpt-oss has 7 experts, so nothing is recognised and nothing is costed from a config."""
    trace = _events(B200)
    for e in trace["traceEvents"]:
        dims = (e.get("args") or {}).get("Input Dims")
        if e.get("name") == "vllm::moe_forward":
            dims[1][1] = 7
        elif e.get("name") in ("aten::linear", "aten::addmm", "aten::t", "aten::transpose") and dims:
            for shape in dims:
                if isinstance(shape, list) and 128 in shape and 2880 in shape:
                    shape[shape.index(128)] = 7
    path = tmp_path / "tampered.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(trace, f)
    run, summary, kernels = _import(tmp_path, [path])
    assert run["model_recognition"]["reason"] == "no_fit" and "entry" not in run["model_recognition"]
    assert "model" not in run and "recognised_model" not in summary
    assert (kernels["cost_source"] != "model_config").all()


def test_the_report_says_where_the_config_came_from_in_both_languages(tmp_path):
    out = tmp_path / "run"
    assert main(["-q", "import", str(B200), "--out", str(out), "--figure-formats", "none"]) == 0
    en = (out / "report" / "report.md").read_text()
    zh = (out / "report" / "report.zh.md").read_text()
    assert "Model config: model recognised from the trace as `gpt-oss-120b` (evidence: source file" in en
    assert "— config from kernelscope's catalog, inferred" in en
    assert "- Model recognised from the trace as `gpt-oss-120b` (evidence:" in en
    assert "从追踪本身识别为 `gpt-oss-120b`（证据：源文件" in zh and "配置取自 kernelscope 的模型目录，属推断" in zh


# --- other models of tests/data: recognised as what the file says, or not at all -------------------------------


def _preset(name: str) -> dict:
    return tomllib.loads(PRESETS.read_text())["presets"][name]["config"]


def _config(name: str) -> dict:
    return json.loads((DATA / "configs" / name / "config.json").read_text())


# files, the catalog model the file (its README, its preset) says it ran (None: a model the catalog does not hold, a
# public model cut to fewer layers or another model), whether its evidence suffices to name it, the config it ran with
CORPUS = [
    ([DATA / "kineto" / "h200-llama-3-8b-p16-n3.trace.json.gz"], "Llama-3-8B", True, _preset("llama-3-8b")),
    ([DATA / "kineto" / "h200-qwen2-0.5b-p16-n4.trace.json.gz"], "Qwen2-0.5B", True, _config("qwen2-0.5b")),
    ([DATA / "kineto" / "h200-deepseek-v3-p16-n3.trace.json.gz"], None, False, _preset("deepseek-v3")),
    ([DATA / "multi_gpu" / f"deepseek_v3_ep2_rank{r}.json.gz" for r in (0, 1)], None, False, _preset("deepseek-v3")),
    ([DATA / "kineto" / "h200-qwen3moe-2l-b4-p128-n3.trace.json.gz"], None, False, _config("qwen3moe-2l")),
    ([DATA / "foreign" / "captured" / "hf_generate_stack.json.gz"], None, False, _config("qwen2-0.5b-4l")),
    ([DATA / "foreign" / "captured" / f"tp2_rank{r}.json.gz" for r in (0, 1)], None, False, _config("qwen2-0.5b-4l")),
    ([TRACELENS / "inference__sglang_prefilldecode__sglang_Qwen3-8B_prefilldecode.json.gz"], "Qwen3-8B", True, None),
    ([TRACELENS / "inference__vllm_prefilldecode_piecewise__graph_execution.json.gz"], "gpt-oss", False, None),
    ([TRACELENS / "traces__mi300__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"], None, False, None),
    ([TRACELENS / "traces__h100__gaunernst_bert-small-uncased__1016001.json.gz"], None, False, None),
]


def _file_facts(files: list[Path]) -> dict[str, set[int]]:
    """Sizes the first file states itself: embedding tables [rows, width], the layers it names (kernelscope's
    `model.layers.N` ranges, `<Class>DecoderLayer_N` module frames) and its world size."""
    trace = _events(files[0])
    world = (trace.get("distributedInfo") or {}).get("world_size") or 1
    tables, layers = set(), set()
    for e in trace["traceEvents"]:
        name = e.get("name", "")
        if name == "aten::embedding" and e.get("cat") == "cpu_op":
            tables.add(tuple(e["args"]["Input Dims"][0]))
        if m := re.search(r"(?:^ks\.module:model\.layers\.|^nn\.Module: \w+DecoderLayer_)(\d+)", name):
            layers.add(int(m.group(1)))
    return {"tables": tables, "layers": {len(layers)} if layers else set(), "world": {world}}


def _agrees(config: dict, facts: dict, reference: dict | None) -> bool:
    vocab, hidden = config["vocab_size"], config["hidden_size"]
    world = next(iter(facts["world"]))
    rows = {vocab} | {math.ceil(vocab / m) * m // t for m in (64, 128, 256) for t in range(1, world + 1)}
    if any(width != hidden or r not in rows | {vocab // t for t in range(1, world + 1)} for r, width in facts["tables"]):
        return False
    if facts["layers"] and facts["layers"] != {config["num_hidden_layers"]}:
        return False
    if reference is not None:
        shared = [k for k in SIZES if k in reference and k in config]
        experts = [config.get(k) for k in EXPERTS if k in config], [reference.get(k) for k in EXPERTS if k in reference]
        if any(config[k] != reference[k] for k in shared) or (all(experts) and experts[0] != experts[1]):
            return False
    return True


@pytest.mark.parametrize(("files", "named", "must", "reference"), CORPUS,
                         ids=[c[0][0].name.split(".")[0] for c in CORPUS])
def test_other_traces_are_recognised_as_what_they_are_or_not_at_all(files, named, must, reference, tmp_path):
    run, summary, _ = _import(tmp_path, files)
    recognition = run["model_recognition"]
    entry = recognition.get("entry")
    if must:
        assert entry is not None, recognition
    if entry is None:
        assert recognition["reason"] in ("no_evidence", "unknown_model", "no_fit", "ambiguous", "too_little")
        assert "model" not in run and "recognised_model" not in summary
        return
    names = [entry, *recognition.get("same_sizes", [])]
    assert named is not None and any(n == named or n.startswith(f"{named}-") for n in names), (named, names)
    config = _catalog(entry)["config"]
    assert _agrees(config, _file_facts(files), reference), (entry, reference)
    for twin in recognition.get("same_sizes", []):  # entries named together have the same sizes
        assert {k: _catalog(twin)["config"].get(k) for k in SIZES} == {k: config.get(k) for k in SIZES}


def test_a_gpt_oss_trace_without_its_experts_is_ambiguous_between_the_two(tmp_path):
    """vLLM's piecewise trace names gpt_oss and shows gpt-oss's attention and vocabulary, but no router width and
    no layers: both gpt-oss models fit, and neither is guessed."""
    run, _, _ = _import(tmp_path, [TRACELENS / "inference__vllm_prefilldecode_piecewise__graph_execution.json.gz"])
    recognition = run["model_recognition"]
    assert recognition["reason"] == "ambiguous" and "entry" not in recognition
    assert sorted(recognition["candidates"]) == ["gpt-oss-120b", "gpt-oss-20b"]


def test_the_catalog_holds_the_sizes_of_the_test_configs_and_says_where_each_comes_from():
    for name, config in (("gpt-oss-120b", _config("gpt-oss-120b")), ("Qwen2-0.5B", _config("qwen2-0.5b"))):
        entry = _catalog(name)["config"]
        assert {k: entry.get(k) for k in (*SIZES, *EXPERTS) if k in config} == {
            k: config[k] for k in (*SIZES, *EXPERTS) if k in config}
        assert entry.get("quantization_config") == config.get("quantization_config")
    for path in CATALOG.glob("*.json"):
        entry = json.loads(path.read_text())
        assert entry["source"].startswith("https://huggingface.co/") and entry["licence"], path.name
        assert entry["model_files"] and entry["class_prefixes"], path.name
    readme = (CATALOG / "README.md").read_text()
    assert all(f"`{p.name}`" in readme for p in CATALOG.glob("*.json"))
