from kernelscope import ranges


def test_range_names_round_trip():
    assert ranges.phase_range("prefill") == "ks.phase:prefill"
    assert ranges.phase_range("decode", 7) == "ks.phase:decode:7"
    assert ranges.module_range("model.norm") == "ks.module:model.norm"


def test_layer_index_is_first_numeric_part():
    assert ranges.layer_index("model.layers.3.mlp.down_proj") == 3
    assert ranges.layer_index("model.layers.12.mlp.experts.7.up_proj") == 12
    assert ranges.layer_index("transformer.h.0") == 0
    assert ranges.layer_index("model.norm") is None
    assert ranges.layer_index("lm_head") is None
    assert ranges.layer_prefix("model.layers.3.mlp.down_proj") == "model.layers.3"
