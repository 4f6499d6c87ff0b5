"""SQLite files given as input (Nsight Systems exports, rocprofv3 databases), opened so that nothing is written to
them or beside them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from kernelscope.errors import UserError


def connect_read_only(path: Path) -> sqlite3.Connection:
    """Read-only and immutable: SQLite then takes no lock and makes no -shm/-wal file beside a write-ahead-log
    database. A database whose -wal file still holds rows (its writer did not finish) is refused: read without
    the log it would lack them."""
    journal = path.with_name(path.name + "-wal")
    if journal.is_file() and journal.stat().st_size > 0:
        raise UserError(f"{path}: an unfinished write-ahead log ({journal.name}) lies beside it; let the program "
                        f"that writes it finish, or export again")
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
