"""The two test tiers: `pytest -m "not slow"` for every commit, the whole suite in CI. Checks parametrised over the
committed traces run on the small files in the fast tier and on every file in the full suite."""

from __future__ import annotations

from pathlib import Path

import pytest

# Above this a trace takes seconds to read and check on a loaded 2-core machine.
FAST_TIER_BYTES = 500_000


def large_files_slow(paths: list[Path], limit: int = FAST_TIER_BYTES) -> list:
    """`paths` as parameters, those over `limit` bytes marked slow (the full suite runs them)."""
    return [pytest.param(path, marks=pytest.mark.slow) if path.stat().st_size > limit else path for path in paths]
