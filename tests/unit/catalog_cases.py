"""What the kernel catalog's tests share: the kernel names each rule family must classify, with the library,
category and friendly name they must get (tests/data/kernel_names/*.tsv), the folders of real names and traces,
and two small helpers."""

from __future__ import annotations

import csv
from pathlib import Path

from kernelscope.analyze.costs.catalog import KernelInfo

NAMES = Path(__file__).resolve().parents[1] / "data" / "kernel_names"
KINETO = Path(__file__).resolve().parents[1] / "data" / "kineto"


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def _known(info: KernelInfo) -> bool:
    return info.library != "unknown" and info.category != "other"


def _families(file: str) -> list[tuple[str, str, str, str]]:
    """(name, library, category, friendly name) rows of a tab-separated file of tests/data/kernel_names."""
    lines = [line for line in (NAMES / file).read_text().splitlines() if not line.startswith("#")]
    rows = list(csv.DictReader(lines, delimiter="\t"))
    return [(row["name"], row["library"], row["category"], row["friendly"]) for row in rows]


# families.tsv: one line per rule family (a new kernel family is one rule in kernel_catalog.toml plus one line
# there; test_every_rule_has_a_line keeps the two in step). public_corpus.tsv: a real name per rule and category
# of the public trace corpus.
FAMILIES = _families("families.tsv") + _families("public_corpus.tsv")
