"""Findings: rules (data/findings.toml), each a condition on the run's numbers and a message with them.

Every number a rule may use is a Metric that records where it comes from: a report table (the CSV of the same
name under report/tables/), the rows it takes and the column it sums or reads, or the metrics it is derived
from. A rule whose condition does not hold, or that needs a number the run does not have, prints nothing."""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from kernelscope import ranges
from kernelscope.analyze.ranks.ranks import rank_count
from kernelscope.contracts.run_info import RunInfo
from kernelscope.load import knowledge

HOST_CLASSES = ("launch", "host")  # critical-path classes of the host's time (analyze/paths/path_walk.py)
FUSABLE = ["elementwise", "activation", "norm", "rope", "copy/cast", "concat", "softmax"]
OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "==": operator.eq, "!=": operator.ne}
_CONDITION = re.compile(r"^\s*(\w+)\s*(>=|<=|==|!=|>|<)\s*(\S+)\s*$")


@dataclass(frozen=True)
class Metric:
    value: float | str | None
    table: str | None = None  # report table it comes from
    column: str | None = None
    rows: dict[str, list[Any]] | None = None  # row filter: column → accepted values
    agg: str = "sum"  # sum | first | count_share
    derived_from: tuple[str, ...] = ()
    formula: str | None = None


@dataclass
class Finding:
    id: str
    kind: str  # bottleneck | observation
    numbers: dict[str, Metric] = field(default_factory=dict)
    rule: dict[str, Any] = field(default_factory=dict)


def load_rules() -> list[dict[str, Any]]:
    return knowledge.findings()


def _from_table(df: pl.DataFrame | None, table: str, column: str, rows: dict[str, list[Any]] | None = None,
                agg: str = "sum") -> Metric:
    if df is None or df.height == 0 or column not in df.columns:
        return Metric(None, table, column, rows, agg)
    selected = df
    for key, values in (rows or {}).items():
        selected = selected.filter(pl.col(key).is_in(values))
    if agg == "first":
        value = selected[column][0] if selected.height else None
    else:
        value = float(selected[column].sum()) if selected.height else 0.0
    return Metric(value, table, column, rows, agg)


def _derived(name: str, value: float | None, parts: tuple[str, ...], formula: str) -> Metric:
    return Metric(value, derived_from=parts, formula=formula)


def compute_metrics(tables: Any, info: RunInfo) -> dict[str, Metric]:
    """Numbers the rules can use. `tables` is an analyze.report_tables.ReportTables."""
    m: dict[str, Metric] = {}
    batch_size = info.workload.batch_size if info.workload is not None else None
    m["batch_size"] = Metric(batch_size, formula="run.json workload.batch_size")
    # Words of accelerators (tensor cores, GPU idle) hold only where the work ran on one.
    m["on_accelerator"] = Metric(int(not info.is_cpu), formula="1 unless run.json hardware is the CPU, else 0")
    m["tpot_ms"] = Metric(info.plain_timings.tpot_ms, formula="run.json timings.plain.tpot_ms")
    # Runs timed without the profiler (kernelscope's own) judge host overhead by their TPOT; others by idle gaps.
    m["timed_without_profiler"] = Metric(int(info.plain_timings.tpot_ms is not None),
                                         formula="1 if run.json timings.plain.tpot_ms is set, else 0")
    # The fastest timed run: a finding built on the TPOT holds only if it holds for that run too (runs written
    # before every run's value was kept fall back to the median).
    all_tpot = info.plain_timings.tpot_ms_all if info.timings is not None else []
    m["tpot_ms_min"] = Metric(min(all_tpot) if all_tpot else info.plain_timings.tpot_ms,
                              formula="min of run.json timings.plain.tpot_ms_all (else tpot_ms)")
    stages = [p for p in tables.phases["phase"].to_list() if p not in (*ranges.STEP_PHASES, ranges.UNKNOWN)]
    for phase in (ranges.PREFILL, ranges.DECODE, *stages):
        m.update(_phase_metrics(tables, phase))
        m.update(_communication_metrics(tables, phase))
        m.update(_path_host_op_metrics(tables, phase))
    m.update(_per_rank(m, tables, (ranges.PREFILL, ranges.DECODE, *stages)))
    m.update(_stage_metrics(tables.phases, stages))
    m.update(_decode_host_metrics(m))
    m.update(_measured_metrics(tables))
    return m


def _phase_metrics(tables: Any, phase: str) -> dict[str, Metric]:
    """A phase's shares by kind of work, its attention kernel, its roofline classes and its per-step figures."""
    of_phase = tables.by_phase.get(phase)
    m = _mix_metrics(phase, of_phase)
    classes = of_phase.classes if of_phase is not None else None
    c = f"roofline_classes_{phase}"
    m[f"{phase}_memory_bound_pct"] = _from_table(classes, c, "time_pct", {"roofline_class": ["memory-bound"]})
    m[f"{phase}_latency_bound_pct"] = _from_table(classes, c, "time_pct", {"roofline_class": ["latency-bound"]})
    m[f"{phase}_compute_bound_pct"] = _from_table(classes, c, "time_pct", {"roofline_class": ["compute-bound"]})
    far = _from_table(of_phase.roofline_kernels if of_phase is not None else None, f"roofline_kernels_{phase}",
                      "dur_ns", {"compute_side_far": [True]})
    phase_ns = _from_table(tables.phases, "phases", "device_time_ns", {"phase": [phase]}, agg="first")
    m[f"{phase}_compute_far_ns"] = far
    m[f"{phase}_device_ns"] = phase_ns
    share = 100.0 * far.value / phase_ns.value if far.value is not None and phase_ns.value else None
    m[f"{phase}_compute_far_pct"] = _derived(f"{phase}_compute_far_pct", share,
                                             (f"{phase}_compute_far_ns", f"{phase}_device_ns"),
                                             f"100 × {phase}_compute_far_ns / {phase}_device_ns")
    row = {"phase": [phase]}
    phases = tables.phases.filter(pl.col("phase") == phase)
    m[f"{phase}_kernels_per_step"] = _from_table(phases, "phases", "kernels_per_step", row, agg="first")
    m[f"{phase}_device_ns_per_step"] = _from_table(phases, "phases", "device_time_per_step_ns", row, agg="first")
    m[f"{phase}_mean_launch_ns"] = _from_table(phases, "phases", "mean_launch_ns", row, agg="first")
    m[f"{phase}_median_launch_ns"] = _from_table(phases, "phases", "median_launch_ns", row, agg="first")
    m[f"{phase}_busy_pct"] = _from_table(phases, "phases", "busy_pct", row, agg="first")
    idle = tables.idle.per_phase if tables.idle is not None else None
    for name, column in (("gap_idle_ns", "idle_ns"), ("largest_gap_ns", "largest_ns"),
                         ("largest_gap_pct", "largest_pct"), ("gap_host_wait_pct", "host_wait_pct")):
        m[f"{phase}_{name}"] = _from_table(idle, "idle_gaps", column, row, agg="first")
    return m


def _per_rank(m: dict[str, Metric], tables: Any, phases: tuple[str, ...]) -> dict[str, Metric]:
    """Runs of several ranks: per-step figures per rank (the phase table sums the ranks, which run side by side),
    so that a step's device time is compared with its wall time per rank."""
    ranks = rank_count(tables.kernels)
    if ranks < 2:
        return {}
    out = {}
    for phase in phases:
        for name in (f"{phase}_kernels_per_step", f"{phase}_device_ns_per_step"):
            value = m[name].value
            out[name] = _derived(name, value / ranks if value is not None else None, (name,),
                                 f"{m[name].table}.{m[name].column} of the phase / {ranks} ranks")
    return out


def _communication_metrics(tables: Any, phase: str) -> dict[str, Metric]:
    """Runs with collectives across ranks: the rank that waits most in the phase (its wait per step, the share
    of its collective time and of its device time) and the phase's largest collective (where it runs, its
    message, bus bandwidth and share of the link)."""
    comm = tables.communication
    if comm is None:
        return {}
    m: dict[str, Metric] = {}
    ranks = comm.by_rank.filter(pl.col("phase") == phase)
    if ranks.height and ranks["wait_ns"].drop_nulls().len():
        worst = ranks.sort(["wait_ns", "rank"], descending=[True, False], nulls_last=True).row(0, named=True)
        rows = {"phase": [phase], "rank": [worst["rank"]]}
        t = "communication_ranks"
        m[f"{phase}_wait_rank"] = _from_table(ranks, t, "rank", rows, agg="first")
        m[f"{phase}_wait_ns"] = _from_table(ranks, t, "wait_ns", rows, agg="first")
        m[f"{phase}_wait_share"] = _from_table(ranks, t, "wait_pct", rows, agg="first")
        m[f"{phase}_wait_rank_comm_pct"] = _from_table(ranks, t, "comm_pct", rows, agg="first")
        m[f"{phase}_wait_imbalance_pct"] = _from_table(ranks, t, "imbalance_pct", rows, agg="first")
        steps = tables.phases.filter(pl.col("phase") == phase)["steps"]
        per_step = worst["wait_ns"] / steps[0] if steps.len() and steps[0] else None
        m[f"{phase}_wait_ns_per_step"] = _derived(f"{phase}_wait_ns_per_step", per_step,
                                                  (f"{phase}_wait_ns",), f"{phase}_wait_ns / phases.steps")
    top = comm.by_collective.filter(pl.col("phase") == phase) if comm.by_collective.height else None
    if top is not None and top.height:
        row = top.sort(["total_ns", "kind", "bytes", "where"], descending=[True, False, False, False],
                       nulls_last=True).row(0, named=True)
        rows = {"phase": [phase], "kind": [row["kind"]], "where": [row["where"]], "bytes": [row["bytes"]]}
        for name, column in (("collective", "kind"), ("collective_where", "where"), ("collective_bytes", "bytes"),
                             ("collective_busbw", "bus_bytes_per_s"), ("collective_link_pct", "link_pct"),
                             ("collective_transfer_ns", "mean_transfer_ns"), ("collective_pct", "time_pct")):
            m[f"{phase}_{name}"] = _from_table(top, "communication", column, rows, agg="first")
    return m


def _path_host_op_metrics(tables: Any, phase: str) -> dict[str, Metric]:
    """The framework op whose host time holds the most of the phase's critical path (segments of kind `host` in
    the classes `launch` and `host`: the CPU inside the op while the device waits), its time on the path and its
    share of the path, from tables/critical_path_<phase>.csv."""
    paths = tables.critical_path
    if paths is None:
        return {}
    segments = paths.path.segments.filter(pl.col("phase") == phase)
    on_host = segments.filter((pl.col("kind") == "host") & pl.col("class").is_in(HOST_CLASSES)
                              & pl.col("name").is_not_null())
    if on_host.height == 0:
        return {}
    per_op = on_host.group_by("name").agg(pl.col("dur_ns").sum()).sort(["dur_ns", "name"], descending=[True, False])
    op = per_op["name"][0]
    t = f"critical_path_{phase}"
    rows = {"kind": ["host"], "class": list(HOST_CLASSES), "name": [op]}
    m = {f"{phase}_path_host_op": Metric(op, t, "name", rows, agg="first"),
         f"{phase}_path_host_op_ns": _from_table(segments, t, "dur_ns", rows),
         f"{phase}_path_ns": _from_table(segments, t, "dur_ns")}
    op_ns, path_ns = m[f"{phase}_path_host_op_ns"].value, m[f"{phase}_path_ns"].value
    steps = paths.path.steps.filter(pl.col("phase") == phase).height
    m[f"{phase}_path_host_op_pct"] = _derived(
        f"{phase}_path_host_op_pct", 100.0 * op_ns / path_ns if op_ns is not None and path_ns else None,
        (f"{phase}_path_host_op_ns", f"{phase}_path_ns"), f"100 × {phase}_path_host_op_ns / {phase}_path_ns")
    m[f"{phase}_path_host_op_ns_per_step"] = _derived(
        f"{phase}_path_host_op_ns_per_step", op_ns / steps if op_ns is not None and steps else None,
        (f"{phase}_path_host_op_ns",), f"{phase}_path_host_op_ns / the phase's steps in critical_path_steps")
    return m


def _mix_metrics(phase: str, of_phase: Any) -> dict[str, Metric]:
    m: dict[str, Metric] = {}
    cats = of_phase.categories if of_phase is not None else None
    t = f"categories_{phase}"
    m[f"{phase}_matmul_pct"] = _from_table(cats, t, "time_pct", {"category": ["GEMM", "GEMV"]})
    m[f"{phase}_gemv_pct"] = _from_table(cats, t, "time_pct", {"category": ["GEMV"]})
    m[f"{phase}_fusable_pct"] = _from_table(cats, t, "time_pct", {"category": FUSABLE})
    m[f"{phase}_copy_pct"] = _from_table(cats, t, "time_pct", {"category": ["copy/cast", "concat"]})
    m[f"{phase}_attention_pct"] = _from_table(cats, t, "time_pct", {"category": ["attention", "attention-combine"]})
    kernels = of_phase.kernels if of_phase is not None else None
    attention = kernels.filter(pl.col("category") == "attention") if kernels is not None else None
    rows = {"category": ["attention"]}
    m[f"{phase}_attention_kernel"] = _from_table(attention, f"kernels_{phase}", "label", rows, agg="first")
    m[f"{phase}_attention_library"] = _from_table(attention, f"kernels_{phase}", "library", rows, agg="first")
    return m


def _decode_host_metrics(m: dict[str, Metric]) -> dict[str, Metric]:
    """What the host adds to a decode step: TPOT against the device time per step."""
    out: dict[str, Metric] = {}
    device_ns, tpot = m["decode_device_ns_per_step"].value, m["tpot_ms"].value
    device = device_ns / 1e6 if device_ns is not None else None
    idle = 100.0 * (1 - device / tpot) if device is not None and tpot else None
    out["decode_idle_pct"] = _derived("decode_idle_pct", idle, ("decode_device_ns_per_step", "tpot_ms"),
                                      "100 × (1 − decode_device_ns_per_step / 1e6 / tpot_ms)")
    fastest = m["tpot_ms_min"].value
    idle_min = 100.0 * (1 - device / fastest) if device is not None and fastest else None
    out["decode_idle_pct_min"] = _derived("decode_idle_pct_min", idle_min, ("decode_device_ns_per_step", "tpot_ms_min"),
                                          "100 × (1 − decode_device_ns_per_step / 1e6 / tpot_ms_min)")
    overhead = (tpot - device) if device is not None and tpot else None
    out["decode_host_ms_per_step"] = _derived("decode_host_ms_per_step", overhead,
                                              ("tpot_ms", "decode_device_ns_per_step"),
                                              "tpot_ms − decode_device_ns_per_step / 1e6")
    return out


def _measured_metrics(tables: Any) -> dict[str, Metric]:
    m: dict[str, Metric] = {}
    if tables.measured is not None:
        overall = {"measured_class": ["overall"]}
        classes = tables.measured.classes
        m["measured_l2_hit_pct"] = _from_table(classes, "ncu_classes", "l2_hit_rate_pct", overall, agg="first")
        m["measured_occupancy_pct"] = _from_table(classes, "ncu_classes", "achieved_occupancy_pct", overall, agg="first")
        m["measured_kernels"] = _from_table(classes, "ncu_classes", "kernels", overall, agg="first")
        low = tables.measured.kernels.filter(pl.col("achieved_occupancy_pct") < 25)
        m["low_occupancy_kernels"] = Metric(float(low.height), "ncu_kernels", "achieved_occupancy_pct",
                                            agg="count_below_25")
    return m


def _stage_metrics(phases: pl.DataFrame, stages: list[str]) -> dict[str, Metric]:
    """Model stages (vision encoders, projectors; phases other than prefill and decode): their share of device
    time, their device time per generation (per image), and the largest of them."""
    if not stages:
        return {}
    rows = {"phase": stages}
    m = {
        "stages_time_pct": _from_table(phases, "phases", "time_pct", rows),
        "stages_ns_per_image": _from_table(phases, "phases", "device_time_per_step_ns", rows),
    }
    largest = phases.filter(pl.col("phase").is_in(stages)).sort(["device_time_ns", "phase"],
                                                                  descending=[True, False])["phase"][0]
    m["largest_stage"] = Metric(largest, "phases", "phase", {"phase": [largest]}, agg="first")
    m["largest_stage_pct"] = _from_table(phases, "phases", "time_pct", {"phase": [largest]}, agg="first")
    return m


def _holds(condition: str, metrics: dict[str, Metric]) -> bool:
    match = _CONDITION.match(condition)
    if not match:
        raise ValueError(f"findings.toml: cannot read condition {condition!r}")
    name, op, right = match.groups()
    left = metrics.get(name)
    if left is None or left.value is None:
        return False
    try:
        limit: Any = float(right)
    except ValueError:
        other = metrics.get(right)
        if other is None or other.value is None:
            return False
        limit = other.value
    return OPS[op](left.value, limit)


def evaluate(metrics: dict[str, Metric]) -> list[Finding]:
    findings = []
    for rule in load_rules():
        if all(_holds(c, metrics) for c in rule["when"]):
            names = rule.get("uses", [])
            if any(metrics.get(name) is None or metrics[name].value is None for name in names):
                continue  # a message without its numbers is not printed
            used = {name: metrics[name] for name in names}
            findings.append(Finding(id=rule["id"], kind=rule.get("kind", "observation"), numbers=used, rule=rule))
    return findings
