"""`kernelscope profile --backend engine` end to end on CPU (the engine's PyTorch reference ops)."""

import json
from pathlib import Path

import polars as pl
import pytest

from tests.e2e.test_cli import _assert_clean_failure, kernelscope


@pytest.fixture(scope="module")
def engine_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "engine"
    result = kernelscope("profile", "--backend", "engine", "--model", "tiny", "--prompt-len", "16",
                         "--new-tokens", "6", "--repeats", "1", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == str(out.resolve())
    return out


@pytest.mark.slow
def test_engine_run_has_phases_steps_and_layer_modules(engine_run):
    summary = json.loads((engine_run / "summary.json").read_text())
    assert set(summary["phases"]) == {"prefill", "decode"}
    assert summary["phases"]["decode"]["steps"] == 5
    assert summary["attribution_coverage"] == 1.0 and "graph_replays" not in summary  # CPU: no CUDA graph
    kernels = pl.read_parquet(engine_run / "kernels.parquet")
    decode = kernels.filter(pl.col("phase") == "decode")
    assert sorted(decode["step"].unique().to_list()) == [0, 1, 2, 3, 4]
    assert sorted(decode["layer"].drop_nulls().unique().to_list()) == [0, 1]
    modules = set(kernels["module"])
    assert {"model.embed_tokens", "lm_head", "generate"} <= modules
    assert any(m.startswith("model.layers.1.") for m in modules)
    run = json.loads((engine_run / "run.json").read_text())
    assert run["workload"]["backend"] == "engine" and "kernelscope engine" in run["workload"]["backend_description"]
    assert run["timings"]["tokens_match"] and run["timings"]["profiled_tokens_match"]
    assert run["model"]["num_layers"] == 2 and run["model"]["layer_prefix"] == "model.layers"


@pytest.mark.slow
def test_engine_report_has_layer_breakdown(engine_run):
    text = (engine_run / "report" / "report.md").read_text()
    for heading in ["### Prefill", "### Decode", "## Layer → module → CPU op breakdown"]:
        assert heading in text, heading


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--model", "deepseek-v3"], "unsupported architecture 'deepseek_v3'"),
        (["--no-repeat-ngram-size", "2"], "not supported by --backend engine"),
    ],
)
@pytest.mark.slow
def test_engine_bad_input_fails_cleanly(tmp_path, args, needle):
    out = tmp_path / "run"
    _assert_clean_failure(kernelscope("profile", "--backend", "engine", "--out", str(out), *args), needle)
    assert not out.exists()


@pytest.mark.slow
def test_replay_of_an_engine_run_runs_the_engine(engine_run, monkeypatch):
    # `kernelscope ncu` re-runs the workload through commands.replay: an engine run must replay the engine.
    from kernelscope.commands import replay as replay_module
    from kernelscope.workload.engine_backend import EngineWorkload

    calls = []
    real_generate = EngineWorkload.generate

    def counting_generate(self, input_ids, settings, annotated):
        calls.append(annotated)
        return real_generate(self, input_ids, settings, annotated)

    def no_transformers(*args, **kwargs):
        raise AssertionError("an engine run was replayed with transformers")

    monkeypatch.setattr(replay_module, "build_model", no_transformers)
    monkeypatch.setattr(EngineWorkload, "generate", counting_generate)
    assert replay_module.main([str(engine_run)]) == 0
    assert calls == [False, True]  # one warm-up without ranges, then the annotated generation
