"""run.json `model_recognition`: whether an import recognised a model of the catalog from the trace's own evidence
(analyze/recognition/), which one, from which clues, and otherwise why not (docs/run-format.md)."""

from __future__ import annotations

import msgspec

from kernelscope.contracts.record import Record

# Where an import's model config came from (run.json model.config_source).
FROM_FILE = "--model-config"
FROM_CATALOG = "catalog"

# Why no model was recognised (`reason`).
NO_EVIDENCE = "no_evidence"  # the trace names no model and records none of the shapes read
UNKNOWN_MODEL = "unknown_model"  # its code names a model the catalog does not hold (`families`)
NO_FIT = "no_fit"  # no entry explains every clue (`unexplained`: one the closest entry cannot)
AMBIGUOUS = "ambiguous"  # entries of different sizes explain them all (`candidates`)
TOO_LITTLE = "too_little"  # one set of sizes fits, but the clues check too few of them (`candidates`, `checked`)
REASONS = (NO_EVIDENCE, UNKNOWN_MODEL, NO_FIT, AMBIGUOUS, TOO_LITTLE)


class RecognitionClue(Record, kw_only=True, omit_defaults=True):
    """One clue: its kind (`source file`, `module class`, or a kind of shape: `linear`, `embedding`, `norm`,
    `attention`, `moe`, `router`, `expert_gemm`, `layers`), what was read, and the config sizes it checked."""

    kind: str
    seen: str
    fields: list[str] = msgspec.field(default_factory=list)


class ModelRecognition(Record, kw_only=True, omit_defaults=True):
    entry: str | None = None  # the catalog entry whose config costs the run
    same_sizes: list[str] = msgspec.field(default_factory=list)  # other entries of exactly these sizes
    source: str | None = None  # where the entry's config.json is published
    licence: str | None = None
    tensor_parallel: int | None = None  # the one degree the shapes fit, where only one does
    checked: list[str] = msgspec.field(default_factory=list)  # config sizes the clues checked
    evidence: list[RecognitionClue] = msgspec.field(default_factory=list)
    reason: str | None = None  # REASONS, when none was recognised
    candidates: list[str] = msgspec.field(default_factory=list)
    families: list[str] = msgspec.field(default_factory=list)
    unexplained: str | None = None

    @property
    def recognised(self) -> bool:
        return self.entry is not None
