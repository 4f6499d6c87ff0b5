"""Kernel catalog on real names: the seeds' kernel tables, every kernel of our device captures, and one kernel in
four spellings (Kineto, Nsight, mangled, base name) landing on one entry."""

from __future__ import annotations

import csv

import polars as pl
import pytest

from kernelscope.analyze.costs.catalog import classify, classify_frame
from kernelscope.analyze.costs.kernel_spelling import normalize
from kernelscope.load.kineto import load_kineto
from tests.unit.catalog_cases import KINETO, NAMES, _known, _lines

# ---------------------------------------------------------------- the seeds
# shared/seeds/001 appendix: full Nsight signatures with the library the report gave them.
SEED_LIBRARY = {"cuBLAS": "cuBLAS", "PyTorch ATen": "PyTorch ATen", "FlashAttention": "FlashAttention 2"}
# The seed's descriptions, read as our categories (its rank order).
SEED001_CATEGORIES = [
    "GEMV", "GEMV", "copy/cast", "elementwise", "activation", "elementwise", "concat", "copy/cast", "attention",
    "elementwise", "concat", "elementwise", "reduction", "elementwise", "attention-combine", "sort/topk",
    "index/gather/scatter", "sort/topk", "elementwise", "reduction",
]


def _seed001() -> list[tuple[str, str]]:
    with (NAMES / "seed001_signatures.tsv").open() as handle:
        return [(row["library"], row["signature"]) for row in csv.DictReader(handle, delimiter="\t")]


def test_seed001_signatures_map_to_the_seed_library_and_category() -> None:
    rows = _seed001()
    assert len(rows) == 20
    for (library, signature), category in zip(rows, SEED001_CATEGORIES, strict=True):
        info = classify(signature)
        assert info.library == SEED_LIBRARY[library], signature
        assert info.category == category, signature


def test_seed001_friendly_names_carry_the_signature_details() -> None:
    names = [classify(signature).friendly_name for _, signature in _seed001()]
    assert names[0] == "GEMV (BF16, template=7)"
    assert names[1] == "GEMV (BF16, template=6)"
    assert names[3] == "Elementwise Multiply (BF16, vec4)"
    assert names[5] == "Elementwise Multiply (BF16)"  # the non-vectorized loop says no vec
    assert names[8] == "Flash Split-KV Forward (BF16, hdim 128)"
    assert len(set(names)) == len(names), "every top kernel of the seed gets its own name"


def test_seed004_names_are_all_known() -> None:
    # nsys cuda_gpu_kern_sum Name column of an SGLang run (nvjet, FA3, FlashInfer, ATen, Triton).
    names = _lines(NAMES / "seed004_names.txt")
    assert len(names) > 190
    unknown = [name for name in names if not _known(classify(name))]
    assert not unknown


def test_seed002_names_are_all_known() -> None:
    # Prefixes of about 26 characters (the seed's table cut them): rules must not need the tail.
    # `rotary_embedding_kernel` has no namespace left, so it reads as a plain (Triton-style) name: rope either way.
    names = _lines(NAMES / "seed002_names.txt")
    assert len(names) == 19
    infos = {name: classify(name) for name in names}
    assert all(_known(info) for info in infos.values()), {n: i for n, i in infos.items() if not _known(i)}
    assert infos["deep_gemm::sm100_fp8_gem"].library == "DeepGEMM"
    assert infos["deep_ep::internode_ll::dispatch"].category == "MoE dispatch"
    assert infos["deep_ep::internode_ll::combine"].category == "MoE combine"
    assert infos["mhaSm100fKernel_Qkv"].library == "TensorRT-LLM"
    assert infos["per_token_group_quant_fp8_"].category == "quantization"


# ---------------------------------------------------------------- our device captures
def _capture_names() -> list[str]:
    names: set[str] = set()
    for path in sorted(KINETO.glob("h200-*.trace.json.gz")):
        names.update(load_kineto(path).kernels["name"].unique().to_list())
    return sorted(names)


def test_h200_capture_kernels_are_all_known() -> None:
    names = _capture_names()
    assert len(names) > 100
    unknown = [name for name in names if not _known(classify(name))]
    assert not unknown


def test_qwen2_1_5b_device_time_is_fully_named() -> None:
    # The goal: on the device-captured qwen2-1.5b run >= 99% of device time is named.
    table = pl.read_csv(NAMES / "h200-qwen2-1.5b-default.csv")
    assert table.height == 61
    named = classify_frame(table["name"])
    joined = table.join(named, on="name")
    known = joined.filter((pl.col("library") != "unknown") & (pl.col("category") != "other"))
    share = known["total_ns"].sum() / joined["total_ns"].sum()
    assert share >= 0.99
    assert known.height == table.height  # in fact every kernel, not just 99% of the time


# ---------------------------------------------------------------- one kernel, four spellings
def _spellings() -> dict[str, dict[str, str]]:
    kernels: dict[str, dict[str, str]] = {}
    rows = _lines(NAMES / "spellings.tsv")[1:]
    for row in rows:
        kernel, form, name = row.split("\t")
        kernels.setdefault(kernel, {})[form] = name
    return kernels


@pytest.mark.parametrize("kernel", sorted(_spellings()))
def test_spellings_land_on_the_same_entry(kernel: str) -> None:
    forms = _spellings()[kernel]
    infos = {form: classify(name) for form, name in forms.items()}
    full = [infos[form] for form in ("kineto", "nsight", "mangled") if form in infos]
    # Full spellings agree on everything; a base name (no template arguments) has a coarser friendly name.
    assert len({(i.library, i.category, i.friendly_name, i.rule) for i in full}) == 1, infos
    if "base" in infos:
        assert (infos["base"].library, infos["base"].category) == (full[0].library, full[0].category)
    assert _known(full[0])


def test_mangled_names_demangle_to_the_kineto_spelling() -> None:
    for forms in _spellings().values():
        if "mangled" in forms and "kineto" in forms:
            assert normalize(forms["mangled"]) == normalize(forms["kineto"])


def test_nsight_and_kineto_spellings_normalise_alike_up_to_the_argument_list() -> None:
    # Nsight prints template parameters (T1, T2) where Kineto repeats the types, so compare the part before
    # the argument list: everything the rules read.
    forms = _spellings()["aten-mean-fp32"]
    kineto, nsight = normalize(forms["kineto"]), normalize(forms["nsight"])
    assert kineto.split(">(")[0] == nsight.split(">(")[0]


def test_a_base_name_of_the_generic_aten_loop_is_still_aten_elementwise() -> None:
    # Nsight's base name drops the functor, so a copy or an activation reads as the generic loop.
    info = classify("vectorized_elementwise_kernel")
    assert (info.library, info.category) == ("PyTorch ATen", "elementwise")
