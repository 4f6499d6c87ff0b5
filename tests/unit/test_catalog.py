"""Kernel catalog: rules as data (one line per rule family), unknown names, the Python API, speed guards, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import polars as pl
import pytest

from kernelscope.analyze.costs.catalog import (
    CATALOG_COLUMNS,
    KernelInfo,
    classify,
    classify_frame,
    load_catalog,
    with_catalog,
)
from kernelscope.load.kineto import load_kineto
from tests.unit.catalog_cases import FAMILIES, KINETO


@pytest.mark.parametrize(("name", "library", "category", "friendly"), FAMILIES, ids=lambda v: str(v)[:50])
def test_family(name: str, library: str, category: str, friendly: str) -> None:
    info = classify(name)
    assert (info.library, info.category, info.friendly_name) == (library, category, friendly)
    assert info.description and info.rule


def test_every_rule_has_a_line() -> None:
    covered = {classify(name).rule for name, *_ in FAMILIES}
    missing = [rule.id for rule in load_catalog().rules if rule.id not in covered]
    assert not missing, f"rules without a line in tests/data/kernel_names/families.tsv: {missing}"


def test_rule_ids_are_listed_once_and_descriptions_are_sentences() -> None:
    for rule in load_catalog().rules:
        assert rule.description.endswith("."), rule.id
        assert len(rule.description) < 160, rule.id


def test_every_rule_describes_its_kernels_in_chinese_and_every_category_has_words() -> None:
    from kernelscope.load import knowledge
    from kernelscope.report.templating import message_catalog

    specs = knowledge.kernel_catalog()["rule"]
    for spec in specs:
        assert spec["description_zh"].endswith("。") and not spec["description_zh"].isascii(), spec["id"]
    categories = {spec["category"] for spec in specs if "{" not in spec["category"]}
    categories |= {rule["category"] for rule in knowledge.cpu_ops()["rules"]}
    for lang in ("en", "zh"):
        terms = message_catalog("", lang)["terms"]
        assert not categories - set(terms), (lang, categories - set(terms))


# ---------------------------------------------------------------- unknowns, API
def test_unknown_names_keep_a_shortened_raw_name() -> None:
    info = classify("void mylib::detail::my_fancy_kernel<float, 4, (bool)1>(float const*, float*, int)")
    assert info == KernelInfo("unknown", "other", "mylib::detail::my_fancy_kernel<…>", "", None)
    # A plain name could be Triton's or a vendor library's: no library without evidence.
    assert (classify("my_plain_kernel").library, classify("my_plain_kernel").category) == ("unknown", "other")


def test_an_unknown_qualified_name_takes_a_category_from_its_own_words_only() -> None:
    """Library unknown, but a word of the qualified name (not of its template arguments) gives the category."""
    cast = classify("void mylab::per_token_cast_to_fp8_with_channels<__nv_bfloat16, 128, false, 128, false>"
                    "(__nv_bfloat16 const*, int, unsigned char*, float*, int, int, int)")
    assert (cast.library, cast.category, cast.friendly_name) == (
        "unknown", "quantization", "mylab::per_token_cast_to_fp8_with_channels<…>")
    # A fused SwiGLU and FP8 cast: activation words come first in the table.
    fused = classify("void mylab::swiglu_forward_with_weight_and_per_token_cast_to_fp8_with_channels_impl"
                     "<__nv_bfloat16, true, false, 128>(unsigned char*, __nv_bfloat16 const*)")
    assert (fused.library, fused.category) == ("unknown", "activation")
    # Template arguments are not read: `index_t` or `float` say nothing of what the kernel does.
    assert classify("void mylib::my_fancy_kernel<index_t, float>(float*)").category == "other"


def test_classify_is_cached_per_name() -> None:
    name = "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"
    assert classify(name) is classify(name)


def test_classify_frame_gives_one_row_per_distinct_name() -> None:
    names = pl.Series("name", ["Memset (Device)", "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT", "Memset (Device)", None])
    frame = classify_frame(names)
    assert frame.columns == ["name", *CATALOG_COLUMNS]
    assert frame["name"].to_list() == ["Memset (Device)", "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"]
    assert frame["library"].to_list() == ["CUDA / HIP", "cuBLASLt"]


def test_with_catalog_joins_on_name_and_keeps_rows_and_order() -> None:
    kernels = load_kineto(KINETO / "h200-qwen2-0.5b-p16-n4.trace.json.gz").kernels
    named = with_catalog(kernels)
    assert named.height == kernels.height
    assert named["name"].to_list() == kernels["name"].to_list()
    assert named.columns == [*kernels.columns, *CATALOG_COLUMNS]
    assert named["library"].null_count() == 0
    assert with_catalog(named).columns == named.columns  # joining twice replaces, never duplicates


# ---------------------------------------------------------------- speed guards
@pytest.mark.parametrize(
    "name",
    [
        "void at::native::vectorized_elementwise_kernel<" + "a" * 100_000,
        "nvjet_sm90_" + "1x" * 50_000,
        "void flashinfer::BatchQKApply" + "Rotary" * 17_000,
        "_fwd_" + "a" * 100_000 + "(",
        "triton_poi_" + "_1" * 50_000 + "!",
        "ampere_" + "a" * 100_000,
        "sm80_xmma_gemm_" + "a" * 100_000,
        "(" * 100_000,
        "<" * 100_000,
        "at::" * 25_000,
        "_Z" + "N" * 100_000,
    ],
    ids=lambda name: name[:24],
)
def test_no_rule_backtracks_catastrophically(name: str) -> None:
    # Timed targets (≤ 50 ms) live in benchmarks/catalog_speed.py; this bound only catches a blow-up.
    start = time.perf_counter()
    load_catalog().classify(name)  # not the cached classify(): measure the work
    assert time.perf_counter() - start < 1.0


# ---------------------------------------------------------------- CLI
def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kernelscope", "-q", "kernels", *args],
        input=stdin, capture_output=True, text=True, timeout=120,
    )


def test_cli_kernels_prints_a_table_for_names_given_as_arguments() -> None:
    result = _cli("nvjet_sm90_tst_128x8_64x12_4x1_v_bz_TNT", "Memset (Device)")
    assert result.returncode == 0, result.stderr
    assert "cuBLASLt" in result.stdout and "GEMM" in result.stdout
    assert "cuBLASLt GEMM (BF16, tile 128x8x64)" in result.stdout
    assert "Memset (Device)" in result.stdout


def test_cli_kernels_reads_stdin_and_writes_json_lines() -> None:
    names = ["nvjet_sm90_tst_128x8_64x12_4x1_v_bz_TNT", "", "void cutlass::Kernel2<x>(x)"]
    result = _cli("--json", stdin="\n".join(names) + "\n")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [row["name"] for row in rows] == [names[0], names[2]]  # blank lines are skipped
    assert set(rows[0]) == {"name", "library", "category", "friendly_name", "description"}
    assert rows[0]["library"] == "cuBLASLt"


def test_cli_kernels_with_no_names_is_a_user_error() -> None:
    result = _cli(stdin="\n\n")
    assert result.returncode == 2
    assert result.stderr.startswith("kernelscope: error: ")
    assert len(result.stderr.strip().splitlines()) == 1
