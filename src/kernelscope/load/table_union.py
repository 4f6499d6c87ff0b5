"""The runs' table files of one kind (every kernels.parquet, …) as one SQL source with the run format's columns.

Files that share their columns (names and types, in order) are read by one `read_parquet` each; the groups are
joined by UNION ALL, every branch giving the same columns (the run format's, typed, null or their default where a
file lacks them; then any other column some file holds). DuckDB then opens a file only while it scans it: the
columns of every file are known beforehand (read from all footers in one query, or from the dataset cache when
the file is unchanged), so no query has to read every footer to bind, as `union_by_name` does.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

    from kernelscope.load.dataset_cache import DatasetCache, Identity

FILE = "__kernelscope_file"  # the file's number (its place in the list given), joined to its run
Columns = list[tuple[str, str]]
_GLOB_CHARACTER = re.compile(r"[*?\[]")


def file_columns(con: duckdb.DuckDBPyConnection, files: list[str], cache: DatasetCache | None,
                 identities: dict[str, Identity | None]) -> dict[str, Columns]:
    """Every file's top-level columns (name, DuckDB type), from the cache where the file's identity (taken when it
    was found, before it is read) is the one they were read at."""
    out: dict[str, Columns] = {}
    unread = []
    for f in files:
        cached = cache.columns(f, identities.get(f)) if cache is not None else None
        if cached is None:
            unread.append(f)
        else:
            out[f] = cached
    if unread:
        rows = con.execute("select file_name, name, duckdb_type, num_children from parquet_schema(?)",
                           [[literal_pattern(f) for f in unread]]).fetchall()
        for f, columns in _top_level(rows).items():
            out[f] = columns
        for f in unread:
            out.setdefault(f, [])
            if cache is not None:
                cache.put_columns(f, identities.get(f), out[f])
    return out


def _top_level(rows: list[tuple]) -> dict[str, Columns]:
    """The top-level columns of each file from parquet_schema's rows (a depth-first listing of each file's schema
    tree: the root, then every element with its number of children)."""
    out: dict[str, Columns] = defaultdict(list)
    remaining: dict[str, list[int]] = {}  # per file: the children still to come at each open level
    for file, name, kind, children in rows:
        stack = remaining.get(file)
        if stack is None:  # the root
            remaining[file] = [children or 0]
            out[file]  # noqa: B018 - a file of no columns is listed too
            continue
        while stack and stack[-1] == 0:
            stack.pop()
        if not stack:
            continue
        if len(stack) == 1:
            out[file].append((name, kind or ""))
        stack[-1] -= 1
        if children:
            stack.append(children)
    return dict(out)


def union_sql(columns: dict[str, Columns], schema: dict[str, str], defaults: dict[str, str],
              skip: frozenset[str], first: int = 0) -> tuple[str, list[str], list[str]]:
    """One SELECT over every file in `columns`, the names of the columns it gives and the files in the order of
    their numbers: the schema's columns (name → DuckDB type; cast, or null, or `defaults[name]` where absent), then
    the other columns of the files (names matched without regard to case, as SQL does; the first spelling met is
    kept; `skip` left out), then FILE: the file's number, `first` for the first file of the returned order."""
    groups: dict[tuple, list[str]] = defaultdict(list)
    for file, cols in columns.items():
        groups[tuple(cols)].append(file)
    lowered = {name.lower() for name in schema}
    extras: dict[str, str] = {}
    for cols in groups:
        for name, _ in cols:
            key = name.lower()
            if key not in lowered and key not in extras and name not in skip and key != FILE.lower():
                extras[key] = name
    branches, order = [], []
    for cols, files in groups.items():
        present = {name.lower(): name for name, _ in reversed(cols)}
        selected = []
        for name, kind in schema.items():
            value = f"t.{ident(present[name.lower()])}::{kind}" if name.lower() in present else f"NULL::{kind}"
            if name in defaults:
                value = f"coalesce({value}, {defaults[name]})"
            selected.append(value)
        selected += [f"t.{ident(present[key])}" if key in present else "NULL" for key in extras]
        # file_index: the file's place in this read_parquet's list; a group's files have consecutive numbers.
        selected.append(f"(t.file_index + {first + len(order)})::INTEGER")
        patterns = [literal_pattern(f) for f in files]
        branches.append(f"select {', '.join(selected)} from read_parquet({sql_list(patterns)}) t")
        order += files
    names = [*schema, *extras.values(), FILE]
    header = ", ".join(f"{ident(n)}" for n in names)
    # The first branch names the columns (UNION ALL matches the rest by position).
    head = f"select * from ({branches[0]}) as b({header})"
    return " union all ".join([head, *branches[1:]]), names, order


def literal_pattern(path: str) -> str:
    """`path` as a glob pattern that matches that one file: DuckDB globs every file name it is given, so a run
    folder named `a[1]` or `b*` would read other files (or several), and the files' numbers would shift."""
    if path.startswith(("http://", "https://")):  # never globbed (and `?` starts a query string there)
        return path
    return _GLOB_CHARACTER.sub(r"[\g<0>]", path)


def ident(name: str) -> str:
    """A column name as a quoted SQL identifier: a name read from a run's file is data, never SQL."""
    return '"' + name.replace('"', '""') + '"'


def sql_list(items: list[str]) -> str:
    return "[" + ", ".join("'" + item.replace("'", "''") + "'" for item in items) + "]"
