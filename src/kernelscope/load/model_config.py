"""A Hugging Face `config.json` given to `kernelscope import --model-config PATH`, read as untrusted input.

Only the keys cost models and reports read are kept, each checked for its kind: positive whole numbers for sizes
and counts, short plain words for names (model_type, dtype, activation, quantisation method), a short list of such
words for `architectures` and `layer_types`, and the same keys inside `text_config` (vision-language models) and
`quantization_config`. Every other key is left out. A file that is not a JSON object, holds a known key of the
wrong kind, or names neither a hidden size nor attention heads is refused in one line naming the file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from kernelscope.errors import UserError

MAX_BYTES = 4 << 20  # a config.json is a few KB; a larger file is not one
_LIMIT = 1 << 40
_NUMBERS = {
    "hidden_size", "d_model", "n_embd", "num_attention_heads", "n_head", "num_key_value_heads", "num_kv_heads",
    "multi_query_group_num", "head_dim", "intermediate_size", "ffn_hidden_size", "n_inner", "num_hidden_layers",
    "n_layer", "num_layers", "vocab_size", "num_local_experts", "num_experts", "n_routed_experts",
    "moe_num_experts", "num_experts_per_tok", "num_experts_per_token", "moe_top_k", "top_k",
    "moe_intermediate_size", "expert_intermediate_size", "n_shared_experts", "num_shared_experts",
    "shared_expert_intermediate_size", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
    "v_head_dim", "sliding_window", "first_k_dense_replace", "moe_layer_freq", "max_position_embeddings",
    "bits", "group_size",
}
_WORDS = {"model_type", "torch_dtype", "dtype", "hidden_act", "quant_method", "fmt", "format"}
_WORD_LISTS = {"architectures", "layer_types", "weight_block_size"}
_NESTED = {"text_config", "quantization_config"}
_WORD = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


def read_model_config(path: Path) -> dict[str, Any]:
    """The checked subset of the config at `path` (run.json `model.config`)."""
    try:
        if path.is_dir():
            path = path / "config.json"
        if path.stat().st_size > MAX_BYTES:
            raise UserError(f"import --model-config: {path}: {path.stat().st_size} bytes; a config.json is far smaller")
        raw = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise UserError(f"import --model-config: {path}: no such file") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not a JSON file"
        raise UserError(f"import --model-config: {path}: {reason}") from None
    if not isinstance(raw, dict):
        raise UserError(f"import --model-config: {path}: expected a JSON object (a Hugging Face config.json)")
    return checked_config(raw, f"import --model-config: {path}")


def checked_config(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """The keys above of a config.json's object, each checked; `where` begins each refusal (the file and option, or
    the catalog entry: load/model_catalog.py)."""
    config = _checked(raw, where, depth=0)
    language = config.get("text_config", config)
    if not any(k in language for k in ("hidden_size", "d_model", "n_embd")) or not any(
            k in language for k in ("num_attention_heads", "n_head")):
        raise UserError(f"{where}: names no hidden size and attention heads "
                        "(hidden_size, num_attention_heads): not a language model's config.json")
    return config


def _checked(raw: dict[str, Any], origin: str, depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if value is None:
            continue
        where = f"{origin}: `{key}`"
        if key in _NUMBERS:
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < _LIMIT or (
                    isinstance(value, float) and not value.is_integer()):
                raise UserError(f"{where} should be a positive whole number, not {_shown(value)}")
            out[key] = int(value)
        elif key in _WORDS:
            if not isinstance(value, str) or not _WORD.match(value):
                raise UserError(f"{where} should be a short name, not {_shown(value)}")
            out[key] = value
        elif key in _WORD_LISTS:
            if not isinstance(value, list) or len(value) > 4096 or not all(
                    (isinstance(v, str) and _WORD.match(v)) or (isinstance(v, int) and not isinstance(v, bool))
                    for v in value):
                raise UserError(f"{where} should be a list of short names, not {_shown(value)}")
            out[key] = list(value)
        elif key in _NESTED and depth == 0:
            if not isinstance(value, dict):
                raise UserError(f"{where} should be an object, not {_shown(value)}")
            out[key] = _checked(value, origin, depth + 1)
    return out


def _shown(value: Any) -> str:
    text = json.dumps(value)[:40]
    return text.encode("ascii", "backslashreplace").decode()
