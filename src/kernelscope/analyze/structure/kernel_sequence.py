"""A rank's device kernels in launch order, as the columns structure inference reads (positions index `order`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from kernelscope.analyze.costs.catalog import classify_frame
from kernelscope.analyze.structure.layer_modules import is_attention, is_matrix_work, is_norm

_EMBEDDING_OPS = ("aten::embedding", "aten::index_select")


@dataclass(frozen=True)
class KernelSequence:
    order: np.ndarray  # kernel rows in launch order: position k is row order[k]
    codes: np.ndarray  # kernel name as a code (its dense rank among the names, from 1)
    matrix: np.ndarray  # GEMM or attention work
    attention: np.ndarray  # the attention kernel itself
    norm: np.ndarray  # a norm's kernel
    same_op: np.ndarray  # launched by the same framework op as the kernel before (or, without ops, a split-K reduction)
    embedding: np.ndarray  # an embedding lookup (its op, or its name)
    category: list[str | None]
    op: list[str | None]
    op_row: np.ndarray  # op_id (-1: none)
    dur: np.ndarray
    threads: np.ndarray  # threads launched (grid × block; 0 where not recorded)
    launch: np.ndarray  # launch call start (-1: unknown)
    pause: np.ndarray  # the host's time from the launch before (meaningful where every launch is known)
    start: np.ndarray
    end: np.ndarray

    def __len__(self) -> int:
        return len(self.order)


def _each_distinct(test, *columns: list) -> np.ndarray:
    """test(*row) for each row of `columns`, computed once per distinct row: a trace repeats a few hundred kernels
    and ops millions of times, and the tests match regular expressions."""
    seen: dict = {}
    return np.array([seen[row] if row in seen else seen.setdefault(row, test(*row)) for row in zip(*columns, strict=True)],
                    dtype=bool)


def kernel_sequence(kernels: pl.DataFrame) -> KernelSequence:
    """Launch order: by launch call (kernels without one by their start), then start, then row."""
    start = kernels["start_ns"].fill_null(0).to_numpy()
    launch = kernels["launch_start_ns"].fill_null(-1).to_numpy()
    key = np.where(launch >= 0, launch, start)
    order = np.lexsort((np.arange(kernels.height), start, key))
    codes = kernels.select(pl.col("name").rank("dense")).to_series().to_numpy().astype(np.int64)[order]
    catalog = classify_frame(kernels["name"])
    by_name = dict(zip(catalog["name"].to_list(), catalog["category"].to_list(), strict=True))
    names = kernels["name"].to_list()
    op_all = kernels["op"].to_list()
    category = [by_name.get(names[i]) for i in order]
    op = [op_all[i] for i in order]
    matrix = _each_distinct(is_matrix_work, category, op)
    attention = _each_distinct(is_attention, category, op)
    # (a fused Triton kernel's name lists the ops its result came from: `…_add_embedding_mean…` is any kernel on the
    # residual stream of a compiled model, not a lookup)
    looks = kernels.select(
        (pl.col("op").is_in(list(_EMBEDDING_OPS)) | (pl.col("top_op") == "aten::embedding")
         | pl.col("name").str.contains("indexSelect", literal=True)).fill_null(False).alias("embedding"),
        (pl.col("name").str.contains("splitKreduce", literal=True)
         | pl.col("name").str.contains("splitK_reduce", literal=True)).fill_null(False).alias("split_k"))
    embedding = looks["embedding"].to_numpy()[order] & ~matrix
    op_row = kernels["op_id"].fill_null(-1).to_numpy()[order]
    split_k = looks["split_k"].to_numpy()[order]
    same_op = np.zeros(len(order), dtype=bool)
    # (kernels replayed from one CUDA graph share its launch's op: only a matrix op's own kernels count as one)
    matrix_op = _each_distinct(lambda o: bool(o) and is_matrix_work(None, o) and not is_attention(None, o), op)
    same_op[1:] = ((op_row[1:] == op_row[:-1]) & (op_row[1:] >= 0) & matrix_op[1:] & matrix[1:] & matrix[:-1]) \
        | (split_k[1:] & matrix[:-1])
    dur = kernels["dur_ns"].fill_null(0).to_numpy()
    threads = kernels.select(pl.col("grid_x") * pl.col("grid_y") * pl.col("grid_z") * pl.col("block_x")
                             * pl.col("block_y") * pl.col("block_z")).to_series().fill_null(0).to_numpy()
    return KernelSequence(order=order, codes=codes, matrix=matrix, attention=attention, embedding=embedding, category=category, op=op,
                          op_row=op_row, same_op=same_op,
                          norm=_each_distinct(is_norm, category, op, [names[i] for i in order]), dur=dur[order], threads=threads[order],
                          launch=launch[order], pause=np.diff(launch[order], prepend=launch[order][:1]),
                          start=start[order], end=(start + dur)[order])
