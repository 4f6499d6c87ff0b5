"""Communication across ranks: every collective kernel (NCCL, RCCL, symmetric memory: catalog category
`communication`) matched with its counterparts on the other ranks, how long each rank spent in it waiting for the
last one to arrive versus moving data, the bus bandwidth it reached against the link, and per rank and phase the
share of device time in communication and how much of it overlapped compute.

Matching: on each rank, the n-th collective of a kind (its process group and collective, from the kernel's args
where the trace records them, else its kernel name) is the n-th on every other rank; NCCL issues collectives of
a group in the same order on every rank, which is what makes this exact. An instance found on fewer ranks than
run the group (a trace window that cut it) is left unmatched and counted.

Per instance: the last rank to arrive starts the data movement, so rank r waits (last start − r's start) and
moves data for (its end − last start). Why it waits: since each rank's previous collective ended, the last rank
may have had more device work to do (the ranks' loads differ: experts receiving unequal tokens, unequal shards) or
the same work launched later (its GPU idle: the host was late). The part of r's wait that the last rank's extra
busy time explains, (last rank's compute busy time − r's) clipped to [0, wait], is `imbalance_ns`; the rest is
the last rank arriving late with no more work. Message bytes come from the elements the trace records per collective
(`In/Out msg nelems` and `dtype`, written by torch ≥ 2.4 for NCCL kernels) and follow nccl-tests' conventions;
bus bandwidth is algorithm bandwidth (bytes / transfer time) times the collective's factor (all-reduce
2(n−1)/n; all-gather, reduce-scatter, all-to-all (n−1)/n; others 1), comparable to one direction of the link."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl

from kernelscope import ranges
from kernelscope.analyze.structure.layers import module_in_layer, with_layer_columns
from kernelscope.analyze.structure.phases import step_counts

COMMUNICATION = "communication"
# Expert-parallel token exchange (DeepEP and libraries like it): their dispatch and combine kernels move tokens
# between ranks, so they are collectives too, though the catalog files them under the MoE step they serve.
EXCHANGE_LIBRARIES = ("DeepEP",)
EXCHANGE_CATEGORIES = ("MoE dispatch", "MoE combine")

# torch's dtype names in the trace → bytes per element.
DTYPE_BYTES = {"BFloat16": 2, "Half": 2, "Float": 4, "Double": 8, "Float8_e4m3fn": 1, "Float8_e5m2": 1,
               "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1, "Byte": 1, "Char": 1, "Bool": 1, "Short": 2, "Int": 4,
               "Long": 8, "ComplexFloat": 8, "ComplexDouble": 16}
_KIND_ALIASES = {"allreduce": "all_reduce", "all_reduce": "all_reduce", "allgather": "all_gather",
                 "all_gather": "all_gather", "_allgather_base": "all_gather", "allgather_into_tensor_coalesced":
                 "all_gather", "reducescatter": "reduce_scatter", "reduce_scatter": "reduce_scatter",
                 "_reduce_scatter_base": "reduce_scatter", "alltoall": "all_to_all", "all_to_all": "all_to_all",
                 "alltoall_base": "all_to_all", "broadcast": "broadcast", "reduce": "reduce", "send": "send",
                 "recv": "recv", "sendrecv": "send_recv", "gather": "gather", "scatter": "scatter"}
_NAME_KINDS = [("allreduce", "all_reduce"), ("all_reduce", "all_reduce"), ("allgather", "all_gather"),
               ("all_gather", "all_gather"), ("reducescatter", "reduce_scatter"), ("reduce_scatter", "reduce_scatter"),
               ("alltoall", "all_to_all"), ("all_to_all", "all_to_all"), ("broadcast", "broadcast"),
               ("sendrecv", "send_recv"), ("send", "send"), ("recv", "recv"), ("reduce", "reduce"),
               ("dispatch", "dispatch"), ("combine", "combine")]


def collective_kind(collective: str | None, name: str) -> str:
    """all_reduce, all_gather, … from the trace's collective name, else from the kernel's name."""
    if collective:
        key = collective.strip().lower()
        if key in _KIND_ALIASES:
            return _KIND_ALIASES[key]
    flat = re.sub(r"[^a-z_]", "", name.lower())
    for needle, kind in _NAME_KINDS:
        if needle in flat:
            return kind
    return "other"


def bus_factor(kind: str, ranks: int) -> float:
    if ranks <= 1:
        return 1.0
    if kind == "all_reduce":
        return 2 * (ranks - 1) / ranks
    if kind in ("all_gather", "reduce_scatter", "all_to_all", "dispatch", "combine"):
        return (ranks - 1) / ranks
    return 1.0


@dataclass
class Communication:
    """instances: one row per matched collective and rank. by_collective: per phase, kind and message size.
    by_rank: per rank and phase. link_peak: one direction of the device's GPU-to-GPU link (bytes/s), if known."""

    instances: pl.DataFrame
    by_collective: pl.DataFrame
    by_rank: pl.DataFrame
    unmatched: int
    ranks: int
    link_peak: float | None
    link: str | None
    by_layer: pl.DataFrame | None = None  # per phase and layer type (runs whose layers are known)


def communication(kernels: pl.DataFrame, link_bandwidth: float | None = None,
                  link: str | None = None, layer_types: dict[int, str] | None = None) -> Communication | None:
    """None when the run has no communication kernels."""
    comm = kernels.filter(is_collective())
    if comm.height == 0 or comm["start_ns"].is_null().all():
        return None
    ranks = sorted(kernels["rank"].unique().to_list())
    comm = comm.filter(pl.col("start_ns").is_not_null()).with_columns(
        pl.struct("collective", "name").map_elements(lambda s: collective_kind(s["collective"], s["name"]),
                                                     return_dtype=pl.String).alias("kind"),
        pl.col("process_group").fill_null("").alias("group"),
        # Where in the model: the module within its layer (o_proj's all-reduce is one row for every layer).
        pl.when(pl.col("layer").is_not_null()).then(module_in_layer()).otherwise(pl.col("module"))
        .fill_null("").alias("where"),
    ).sort("rank", "start_ns")
    comm = comm.with_columns(pl.int_range(pl.len()).over("rank", "group", "kind").alias("seq"))
    instances = _with_imbalance(_matched(comm, len(ranks)), kernels, comm)
    unmatched = comm.height - instances.height
    peak = link_bandwidth / 2 if link_bandwidth else None
    return Communication(instances=instances, by_collective=_by_collective(instances, peak),
                         by_rank=_by_rank(kernels, comm, instances), unmatched=unmatched, ranks=len(ranks),
                         link_peak=peak, link=link, by_layer=_by_layer(kernels, instances, layer_types or {}))


def _by_layer(kernels: pl.DataFrame, instances: pl.DataFrame, layer_types: dict[int, str]) -> pl.DataFrame | None:
    """Per phase and layer type (and outside the layers): layers, time in collectives per rank and step, its
    share of that part's device time, and the share of it spent waiting. None without layer numbers."""
    if kernels["layer"].is_null().all():
        return None
    ranks = kernels["rank"].n_unique()
    steps = step_counts(kernels)
    typed = with_layer_columns(kernels.filter(pl.col("phase") != ranges.UNKNOWN), layer_types)
    waits = with_layer_columns(instances, layer_types).group_by("phase", "layer_type").agg(
        pl.col("wait_ns").sum().alias("_wait"))
    table = typed.group_by("phase", "layer_type").agg(
        pl.col("layer").drop_nulls().n_unique().alias("layers"),
        pl.col("dur_ns").sum().alias("_all"),
        pl.col("dur_ns").filter(is_collective()).sum().alias("_comm"),
    ).filter(pl.col("_comm") > 0).join(waits, on=["phase", "layer_type"], how="left")
    per = pl.col("phase").replace_strict(steps, default=1, return_dtype=pl.Float64) * ranks
    return table.with_columns(
        (pl.col("_comm") / per).alias("comm_per_step_ns"),
        (100.0 * pl.col("_comm") / pl.col("_all")).alias("comm_pct"),
        (100.0 * pl.col("_wait").fill_null(0) / pl.col("_comm")).alias("wait_pct"),
    ).drop("_all", "_comm", "_wait").sort("phase", "layer_type")


def is_collective() -> pl.Expr:
    """Kernels that communicate: the catalog's communication category, and expert-parallel token exchange."""
    exchange = pl.col("library").is_in(list(EXCHANGE_LIBRARIES)) & pl.col("category").is_in(list(EXCHANGE_CATEGORIES))
    return (pl.col("category") == COMMUNICATION) | exchange


def _matched(comm: pl.DataFrame, ranks: int) -> pl.DataFrame:
    """Rows of instances found on every rank, with wait and transfer per rank and the message bytes."""
    if ranks < 2:
        return comm.head(0).with_columns(pl.lit(None, pl.Int64).alias("wait_ns"),
                                         pl.lit(None, pl.Int64).alias("transfer_ns"),
                                         pl.lit(None, pl.Float64).alias("bytes"))
    key = ["group", "kind", "seq"]
    dtype_bytes = pl.col("msg_dtype").replace_strict(DTYPE_BYTES, default=None, return_dtype=pl.Int64)
    elems = (pl.when(pl.col("kind") == "all_gather").then(pl.col("msg_out_elems"))
             .otherwise(pl.col("msg_in_elems")))
    out = (
        comm.with_columns(pl.len().over(key).alias("on_ranks"))
        .filter(pl.col("on_ranks") == ranks)
        .with_columns(pl.col("start_ns").max().over(key).alias("last_start_ns"))
        .with_columns(
            (pl.col("last_start_ns") - pl.col("start_ns")).alias("wait_ns"),
            (pl.col("start_ns") + pl.col("dur_ns") - pl.col("last_start_ns")).clip(lower_bound=0).alias(
                "transfer_ns"),
            (elems * dtype_bytes).cast(pl.Float64).alias("bytes"),
        )
    )
    return out.drop("on_ranks", "last_start_ns")


def _with_imbalance(instances: pl.DataFrame, kernels: pl.DataFrame, comm: pl.DataFrame) -> pl.DataFrame:
    """`instances` with `imbalance_ns`: the part of each rank's wait that the last-arriving rank's extra compute
    explains. Per rank, a collective's work window runs from the end of the rank's previous collective (any kind)
    in the same phase, or from the phase's first kernel on that rank, to the collective's start; its busy time is
    the union of the rank's other kernels inside it."""
    if instances.height == 0:
        return instances.with_columns(pl.lit(None, pl.Int64).alias("imbalance_ns"))
    busy: dict[int, int] = {}  # kernel_id of a collective → compute busy time in its window on its rank
    timed = (kernels.select("rank", "phase", "start_ns", "dur_ns", is_collective().alias("_collective"))
             .filter(pl.col("start_ns").is_not_null()))
    lanes = timed.partition_by("rank", "phase", as_dict=True)
    for (rank, phase), mine in comm.group_by("rank", "phase"):
        lane = lanes[(rank, phase)]
        mine = mine.sort("start_ns")
        arrive = mine["start_ns"].to_numpy()
        # Each window opens where the rank's earlier collectives have all ended (the phase's first kernel before
        # any), and never after the collective itself starts.
        ended = np.maximum.accumulate(arrive + mine["dur_ns"].to_numpy())
        opens = np.maximum(int(lane["start_ns"].min()), np.concatenate(([np.iinfo(np.int64).min], ended[:-1])))
        opens = np.minimum(opens, arrive)
        covered = _covered_before(_merged(lane.filter(~pl.col("_collective"))))
        busy.update(zip(mine["kernel_id"].to_list(), (covered(arrive) - covered(opens)).tolist(), strict=True))
    key = ["group", "kind", "seq"]
    work = pl.col("kernel_id").replace_strict(busy, default=None, return_dtype=pl.Int64)
    last_work = work.sort_by("start_ns", descending=True).first().over(key)
    return instances.with_columns(
        pl.min_horizontal(pl.max_horizontal(last_work - work, pl.lit(0)), pl.col("wait_ns")).alias("imbalance_ns"))


def _covered_before(merged: tuple[np.ndarray, np.ndarray, np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """For merged intervals (_merged), the length of their union before each of many times, at once."""
    starts, ends, covered = merged

    def before(times: np.ndarray) -> np.ndarray:
        if len(starts) == 0:
            return np.zeros(len(times), dtype=np.int64)
        i = np.searchsorted(starts, times, side="right")  # intervals starting at or before each time
        last = np.maximum(i - 1, 0)
        inside = np.minimum(times, ends[last]) - starts[last]
        return np.where(i == 0, 0, covered[last] + inside)
    return before


def _merged(kernels: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The kernels' intervals merged into disjoint ones (starts, ends) and the covered length before each."""
    if kernels.height == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(1, dtype=np.int64)
    starts = kernels["start_ns"].to_numpy()
    ends = starts + kernels["dur_ns"].to_numpy()
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    running = np.maximum.accumulate(ends)
    new = np.empty(len(starts), dtype=bool)
    new[0] = True
    new[1:] = starts[1:] > running[:-1]
    group = np.cumsum(new) - 1
    merged_start = starts[new]
    merged_end = np.zeros(len(merged_start), dtype=np.int64)
    np.maximum.at(merged_end, group, ends)
    return merged_start, merged_end, np.concatenate([[0], np.cumsum(merged_end - merged_start)])


def _by_collective(instances: pl.DataFrame, peak: float | None) -> pl.DataFrame:
    """Per phase, kind and message size: instances, mean time per rank, mean wait and transfer, bus bandwidth."""
    if instances.height == 0:
        return pl.DataFrame()
    ranks = instances["rank"].n_unique()
    per_instance = instances.group_by("phase", "group", "kind", "seq", "bytes").agg(
        pl.col("dur_ns").mean().alias("dur_ns"), pl.col("wait_ns").mean().alias("wait_ns"),
        pl.col("transfer_ns").mean().alias("transfer_ns"), pl.col("wait_ns").max().alias("max_wait_ns"),
        pl.col("where").mode().sort().first().alias("where"))  # ties: the first by name
    grouped = per_instance.group_by("phase", "kind", "bytes", "where").agg(
        pl.len().alias("instances"), pl.col("dur_ns").sum().alias("total_ns"),
        pl.col("dur_ns").mean().alias("mean_ns"), pl.col("wait_ns").mean().alias("mean_wait_ns"),
        pl.col("transfer_ns").mean().alias("mean_transfer_ns"), pl.col("max_wait_ns").max().alias("max_wait_ns"),
        pl.col("transfer_ns").sum().alias("transfer_total_ns"),
    )
    factor = pl.col("kind").map_elements(lambda k: bus_factor(k, ranks), return_dtype=pl.Float64)
    algbw = pl.col("bytes") * pl.col("instances") / (pl.col("transfer_total_ns") * 1e-9)
    grouped = grouped.with_columns(
        pl.when(pl.col("transfer_total_ns") > 0).then(algbw * factor).otherwise(None).alias("bus_bytes_per_s"))
    grouped = grouped.with_columns(
        (pl.col("bus_bytes_per_s") / peak * 100 if peak else pl.lit(None, pl.Float64)).alias("link_pct"),
        (pl.col("total_ns") / pl.col("total_ns").sum().over("phase") * 100).alias("time_pct"))
    return grouped.drop("transfer_total_ns").sort(["phase", "total_ns", "kind", "bytes", "where"],
                                                  descending=[False, True, False, False, False], nulls_last=True)


def _by_rank(kernels: pl.DataFrame, comm: pl.DataFrame, instances: pl.DataFrame) -> pl.DataFrame:
    """Per rank and phase: device time, time in communication kernels, of it waiting, and the part that ran
    while a compute kernel of the same rank was running (overlap)."""
    rows = []
    for (rank, phase), group in kernels.filter(pl.col("start_ns").is_not_null()).group_by(
            "rank", "phase", maintain_order=True):
        is_comm = group.select(is_collective()).to_series()
        mine = group.filter(is_comm)
        compute = group.filter(~is_comm & (pl.col("kind") == "kernel"))
        waits = instances.filter((pl.col("rank") == rank) & (pl.col("phase") == phase))
        comm_ns = int(mine["dur_ns"].sum())
        rows.append({
            "rank": rank, "phase": phase, "device_time_ns": int(group["dur_ns"].sum()), "comm_ns": comm_ns,
            "wait_ns": int(waits["wait_ns"].sum()) if waits.height else None,
            "imbalance_ns": int(waits["imbalance_ns"].sum()) if waits.height else None,
            "overlap_ns": _overlap(mine, compute) if comm_ns else 0,
            "collectives": mine.height,
        })
    table = pl.DataFrame(rows, schema={"rank": pl.Int64, "phase": pl.String, "device_time_ns": pl.Int64,
                                        "comm_ns": pl.Int64, "wait_ns": pl.Int64, "imbalance_ns": pl.Int64,
                                        "overlap_ns": pl.Int64, "collectives": pl.Int64})
    return table.filter(pl.col("collectives") > 0).with_columns(
        (pl.col("comm_ns") / pl.col("device_time_ns") * 100).alias("comm_pct"),
        (pl.col("wait_ns") / pl.col("comm_ns") * 100).alias("wait_pct"),
        # Of the wait, the share the last rank's extra work explains (null where the rank never waited).
        pl.when(pl.col("wait_ns") > 0).then(pl.col("imbalance_ns") / pl.col("wait_ns") * 100).alias("imbalance_pct"),
        (pl.col("overlap_ns") / pl.col("comm_ns") * 100).alias("overlap_pct"),
    ).sort("phase", "rank")


def _overlap(comm: pl.DataFrame, compute: pl.DataFrame) -> int:
    """Nanoseconds of communication kernels during which some compute kernel ran (compute merged into disjoint
    intervals first)."""
    if compute.height == 0:
        return 0
    covered = _covered_before(_merged(compute))
    starts = comm["start_ns"].to_numpy()
    return int((covered(starts + comm["dur_ns"].to_numpy()) - covered(starts)).sum())
