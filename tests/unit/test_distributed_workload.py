"""from_pretrained's split arguments in the form each transformers 5.x DistributedConfig takes: the layouts differ
between releases (5.17, on the GPU machines, refuses `tp_plan` beside a `distributed_config` and has no
`ep_size`), so each shape of the dataclass is checked with a stand-in of that shape."""

from __future__ import annotations

import dataclasses

import pytest
import transformers.distributed

from kernelscope.workload.distributed import _split_arguments


@dataclasses.dataclass
class WithEpSize:  # ≥ 5.2x
    tp_size: int | None = None
    tp_plan: str | None = None
    enable_expert_parallel: bool = False
    ep_size: int | None = None


@dataclasses.dataclass
class WithTpSize:  # 5.1x (5.17)
    tp_size: int | None = None
    tp_plan: str | None = None
    enable_expert_parallel: bool = False


@dataclasses.dataclass
class Early:
    enable_expert_parallel: bool = False


@pytest.mark.parametrize(("shape", "tp", "ep", "expected"), [
    (WithEpSize, 2, 1, {"distributed_config": WithEpSize(tp_size=2, tp_plan="auto")}),
    (WithEpSize, 2, 2, {"distributed_config": WithEpSize(tp_size=2, tp_plan="auto", ep_size=2)}),
    (WithTpSize, 2, 1, {"distributed_config": WithTpSize(tp_size=2, tp_plan="auto")}),
    (WithTpSize, 4, 4, {"distributed_config": WithTpSize(tp_size=4, tp_plan="auto", enable_expert_parallel=True)}),
    (Early, 2, 1, {"tp_plan": "auto"}),
    (Early, 2, 2, {"tp_plan": "auto", "distributed_config": Early(enable_expert_parallel=True)}),
])
def test_each_release_gets_the_layout_it_takes(monkeypatch, shape, tp, ep, expected):
    monkeypatch.setattr(transformers.distributed, "DistributedConfig", shape)
    arguments = _split_arguments(tp, ep)
    assert arguments == expected
    # Never both a standalone tp_plan and a distributed_config that carries one: 5.1x and later refuse that.
    config = arguments.get("distributed_config")
    assert not ("tp_plan" in arguments and config is not None and getattr(config, "tp_plan", None))


def test_the_installed_release_accepts_its_layout():
    config = _split_arguments(2, 2).get("distributed_config")
    assert config is not None and isinstance(config, transformers.distributed.DistributedConfig)


def test_a_shape_checkpoint_holds_every_tensor_and_no_data(tmp_path):
    """The random-weights checkpoint of a preset: transformers' own names and shapes, data that reads as zeros and
    takes no room on disk; loading it and filling the weights gives transformers' kind of initialisation."""
    import safetensors
    import torch
    import transformers

    from kernelscope.workload.distributed import fill_random_weights, write_shape_checkpoint
    from kernelscope.workload.model import build_config, resolve_model_source

    config = build_config(resolve_model_source("tiny-moe"))
    folder = tmp_path / "weights"
    write_shape_checkpoint(config, torch.float32, folder, torch.device("cpu"), seed=0)
    with torch.device("meta"):
        reference = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    expected_numel = sum(t.numel() for t in reference.state_dict().values())
    path = folder / "model.safetensors"
    with safetensors.safe_open(str(path), "pt") as f:
        shapes = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118
        assert all(not f.get_tensor(name).any() for name in f.keys())  # noqa: SIM118
    # transformers saves in the checkpoint layout of its release (experts one by one or fused): the same numbers.
    assert sum(torch.Size(s).numel() for s in shapes.values()) == expected_numel
    data_bytes = sum(4 * torch.Size(s).numel() for s in shapes.values())
    assert path.stat().st_size > data_bytes and path.stat().st_blocks * 512 < data_bytes / 4  # a hole, not bytes
    model, info = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                                    local_files_only=True, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    fill_random_weights(model, seed=0, std=0.02)
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            if "norm" in type(module).__name__.lower():
                assert (param == 1).all()
            elif name != "bias":
                assert 0.01 < param.std().item() < 0.03, name
    # Seeded by name: the same parameter gets the same values again (every rank draws one model).
    again = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True)
    fill_random_weights(again, seed=0, std=0.02)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters(), strict=True))
