"""Compiled report templates kept between runs (report/template_cache.py): a report from cached templates is the
report compiled afresh, in every language; the cache is used only where it is private, and never fails a report."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from kernelscope.pipeline import rerender
from kernelscope.report import render, report_context, template_cache

RUN = Path(__file__).parents[1] / "data" / "runs" / "h200-qwen2-0.5b-ncu"
PAGES = ("report.md", "report.zh.md", "report.html", "report.zh.html")


def _fresh_process_state() -> None:
    """What a new process would have: no environment built, no cache folder chosen."""
    report_context.report_environment.cache_clear()
    template_cache.bytecode_cache.cache_clear()


def _render(tmp_path: Path, name: str) -> dict[str, str]:
    run = tmp_path / name
    shutil.copytree(RUN, run, ignore=shutil.ignore_patterns("report"))
    _fresh_process_state()
    rerender(run)
    return {page: (run / "report" / page).read_text(encoding="utf-8") for page in PAGES}


@pytest.mark.slow
def test_reports_from_cached_templates_are_the_reports_compiled_afresh(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELSCOPE_NO_CACHE", "1")
    afresh = _render(tmp_path, "afresh")
    monkeypatch.delenv("KERNELSCOPE_NO_CACHE")
    monkeypatch.setenv("KERNELSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    filling = _render(tmp_path, "filling")
    cached_files = list((tmp_path / "cache").rglob("*.cache"))
    from_cache = _render(tmp_path, "from-cache")
    _fresh_process_state()
    # Both languages' templates were cached, each in its own folder (their filters differ).
    folders = {path.parent.name for path in cached_files}
    assert {"report-en-gpu", "report-zh-gpu"} <= folders
    assert filling == afresh
    assert from_cache == afresh
    # The Chinese report stays Chinese when its templates come from the cache.
    assert afresh["report.zh.md"] != afresh["report.md"]
    english_headings = [line for line in afresh["report.md"].splitlines() if line.startswith("## ")]
    chinese_headings = [line for line in from_cache["report.zh.md"].splitlines() if line.startswith("## ")]
    assert len(english_headings) == len(chinese_headings)
    assert not set(english_headings) & set(chinese_headings)


def test_a_cache_folder_others_can_write_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELSCOPE_CACHE_DIR", str(tmp_path))
    template_cache.bytecode_cache.cache_clear()
    assert template_cache.bytecode_cache("report-en-gpu") is not None
    folder = tmp_path / f"templates-{template_cache.fingerprint()}" / "report-en-gpu"
    assert folder.stat().st_mode & 0o077 == 0  # made private
    template_cache.bytecode_cache.cache_clear()
    folder.chmod(0o777)
    try:
        assert template_cache.bytecode_cache("report-en-gpu") is None
    finally:
        folder.chmod(0o700)
        template_cache.bytecode_cache.cache_clear()


@pytest.mark.slow
def test_an_unusable_cache_root_leaves_the_report_as_it_is(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELSCOPE_NO_CACHE", "1")
    afresh = _render(tmp_path, "afresh")
    monkeypatch.delenv("KERNELSCOPE_NO_CACHE")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("KERNELSCOPE_CACHE_DIR", str(blocker))
    assert _render(tmp_path, "no-cache") == afresh
    assert blocker.read_text() == "not a folder"
    _fresh_process_state()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_cache_folder_leaves_the_report_as_it_is(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    template_cache.bytecode_cache.cache_clear()
    folder = tmp_path / "cache" / f"templates-{template_cache.fingerprint()}" / "report-en-gpu"
    folder.mkdir(mode=0o700, parents=True)
    folder.chmod(0o500)
    try:
        rendered = _render(tmp_path, "read-only")
        assert rendered["report.md"].startswith("#")
        assert not list(folder.iterdir())
    finally:
        folder.chmod(0o700)
        _fresh_process_state()


def test_the_fingerprint_follows_code_templates_and_words(tmp_path):
    package = tmp_path / "report"
    shutil.copytree(Path(render.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    first = template_cache.package_fingerprint(package)
    assert template_cache.package_fingerprint(package) == first
    seen = {first}
    for changed in ("formatting.py", "templates/report.md.j2", "messages/zh.toml"):
        path = package / changed
        original = path.read_bytes()
        path.write_bytes(original + b"\n")
        seen.add(template_cache.package_fingerprint(package))
        path.write_bytes(original)
    assert len(seen) == 4
    assert template_cache.package_fingerprint(package) == first
