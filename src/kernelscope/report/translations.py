"""Words of the report that come from kernelscope's knowledge files rather than from its message catalogs: the
descriptions of kernels (data/kernel_catalog.toml, `description` and `description_<lang>` per rule) and of CPU ops
(data/cpu_ops.toml, one text per language per rule), as a map from the English text to the text in a language."""

from __future__ import annotations

from functools import cache

from kernelscope.load import knowledge


@cache
def descriptions(lang: str) -> dict[str, str]:
    """English description → its text in `lang` (empty for English, or where a rule has no translation)."""
    if lang == "en":
        return {}
    out: dict[str, str] = {}
    for rule in knowledge.kernel_catalog().get("rule", []):
        if rule.get("description") and rule.get(f"description_{lang}"):
            out[rule["description"]] = rule[f"description_{lang}"]
    for rule in knowledge.cpu_ops()["rules"]:
        if rule.get(lang):
            out[rule["en"]] = rule[lang]
    return out
