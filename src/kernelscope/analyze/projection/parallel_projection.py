"""What-if for parallelism (docs/whatif.md, "Several GPUs"): a tensor-parallel run measured on R ranks, projected
onto N ranks joined by links of a given bandwidth. Per rank and step:

    compute(N)       = sharded · R/N + replicated       (kernel time on the target device, measured where it is
                                                         the measuring device)
    collective(N)    = α_kind + hop · (hops(N) − hops(R)) + bytes · f_kind(N) / (η_kind · link)

Sharded work is the kinds of work the tensor-parallel plan splits (data/projection.toml [parallel]: matrix
products and attention); everything else is repeated on every rank. Collectives keep their message sizes (tensor
parallelism all-reduces and all-gathers whole activations whatever N is) and their number per step. α_kind is
a kind of collective's latency on R ranks and η_kind the share of the link's bandwidth it reaches, both from a
straight line through the run's own data-movement times against their bus bytes (η a default where the run has
one message size), f_kind the nccl-tests bus factor, hops a ring's steps (all-reduce 2(N−1),
others N−1). Waiting for other ranks is left out (balanced ranks), and so is any overlap of collectives with
compute (tensor-parallel collectives sit between the layers' matrix products)."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from kernelscope.analyze.ranks.communication import bus_factor, is_collective
from kernelscope.analyze.structure.phases import step_counts


@dataclass(frozen=True)
class ParallelSettings:
    sharded_groups: tuple[str, ...]
    hop_latency_ns: float
    default_efficiency: float


@dataclass(frozen=True)
class ParallelRequest:
    """What `--set ranks=N,link=…,link_latency=…` asks: N ranks, links of `target_link` bytes/s one way; the
    measuring device's link for the calibration."""

    target_ranks: int
    target_link: float
    source_link: float | None
    hop_latency_ns: float | None = None  # None: data/whatif.toml's


def parallel_settings(data: dict) -> ParallelSettings:
    return ParallelSettings(sharded_groups=tuple(data.get("sharded_groups", ("matmul", "attention"))),
                            hop_latency_ns=float(data.get("hop_latency_ns", 1000.0)),
                            default_efficiency=float(data.get("default_efficiency", 0.75)))


@dataclass(frozen=True)
class LinkFit:
    """One kind of collective as the run measured it: latency α and bandwidth efficiency η on R ranks."""

    kind: str
    latency_ns: float
    efficiency: float
    efficiency_measured: bool  # False: the default (one message size, or no rising line through the times)
    instances: int


@dataclass
class ParallelProjection:
    source_ranks: int
    target_ranks: int
    source_link: float | None  # bytes/s, one direction
    target_link: float
    hop_latency_ns: float
    fits: list[LinkFit]
    phases: pl.DataFrame  # per phase, per rank and step (mean over ranks): measured and projected parts
    collectives: pl.DataFrame  # per phase, kind and message size: per step, measured, modelled on R, on N
    notes: list[str] = field(default_factory=list)


def hops(kind: str, ranks: int) -> int:
    """Steps of a ring collective over `ranks`."""
    if ranks <= 1:
        return 0
    return 2 * (ranks - 1) if kind == "all_reduce" else ranks - 1


def fit_links(instances: pl.DataFrame, source_ranks: int, source_link: float | None,
              settings: ParallelSettings) -> dict[str, LinkFit]:
    """α and η per kind of collective from the run's matched instances: a least-squares line of data-movement
    time against bus bytes (bytes × f(R)); its slope is 1 / (η · link), its intercept α. With one message size
    (or a slope the line cannot give) η is the default and α what remains of the mean time after the bytes."""
    fits: dict[str, LinkFit] = {}
    for (kind,), rows in instances.group_by("kind", maintain_order=True):
        rows = rows.filter(pl.col("transfer_ns").is_not_null())
        factor = bus_factor(kind, source_ranks)
        sized = rows.filter(pl.col("bytes").is_not_null())
        x = (sized["bytes"] * factor).to_numpy()
        y = sized["transfer_ns"].cast(pl.Float64).to_numpy()
        efficiency, measured = settings.default_efficiency, False
        if source_link and len(x) >= 2 and x.std() > 0:
            slope = float(((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum())  # ns per byte
            if slope > 0:
                efficiency, measured = min(1.0, 1e9 / (slope * source_link)), True
        mean_time = float(rows["transfer_ns"].mean())
        moving = float(x.mean()) / (efficiency * source_link) * 1e9 if source_link and len(x) else 0.0
        fits[kind] = LinkFit(kind, max(mean_time - moving, 0.0), efficiency, measured, rows.height)
    return fits


def collective_ns(kind: str, message_bytes: float | None, ranks: int, link: float, fit: LinkFit,
                  source_ranks: int, hop_latency_ns: float) -> float:
    """Modelled data movement of one collective on `ranks` ranks over `link` (bytes/s one way)."""
    latency = fit.latency_ns + hop_latency_ns * (hops(kind, ranks) - hops(kind, source_ranks))
    moving = (message_bytes or 0.0) * bus_factor(kind, ranks) / (fit.efficiency * link) * 1e9
    return max(latency, 0.0) + moving


def project_parallel(kernels: pl.DataFrame, on_source: pl.DataFrame, on_target: pl.DataFrame,
                     instances: pl.DataFrame, target_ranks: int, source_link: float | None, target_link: float,
                     settings: ParallelSettings) -> ParallelProjection:
    """kernels: the run's kernels (with `group`, `rank`); on_source / on_target: the same kernels projected on the
    measuring device and on the target (projection.project), whose ratio per phase carries the target device's
    change onto the measured compute time; instances: communication().instances."""
    source_ranks = kernels["rank"].n_unique()
    fits = fit_links(instances, source_ranks, source_link, settings)
    steps = step_counts(kernels)
    compute = _compute(kernels, on_source, on_target, source_ranks, target_ranks, settings, steps)
    comm, collectives = _communication(instances, fits, source_ranks, target_ranks, source_link, target_link,
                                       settings, steps)
    phases = compute.join(comm, on="phase", how="left").with_columns(
        pl.col("measured_transfer_ns", "measured_wait_ns", "modelled_source_ns", "baseline_comm_ns",
               "projected_comm_ns").fill_null(0.0))
    # Baseline: the same model on R ranks of the target (its device, its link), so that the speed-up compares
    # like with like: neither side has the waits the run measured.
    phases = phases.with_columns(
        (pl.col("measured_compute_ns") + pl.col("measured_transfer_ns") + pl.col("measured_wait_ns"))
        .alias("measured_total_ns"),
        (pl.col("baseline_sharded_ns") + pl.col("projected_replicated_ns") + pl.col("baseline_comm_ns"))
        .alias("baseline_total_ns"),
        (pl.col("projected_sharded_ns") + pl.col("projected_replicated_ns") + pl.col("projected_comm_ns"))
        .alias("projected_total_ns"),
    ).with_columns((pl.col("baseline_total_ns") / pl.col("projected_total_ns")).alias("speedup"))
    return ParallelProjection(source_ranks, target_ranks, source_link, target_link, settings.hop_latency_ns,
                              list(fits.values()), phases, collectives)


def _compute(kernels: pl.DataFrame, on_source: pl.DataFrame, on_target: pl.DataFrame, source_ranks: int,
             target_ranks: int, settings: ParallelSettings, steps: dict[str, int]) -> pl.DataFrame:
    """Per phase, per rank and step: measured compute (all but collectives), and on the target split into the
    sharded part (× R/N) and the replicated part, each scaled by the target device's model ratio."""
    not_comm = ~is_collective().fill_null(False)
    sharded = pl.col("group").is_in(list(settings.sharded_groups))
    ratio = (on_target.filter(not_comm).group_by("phase").agg(pl.col("projected_ns").sum().alias("_t"))
             .join(on_source.filter(not_comm).group_by("phase").agg(pl.col("projected_ns").sum().alias("_s")),
                   on="phase")
             .select("phase", pl.when(pl.col("_s") > 0).then(pl.col("_t") / pl.col("_s")).otherwise(1.0)
                     .alias("device_ratio")))
    table = kernels.filter(not_comm).group_by("phase").agg(
        pl.col("dur_ns").sum().cast(pl.Float64).alias("_all"),
        pl.col("dur_ns").filter(sharded).sum().cast(pl.Float64).alias("_sharded"),
    ).join(ratio, on="phase", how="left").with_columns(pl.col("device_ratio").fill_null(1.0))
    per = pl.col("phase").replace_strict(steps, default=1, return_dtype=pl.Float64) * source_ranks
    return table.with_columns(
        (pl.col("_all") / per).alias("measured_compute_ns"),
        (pl.col("_sharded") / per).alias("measured_sharded_ns"),
        (pl.col("_sharded") / per * pl.col("device_ratio")).alias("baseline_sharded_ns"),
        (pl.col("_sharded") / per * pl.col("device_ratio") * source_ranks / target_ranks).alias(
            "projected_sharded_ns"),
        ((pl.col("_all") - pl.col("_sharded")) / per * pl.col("device_ratio")).alias("projected_replicated_ns"),
    ).select("phase", "device_ratio", "measured_compute_ns", "measured_sharded_ns", "baseline_sharded_ns",
             "projected_sharded_ns", "projected_replicated_ns")


def _communication(instances: pl.DataFrame, fits: dict[str, LinkFit], source_ranks: int, target_ranks: int,
                   source_link: float | None, target_link: float, settings: ParallelSettings,
                   steps: dict[str, int]) -> tuple[pl.DataFrame, pl.DataFrame]:
    empty = pl.DataFrame(schema={"phase": pl.String, "measured_transfer_ns": pl.Float64,
                                 "measured_wait_ns": pl.Float64, "modelled_source_ns": pl.Float64,
                                 "baseline_comm_ns": pl.Float64, "projected_comm_ns": pl.Float64})
    if instances.height == 0:
        return empty, pl.DataFrame()

    def on(ranks: int, link: float | None) -> pl.Expr:
        if not link:
            return pl.lit(None, dtype=pl.Float64)
        return pl.struct("kind", "bytes").map_elements(
            lambda r: collective_ns(r["kind"], r["bytes"], ranks, link, fits[r["kind"]], source_ranks,
                                    settings.hop_latency_ns), return_dtype=pl.Float64)

    per = pl.col("phase").replace_strict(steps, default=1, return_dtype=pl.Float64) * source_ranks
    modelled = instances.with_columns(on(source_ranks, source_link).alias("_source"),
                                      on(source_ranks, target_link).alias("_baseline"),
                                      on(target_ranks, target_link).alias("_target"))
    collectives = (
        modelled.group_by("phase", "kind", "bytes")
        .agg(pl.len().alias("_n"), pl.col("transfer_ns").mean().alias("measured_transfer_ns"),
             pl.col("wait_ns").mean().alias("measured_wait_ns"), pl.col("_source").mean().alias("modelled_source_ns"),
             pl.col("_baseline").mean().alias("baseline_ns"), pl.col("_target").mean().alias("projected_ns"))
        .with_columns((pl.col("_n") / per).alias("per_step"))
        .drop("_n").sort("phase", "kind", "bytes", nulls_last=True)
    )
    by_phase = modelled.group_by("phase").agg(
        pl.col("transfer_ns").sum().cast(pl.Float64).alias("measured_transfer_ns"),
        pl.col("wait_ns").sum().cast(pl.Float64).alias("measured_wait_ns"),
        pl.col("_source").sum().alias("modelled_source_ns"), pl.col("_baseline").sum().alias("baseline_comm_ns"),
        pl.col("_target").sum().alias("projected_comm_ns"),
    ).with_columns((pl.col(c) / per) for c in ("measured_transfer_ns", "measured_wait_ns", "modelled_source_ns",
                                               "baseline_comm_ns", "projected_comm_ns"))
    return by_phase, collectives
