"""`kernelscope query SQL RUNS…`: SQL over many run directories at once (DuckDB over their Parquet and JSON files;
docs/dataset.md lists the views and their columns)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kernelscope.errors import UserError

HELP = "SQL over many runs at once: views runs, kernels, ops, ncu, steps"
DESCRIPTION = (
    "Run one SQL statement (DuckDB's dialect) over run directories: a run, a folder of runs, a glob, or a "
    "remote location DuckDB can read (s3://…, https://…). Views: runs (one row per run: model, device, "
    "batch, commit, date, timings, …), kernels, ops, ncu (the runs' tables), steps (device time per run, "
    "rank, phase and step), gemm_shapes and critical_path (every segment of every step's critical path), each "
    "with the run's id and metadata. Example: kernelscope query \"select run_id, "
    "device, tpot_ms from runs order by tpot_ms\" runs/"
)
FORMATS = ("table", "csv", "json", "parquet")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sql", metavar="SQL", help="one SQL statement over the views (see docs/dataset.md)")
    parser.add_argument("locations", nargs="+", metavar="RUNS",
                        help="run directories, folders of runs, globs (quoted), or remote locations")
    parser.add_argument("--format", choices=FORMATS, default="table", help="output format (default table)")
    parser.add_argument("--out", type=Path, metavar="FILE",
                        help="write the result to this new file instead of standard output (required for parquet)")


def run(args: argparse.Namespace, steps) -> int:
    if args.format == "parquet" and args.out is None:
        raise UserError("query --format parquet: give the file to write with --out")
    from kernelscope.load.dataset import fetch_rows, open_dataset, write_parquet
    from kernelscope.load.staging import new_file

    dataset = open_dataset([str(location) for location in args.locations])
    relation = dataset.query(args.sql)
    if args.format == "parquet":
        with new_file(args.out) as tmp:
            write_parquet(relation, str(tmp))
        print(args.out.resolve())
        return 0
    text = _render(args.format, relation.columns, fetch_rows(relation))
    if args.out is None:
        sys.stdout.write(text)
        return 0
    with new_file(args.out) as tmp:
        tmp.write_text(text, encoding="utf-8")
    print(args.out.resolve())
    return 0


def _render(fmt: str, columns: list[str], rows: list[tuple]) -> str:
    from kernelscope.report.query_results import csv_text, json_text, table_text

    return {"table": table_text, "csv": csv_text, "json": json_text}[fmt](columns, rows)
