"""power.parquet and energy.parquet read back for the report and the energy split (docs/energy.md). They are
inputs like any other: a missing column, a value of the wrong type or a file that is not Parquet leaves the tables
empty with one line saying why, never an exception."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from kernelscope.contracts.energy_tables import POWER_SCHEMA, WINDOW_SCHEMA, EnergyTables
from kernelscope.contracts.run_files import ENERGY, POWER


def read_energy_tables(directory: Path) -> EnergyTables | None:
    """The run's energy tables; None where it has neither file (a run made without --energy)."""
    power, windows = directory / POWER, directory / ENERGY
    if not power.is_file() and not windows.is_file():
        return None
    samples, problem = _read(power, POWER_SCHEMA, extra={})
    rows, other = _read(windows, WINDOW_SCHEMA, extra={"joules": pl.Float64, "joules_from_power": pl.Float64})
    return EnergyTables(samples=clean_samples(samples), windows=clean_windows(rows), problem=problem or other)


def _read(path: Path, schema: dict[str, pl.DataType], extra: dict[str, pl.DataType]
          ) -> tuple[pl.DataFrame, str | None]:
    empty = pl.DataFrame(schema=schema)
    if path.is_symlink() or not path.is_file():
        return empty, f"{path}: missing"
    try:
        frame = pl.read_parquet(path)
    except Exception as exc:  # polars raises several error types for corrupt files
        return empty, f"{path}: unreadable Parquet file ({type(exc).__name__})"
    missing = [c for c in schema if c not in frame.columns]
    if missing:
        return empty, f"{path}: no {', '.join(missing)} column"
    wanted = {**schema, **{c: t for c, t in extra.items() if c in frame.columns}}
    try:
        return frame.select(pl.col(c).cast(t, strict=False) for c, t in wanted.items()), None
    except Exception as exc:  # a nested or binary column no cast can read
        return empty, f"{path}: columns of the wrong type ({type(exc).__name__})"


def clean_samples(samples: pl.DataFrame) -> pl.DataFrame:
    """Reads with a time, in time order; a negative power or energy reads as missing."""
    return (samples.filter(pl.col("host_ns").is_not_null())
            .with_columns(pl.when(pl.col(c) >= 0).then(pl.col(c)).alias(c) for c in ("power_mw", "energy_mj"))
            .sort("host_ns"))


def clean_windows(windows: pl.DataFrame) -> pl.DataFrame:
    """Windows with both edges, the end after the start."""
    return windows.filter(pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null()
                          & (pl.col("end_ns") > pl.col("start_ns")))
