"""README.md and docs/*.md describe the tool as it is now, never how it got there: no development log (sessions, work
periods, issue numbers, commit hashes, sections per day), and every measured result they name resolves to its
record in benchmarks/results. History lives in git."""

from __future__ import annotations

import glob
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROSE = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
CODE_SPAN = re.compile(r"`[^`\n]*`")
DATE = r"(?:19|20)\d\d-[01]\d-[0-3]\d"
MONTH = r"(?:January|February|March|April|May|June|July|August|September|October|November|December)"
# What a development log says of itself: when, in which sitting, for which ticket, at which commit.
LOG_WORDING = {
    "session": re.compile(r"\bsessions?\b", re.I),
    "work period": re.compile(r"\bwork[- ]periods?\b", re.I),
    "issue number": re.compile(r"\b(?:issues?|tickets?|PRs?|pull requests?)\s*#?\d+\b", re.I),
    "#N reference": re.compile(r"(?<![\w&/#])#\d+\b"),
    # How the code changed, not what it does: "before this change", "was rewritten", "until now".
    "history narrative": re.compile(
        r"\bbefore this (?:change|commit|fix|work|branch|merge)\b|\buntil now\b|\bused to be\b|\bformerly\b"
        r"|\bpreviously\b|\bnow also\b|\b(?:was|were|has been|have been) (?:added|fixed|changed|removed|renamed"
        r"|rewritten|replaced|dropped)\b", re.I),
}
# 7–40 hex digits with at least one digit and one letter: a commit hash, not a number or an English word.
COMMIT = re.compile(r"(?<![\w.-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])")
DATED_HEADING = re.compile(rf"^#+ .*(?:{DATE}|\b{MONTH}\s+\d{{1,2}}\b|\b\d{{1,2}}\s+{MONTH}\b)", re.M)
BARE_DATE = re.compile(rf"(?<![\w./-]){DATE}(?![\w-])")
RECORD = re.compile(r"results/|tests/data/|\.json\b")
# A paragraph, a list item or a table row: the unit a date and its record must share.
BLOCK = re.compile(r"\n\s*\n|\n(?=\s*(?:[-*|]|\d+\.) )")
RESULT_PATH = re.compile(r"(?:benchmarks/)?results/((?:[\w.*-]+/)*[\w.*-]+)(.?)")
# A record named by itself, without its folder: `report-scaling-2026-11-28-b.json`, `speed-ab-h100-2026-11-28/helpers/`.
DATED_RECORD = re.compile(rf"(?<![\w/.-])([a-z0-9][\w.-]*-{DATE}[\w.-]*(?:/[\w.*-]+)*)")


def _prose(text: str) -> str:
    """The text a reader reads as sentences: code blocks and inline code (commands, file and kernel names) left out."""
    return CODE_SPAN.sub(" ", FENCE.sub(" ", text))


def log_wording(text: str) -> list[str]:
    """Every piece of development-log wording in a Markdown text, as 'kind: excerpt'."""
    found = []
    prose = _prose(text)
    for kind, pattern in LOG_WORDING.items():
        found += [f"{kind}: {m.group(0)!r}" for m in pattern.finditer(prose)]
    found += [f"commit hash: {m.group(0)!r}" for m in COMMIT.finditer(FENCE.sub(" ", text))]
    found += [f"dated heading: {m.group(0)!r}" for m in DATED_HEADING.finditer(FENCE.sub(" ", text))]
    # A measured number keeps its date, beside a link to its record; a date with no record is a log entry.
    for block in BLOCK.split(FENCE.sub(" ", text)):
        if not RECORD.search(block):
            found += [f"date without its record: {m.group(0)!r}" for m in BARE_DATE.finditer(block)]
    return found


@pytest.mark.parametrize("path", PROSE, ids=lambda p: str(p.relative_to(ROOT)))
def test_prose_reads_as_the_present(path):
    found = log_wording(path.read_text(encoding="utf-8"))
    assert not found, f"{path.relative_to(ROOT)}: development-log wording (history lives in git): {found}"


def test_the_check_catches_a_development_log():
    log = """# kernelscope

## Results, 2026-11-27, seventh session

- The sixth session's change (issue 18) made `report` faster, see #42: 4.07 → 3.42 s against 9483caf.
- In the second work period of November 28 …
- Measured on 2026-11-26: 1.4× faster.
- Before this change the copies were renamed `Memcpy 1`; the reader has been rewritten and now also counts flows.

## November 28
"""
    kinds = {entry.split(":")[0] for entry in log_wording(log)}
    assert kinds == {"session", "issue number", "#N reference", "commit hash", "work period", "dated heading",
                     "date without its record", "history narrative"}


def test_the_check_leaves_present_tense_text_alone():
    text = """# Command line

Kernels sharing a name are numbered `#2`, `#3`. A workload runner (`session.py`: `HFSession`) runs one generation.
Measured on 2026-11-28 ([record](../benchmarks/results/corpus-2026-11-28-twice.json)): 1000000 launches, 0x7fffffff,
a decade of traces, `{lambda()#1}`, `_ZN2at6native29vectorized_elementwise_kernel`, sha256 of 64 digits
0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.

```bash
git log --oneline  # 9df51c8 in a code block is an example, not prose
```
"""
    assert log_wording(text) == []


def _result_paths(text: str) -> list[str]:
    """benchmarks/results/… (or results/… in the engine's comments) paths a text names, placeholders left out."""
    paths = []
    for match in RESULT_PATH.finditer(text):
        path, after = match.group(1).rstrip(".,;:'\""), match.group(2)
        if after in ("{", "<") or "DATE" in path or path.endswith("-") or not re.search(r"\d", path):
            continue  # a template (results/corpus-{date}.json, results/<name>, results/corpus-DATE.json)
        paths.append(path)
    return paths


def _dated_records(text: str) -> list[str]:
    """Records the prose names by themselves (the index, a table cell, a docstring), without benchmarks/results/."""
    return [m.group(1).rstrip(".,;:'\"") for m in DATED_RECORD.finditer(text)]


def _texts_naming_results() -> list[Path]:
    files = [*PROSE, *(ROOT / "src").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]
    files += [p for p in (ROOT / "benchmarks").rglob("*") if p.suffix in (".py", ".sh", ".md", ".toml")
              and "results" not in p.relative_to(ROOT / "benchmarks").parts[:1]]
    return files


def test_every_named_result_record_exists():
    results = ROOT / "benchmarks" / "results"
    missing, named = [], 0
    for path in _texts_naming_results():
        text = path.read_text(encoding="utf-8")
        names = _result_paths(text) + (_dated_records(text) if path in PROSE or "src" in path.parts else [])
        for name in names:
            named += 1
            if not glob.glob(str(results / name)):
                missing.append(f"{path.relative_to(ROOT)}: benchmarks/results/{name}")
    assert named > 20
    assert not missing, missing
