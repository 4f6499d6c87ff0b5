"""Which model of the catalog (data/model_catalog/) a trace ran, from its own evidence (analyze/recognition/
evidence.py), and only where the evidence leaves one answer: an entry fits when the code the trace names is that
model's and, at one tensor-parallel degree the trace's world allows, every shape clue equals a shape the model
shows (analyze/recognition/expected.py). Entries of exactly the same sizes count as one. The model is recognised
when one set of sizes fits and the clues checked enough of them (data/model_recognition.toml [evidence]);
otherwise the record says why not: no evidence, a model the catalog does not hold, no fit, several fits, too
little checked. Ambiguity is reported, never resolved by a guess."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from kernelscope.analyze.costs.model_config import config_values
from kernelscope.analyze.recognition.evidence import SOURCE_FILE, TraceEvidence, trace_evidence
from kernelscope.analyze.recognition.expected import expected_shapes, tensor_parallel_degrees
from kernelscope.contracts.model_recognition import (
    AMBIGUOUS,
    NO_EVIDENCE,
    NO_FIT,
    TOO_LITTLE,
    UNKNOWN_MODEL,
    ModelRecognition,
    RecognitionClue,
)
from kernelscope.load import knowledge
from kernelscope.load.model_catalog import CatalogEntry, model_catalog


@dataclass(frozen=True)
class Fit:
    """An entry that explains every clue at tensor-parallel degree `tp`: the sizes each clue checked."""

    entry: CatalogEntry
    tp: int
    fields: tuple[frozenset[str], ...]  # per shape clue, in the evidence's order


def recognise_model(kernels: pl.DataFrame, ops: pl.DataFrame, world_size: int, layer_class: str | None = None,
                    catalog: tuple[CatalogEntry, ...] | None = None) -> ModelRecognition:
    """The recognition of the run's tables (after attribution); `world_size`: the ranks its distributedInfo
    records (1 when none); `layer_class`: the decoder layers' nn.Module class attribution found."""
    return recognise(trace_evidence(kernels, ops, world_size, layer_class), catalog)


def recognise(evidence: TraceEvidence, catalog: tuple[CatalogEntry, ...] | None = None) -> ModelRecognition:
    entries = model_catalog() if catalog is None else catalog
    if not evidence.names and not evidence.shapes:
        return ModelRecognition(reason=NO_EVIDENCE)
    named = [e for e in entries if _names_fit(e, evidence)]
    if evidence.names and not named:
        families = sorted({c.family for c in evidence.names if not any(_holds(e, c.kind, c.family) for e in entries)})
        if families:
            return ModelRecognition(reason=UNKNOWN_MODEL, families=families, evidence=_clues(evidence, None))
        return ModelRecognition(reason=NO_FIT, unexplained=", ".join(c.seen for c in evidence.names),
                                evidence=_clues(evidence, None))
    fits = [f for e in named if (f := _fit(e, evidence)) is not None]
    if not fits:
        return ModelRecognition(reason=NO_FIT, unexplained=_closest_miss(named, evidence),
                                evidence=_clues(evidence, None))
    groups: dict[tuple, list[Fit]] = {}
    for fit in fits:
        groups.setdefault(_sizes_key(fit.entry), []).append(fit)
    names = [f.entry.name for f in fits]
    if len(groups) > 1:
        return ModelRecognition(reason=AMBIGUOUS, candidates=names, evidence=_clues(evidence, fits[0]))
    group = next(iter(groups.values()))
    chosen = group[0]
    checked = sorted(frozenset().union(*chosen.fields))
    if not _enough(checked, bool(evidence.names)):
        return ModelRecognition(reason=TOO_LITTLE, candidates=names, checked=checked,
                                evidence=_clues(evidence, chosen))
    degrees = {f.tp for f in _all_fits(chosen.entry, evidence)}
    return ModelRecognition(entry=chosen.entry.name, same_sizes=[f.entry.name for f in group[1:]],
                            source=chosen.entry.source, licence=chosen.entry.licence,
                            tensor_parallel=next(iter(degrees)) if len(degrees) == 1 else None,
                            checked=checked, evidence=_clues(evidence, chosen))


def _holds(entry: CatalogEntry, kind: str, family: str) -> bool:
    return family in (entry.model_files if kind == SOURCE_FILE else entry.class_prefixes)


def _names_fit(entry: CatalogEntry, evidence: TraceEvidence) -> bool:
    return all(_holds(entry, c.kind, c.family) for c in evidence.names)


def _all_fits(entry: CatalogEntry, evidence: TraceEvidence) -> list[Fit]:
    fits = []
    for tp in tensor_parallel_degrees(entry, evidence.world_size):
        expected = expected_shapes(entry, tp)
        fields = [expected.get(c.kind, {}).get(c.values) for c in evidence.shapes]
        if all(f is not None for f in fields):
            fits.append(Fit(entry, tp, tuple(f for f in fields if f is not None)))
    return fits


def _fit(entry: CatalogEntry, evidence: TraceEvidence) -> Fit | None:
    """The fit at the degree whose clues check the most sizes (the first such degree)."""
    fits = _all_fits(entry, evidence)
    return max(fits, key=lambda f: len(frozenset().union(*f.fields)), default=None)


def _closest_miss(entries: list[CatalogEntry], evidence: TraceEvidence) -> str | None:
    """A clue that the entry (and degree) leaving the fewest clues unexplained cannot explain."""
    best: tuple[int, str] | None = None
    for entry in entries:
        for tp in tensor_parallel_degrees(entry, evidence.world_size):
            expected = expected_shapes(entry, tp)
            missed = [c.seen for c in evidence.shapes if c.values not in expected.get(c.kind, {})]
            if missed and (best is None or len(missed) < best[0]):
                best = (len(missed), missed[0])
    return best[1] if best is not None else None


def _sizes_key(entry: CatalogEntry) -> tuple:
    """What the costs read of an entry's config: entries equal in it are one answer."""
    return tuple(sorted(config_values(entry.config).items()))


def _enough(checked: list[str], named: bool) -> bool:
    rule = knowledge.model_recognition()["evidence"]
    required = rule["named_required"] if named else rule["unnamed_required"]
    at_least = rule["named_at_least"] if named else rule["unnamed_at_least"]
    return set(required) <= set(checked) and len(checked) >= at_least


def _clues(evidence: TraceEvidence, fit: Fit | None) -> list[RecognitionClue]:
    names = [RecognitionClue(kind=c.kind, seen=c.seen) for c in evidence.names]
    shapes = [RecognitionClue(kind=c.kind, seen=c.seen,
                              fields=sorted(fit.fields[i]) if fit is not None else [])
              for i, c in enumerate(evidence.shapes)]
    return names + shapes
