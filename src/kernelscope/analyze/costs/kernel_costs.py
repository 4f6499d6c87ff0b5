"""The cost of each kernel and where it came from (`cost_source`; docs/roofline.md, "Where a cost comes from"):

1. its framework op's analytic cost — analyze/costs/op_costs.py for ATen ops, the rules of data/cost_models.toml
   (analyze/costs/cost_rules.py) for serving engines' and compilers' ops — from the op's own shapes (`op_shapes`) or,
   for a CUDA-graph replay, the shapes its capture recorded (`capture_shapes`), with the step's token counts where
   a model needs them (`step_annotation`) and the model's config where a rule reads it (`model_config`); the op's
   bytes are split among its kernels by duration, its FLOPs among its matrix kernels (op_splits.py);
2. its own launch record (`kernel_metadata`): copies and sets cost their bytes, collectives their messages, the
   engine's kernels the cost their launch declared;
3. the model's config and the kernel's module (analyze/costs/config_costs.py, `model_config`), for kernels with no op
   shapes at all;
4. launches of the same kernel with the same grid and block that have a cost (`estimated`); for a kernel without a
   launch record, the same kernel between the same neighbours (analyze/costs/sequence_estimates.py, `estimated`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import polars as pl

from kernelscope import ranges
from kernelscope.analyze.costs.catalog import classify_frame
from kernelscope.analyze.costs.cost_rules import Signature, matching_rules, needs_inner, rule_cost
from kernelscope.analyze.costs.fused_inner import inner_summaries
from kernelscope.analyze.costs.index_estimates import INDEX_OP, index_estimates
from kernelscope.analyze.costs.kernel_extras import (
    collective_costs,
    copy_costs,
    estimated_from_twins,
    gemm_layouts,
)
from kernelscope.analyze.costs.naming import with_kernel_catalog
from kernelscope.analyze.costs.op_costs import MODELS, op_cost
from kernelscope.analyze.costs.op_inputs import OpCost
from kernelscope.analyze.costs.op_splits import split_unit_costs
from kernelscope.analyze.costs.sequence_estimates import estimated_from_sequence
from kernelscope.analyze.costs.step_tokens import StepTokens, step_tokens
from kernelscope.contracts.run import Run
from kernelscope.contracts.run_info import RunInfo
from kernelscope.contracts.tables import COST_COLUMNS, COST_SOURCES, conform_kernels, costs_stored

# cost_model of a kernel whose launch declared its own cost (the engine's kernels).
DECLARED_MODEL = "declared"
# Columns a CUDA-graph replay kernel carries from the op its capture recorded (analyze/attribution/graph_replays.py): the
# op's name, inputs and inner summary, and which captured op it was (kernels of one replay and one captured op
# share its cost). Used here, then dropped.
SHAPE_COLUMNS: dict[str, pl.DataType] = {
    "shape_op": pl.String(), "shape_dims": pl.String(), "shape_types": pl.String(), "shape_scalars": pl.String(),
    "shape_inner": pl.String(), "shape_unit": pl.Int64(),
}
_MATRIX_MODELS = {"gemm": ("GEMM", "GEMV"), "grouped_gemm": ("GEMM", "GEMV"), "convolution": ("convolution", "GEMM"),
                  "attention": ("attention",)}


@dataclass(frozen=True)
class CostContext:
    """What costs may read beyond shapes: each step's token counts (by phase and step, from its annotation), the
    model's config, and the batch and prompt length an import stated (--batch-size, --prompt-len)."""

    steps: dict[tuple[str, int], StepTokens] = field(default_factory=dict)
    config: tuple[tuple[str, float], ...] = ()
    batch: int | None = None
    prompt: int | None = None

    def tokens_of(self, phase: str | None, step: int | None) -> StepTokens | None:
        """The step's annotation's counts; else, where the import stated its batch, a prefill of batch × prompt
        tokens or decode step i of one token a sequence attending to prompt + i + 1 tokens."""
        known = self.steps.get((phase, step)) if phase is not None and step is not None else None
        if known is not None and known.q_tokens is not None:
            return known
        b, p = self.batch, self.prompt
        if not b:
            return known
        if phase == "prefill" and p:
            return StepTokens(q_tokens=b * p, kv_tokens=b * p, pairs=b * p * (p + 1) / 2, requests=b)
        if phase == "decode" and step is not None:
            context = None if p is None else b * (p + step + 1)
            return StepTokens(q_tokens=b, kv_tokens=context, pairs=context, requests=b)
        return known


def cost_context(info: RunInfo) -> CostContext:
    from kernelscope.analyze.costs.model_config import config_values

    steps: dict[tuple[str, int], StepTokens] = {}
    for s in info.attribution.steps if info.attribution is not None else []:
        steps.setdefault((s.phase, s.step), step_tokens(s))
    config = config_values(info.model.config) if info.model is not None and info.model.config else {}
    if config:
        config["ranks"] = float(_ranks(info))
    workload = info.workload if info.source == "import" else None
    return CostContext(steps=steps, config=tuple(sorted(config.items())),
                       batch=workload.batch_size if workload else None,
                       prompt=workload.prompt_len if workload else None)


def _ranks(info: RunInfo) -> int:
    """The ranks the model is sharded across: the world size the trace's `distributedInfo` records (a serving
    engine's tensor- or expert-parallel ranks), else that of a `profile --gpus` run, else 1."""
    recorded = info.trace.world_size() if info.trace is not None else None
    if recorded:
        return recorded
    return info.parallel.world_size if info.parallel is not None and info.parallel.world_size > 0 else 1


def has_model(name: str) -> bool:
    return name in MODELS or bool(matching_rules(name))


@dataclass(frozen=True)
class UnitCost:
    cost: OpCost
    source: str
    flop_categories: tuple[str, ...]


@lru_cache(maxsize=65536)
def signature_cost(sig: Signature, step: StepTokens | None, config: tuple[tuple[str, float], ...],
                   origin: str) -> UnitCost | None:
    """An op's cost by its code model (ATen) or the first rule of data/cost_models.toml that applies."""
    if sig.name in MODELS:
        cost = op_cost(sig.name, sig.dims, sig.types, sig.concrete)
        return None if cost is None else UnitCost(cost, origin, _MATRIX_MODELS.get(cost.model, ()))
    made = rule_cost(sig, step, dict(config) if config else None)
    if made is None:
        return None
    used = {origin}
    used |= {"step_annotation" for n in made.used if n.startswith("step_")}
    used |= {"model_config" for n in made.used if n.startswith("config_")}
    used |= {n[len("evidence_"):] for n in made.used if n.startswith("evidence_")}
    if step is not None and step.estimated and any(n.startswith("step_") for n in made.used):
        used.add("estimated")
    source = max(used, key=lambda s: COST_SOURCES.index(s) if s in COST_SOURCES else 0)
    return UnitCost(made.cost, source, made.flop_categories)


def op_costs(ops: pl.DataFrame) -> pl.DataFrame:
    """op_id, flops, bytes, precision, cost_model for every CPU op with a model from its own shapes (no step or
    config: costs that need them are per kernel, kernel_costs)."""
    units = _op_signatures(ops, _modelled_ids(ops))
    rows = []
    for op_id, name, dims, types, concrete, inner in units.iter_rows():
        made = signature_cost(Signature(name, dims, types, concrete, inner), None, (), "op_shapes")
        if made is not None:
            rows.append((op_id, made.cost.flops, made.cost.bytes, made.cost.precision, made.cost.model))
    return pl.DataFrame(rows, schema={"op_id": pl.Int64, "flops": pl.Float64, "bytes": pl.Float64,
                                      "precision": pl.String, "cost_model": pl.String}, orient="row")


def kernel_costs(kernels: pl.DataFrame, ops: pl.DataFrame, context: CostContext | None = None) -> pl.DataFrame:
    """Adds the COST columns to kernels (module docstring); SHAPE_COLUMNS, where present, are read and dropped."""
    context = context or CostContext()
    kernels = kernels.drop(COST_COLUMNS, strict=False)
    shapes = [c for c in SHAPE_COLUMNS if c in kernels.columns]
    has_category = "category" in kernels.columns and kernels["category"].is_not_null().any()
    work = kernels if has_category else kernels.drop("category", strict=False).join(
        classify_frame(kernels["name"]).select("name", "category"), on="name", how="left", maintain_order="left")
    work = work.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("_row"), _cost_op_ids(work, ops))
    work, units = _units(work, ops, shapes)
    costed = _unit_costs(units, context)
    costed = pl.concat([costed, _index_costs(units, costed, ops)])
    work = split_unit_costs(work, costed)
    work = copy_costs(work)
    work = collective_costs(work)
    work = _with_declared_costs(work)
    if context.config:
        from kernelscope.analyze.costs.config_costs import config_costs

        work = config_costs(work, dict(context.config), context.tokens_of)
    work = estimated_from_sequence(estimated_from_twins(_with_op_dims(work, ops)).drop("_op_dims"))
    work = gemm_layouts(work)
    out = kernels.drop(shapes).with_columns(work.select(*COST_COLUMNS))
    return conform_kernels(out)


def _with_op_dims(work: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """`_op_dims`: the input shapes the kernel's own op recorded (text), for twins that must share them."""
    if "input_dims" not in ops.columns or "op_id" not in work.columns:
        return work.with_columns(pl.lit(None, dtype=pl.String).alias("_op_dims"))
    dims = ops.select("op_id", pl.col("input_dims").cast(pl.String).alias("_op_dims"))
    return work.join(dims, on="op_id", how="left", maintain_order="left")


# ---- which op (or captured op) each kernel takes its cost from --------------------------------------------------


def _modelled_ids(ops: pl.DataFrame) -> np.ndarray:
    """op_ids of the CPU ops that have a model (by name)."""
    if not ops.height:
        return np.zeros(0, dtype=np.int64)
    names = ops.filter(pl.col("cat") == "cpu_op")["name"].unique().to_list()
    modelled = [n for n in names if has_model(n)]
    return ops.filter((pl.col("cat") == "cpu_op") & pl.col("name").is_in(modelled))["op_id"].to_numpy()


def _cost_op_ids(kernels: pl.DataFrame, ops: pl.DataFrame) -> pl.Series:
    """Per kernel, its own op or the nearest enclosing op that has a model (null: none)."""
    modelled = np.zeros(max(ops.height, 1), dtype=bool)
    modelled[_modelled_ids(ops)] = True
    parent = ops["parent_op_id"].fill_null(-1).to_numpy() if ops.height else np.full(1, -1)
    target = kernels["op_id"].fill_null(-1).to_numpy().copy()
    target[target >= len(modelled)] = -1
    for _ in range(64):  # walk up enclosing ops until one has a model
        climb = (target >= 0) & ~modelled[np.maximum(target, 0)]
        if not climb.any():
            break
        target[climb] = parent[target[climb]]
    return pl.Series("cost_op_id", target, dtype=pl.Int64).replace(-1, None)


def _op_signatures(ops: pl.DataFrame, ids: np.ndarray, text: bool = True) -> pl.DataFrame:
    """op_id, name, dims, types, concrete, inner of the ops `ids`; as category codes where not `text` (a big trace
    has millions of ops and few distinct signatures: texts are made once per distinct one, _unit_costs)."""
    keys = ["name", "input_dims", "input_types", "concrete_inputs"]
    kind = pl.String if text else pl.Categorical
    table = (ops.lazy().filter(pl.col("op_id").is_in(ids)).select("op_id", *(pl.col(c).cast(kind) for c in keys))
             .collect()) if len(ids) else pl.DataFrame(schema={"op_id": pl.Int64, **{c: kind for c in keys}})
    names = table["name"].unique().cast(pl.String).to_list()
    fused = table.filter(pl.col("name").cast(pl.String).is_in([n for n in names if needs_inner(n)]))
    inner = inner_summaries(ops, fused["op_id"].to_list()) if fused.height else {}
    return table.with_columns(pl.col("op_id").replace_strict(inner, default=None, return_dtype=pl.String)
                              .cast(kind).alias("inner"))


def captured_shapes(launches: pl.DataFrame, ops: pl.DataFrame) -> list[pl.Series]:
    """Per captured launch (attributed like a kernel: op_id into `ops`, the capture trace's ops), the SHAPE_COLUMNS
    of the nearest op around it that has a model: what its replays are costed from."""
    target = _cost_op_ids(launches, ops)
    sig = _op_signatures(ops, target.drop_nulls().unique().to_numpy())
    joined = pl.DataFrame({"op_id": target}).join(sig, on="op_id", how="left", maintain_order="left")
    return [joined["name"].alias("shape_op"), joined["input_dims"].alias("shape_dims"),
            joined["input_types"].alias("shape_types"), joined["concrete_inputs"].alias("shape_scalars"),
            joined["inner"].alias("shape_inner"), joined["op_id"].alias("shape_unit")]


def _units(work: pl.DataFrame, ops: pl.DataFrame, shapes: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The kernels with `_unit` (the kernels sharing one op's cost: eager kernels their cost op, replay kernels
    their captured op within their replay) and one row per unit: its signature, origin, phase and step."""
    eager = _op_signatures(ops, work["cost_op_id"].drop_nulls().unique().to_numpy(), text=False).rename(
        {"op_id": "_unit", "input_dims": "dims", "input_types": "types", "concrete_inputs": "concrete"})
    eager = eager.with_columns(pl.lit("op_shapes").alias("origin"))
    frames = [eager]
    unit = pl.col("cost_op_id")
    if shapes:
        key = ["rank", "correlation", "shape_unit"]
        replay = (work.filter(pl.col("cost_op_id").is_null() & pl.col("shape_op").is_not_null())
                  .group_by(key, maintain_order=True)
                  .agg(pl.col("shape_op").first().alias("name"), pl.col("shape_dims").first().alias("dims"),
                       pl.col("shape_types").first().alias("types"), pl.col("shape_scalars").first().alias("concrete"),
                       pl.col("shape_inner").first().alias("inner"))
                  .with_columns((-1 - pl.int_range(pl.len(), dtype=pl.Int64)).alias("_unit"),
                                pl.lit("capture_shapes").alias("origin")))
        frames.append(replay.select(eager.columns).with_columns(
            pl.col("name", "dims", "types", "concrete", "inner").cast(pl.Categorical)))
        work = work.join(replay.select(*key, pl.col("_unit").alias("_replay_unit")), on=key, how="left",
                         maintain_order="left")
        unit = pl.coalesce("cost_op_id", pl.when(pl.col("cost_op_id").is_null()).then(pl.col("_replay_unit")))
    work = work.with_columns(unit.alias("_unit")).drop("_replay_unit", strict=False)
    steps = (work.filter(pl.col("_unit").is_not_null()).group_by("_unit")
             .agg(pl.col("phase").first(), pl.col("step").first()))
    return work, pl.concat(frames).join(steps, on="_unit", how="inner")


@lru_cache(maxsize=8192)
def _uses_step(name: str) -> bool:
    return any("step_" in f.text for r in matching_rules(name) for f in r.formulas.values()) or any(
        r.model == "attention" for r in matching_rules(name))


def _unit_costs(units: pl.DataFrame, context: CostContext) -> pl.DataFrame:
    """Per unit: flops, bytes, precision, cost_model, cost_source, the kernel categories its FLOPs go to and the
    GEMMs it solves (evaluated once per distinct signature, and step where the model reads the step)."""
    stepped = [n for n in units["name"].unique().cast(pl.String).to_list() if _uses_step(n)]
    units = units.with_columns(pl.when(pl.col("name").cast(pl.String).is_in(stepped)).then(pl.struct("phase", "step"))
                               .alias("_step_key"))
    keys = ["name", "dims", "types", "concrete", "inner", "origin", "_step_key"]
    text = ["name", "dims", "types", "concrete", "inner"]
    distinct = units.group_by(keys).agg(pl.col("_unit")).with_columns(pl.col(text).cast(pl.String))
    rows = []
    for name, dims, types, concrete, inner, origin, step_key, ids in distinct.iter_rows():
        step = context.tokens_of(step_key["phase"], step_key["step"]) if step_key else None
        made = signature_cost(Signature(name, dims, types, concrete, inner), step, context.config, origin)
        if made is None:
            continue
        gemms = [{"m": g.m, "n": g.n, "k": g.k, "batch": g.batch, "dtypes": g.dtypes} for g in made.cost.gemms]
        rows.append((ids, made.cost.flops, made.cost.bytes, made.cost.precision, made.cost.model, made.source,
                     list(made.flop_categories), gemms))
    schema = {"_unit": pl.List(pl.Int64), "_flops": pl.Float64, "_bytes": pl.Float64, "_precision": pl.String,
              "_model": pl.String, "_source": pl.String, "_flop_categories": pl.List(pl.String),
              "_gemms": pl.List(pl.Struct({"m": pl.Int64, "n": pl.Int64, "k": pl.Int64, "batch": pl.Int64,
                                           "dtypes": pl.String}))}
    costed = pl.DataFrame(rows, schema=schema, orient="row").explode("_unit")
    return costed


def _index_costs(units: pl.DataFrame, costed: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """Eager `aten::index` units without a cost, estimated from the op that consumes their result."""
    left = units.filter((pl.col("name") == INDEX_OP) & (pl.col("origin") == "op_shapes")
                        & ~pl.col("_unit").is_in(costed["_unit"].implode()))
    found = index_estimates(ops, left["_unit"].to_list())
    rows = [(op_id, c.flops, c.bytes, c.precision, c.model, "estimated", [], []) for op_id, c in found.items()]
    return pl.DataFrame(rows, schema=costed.schema, orient="row")


def _declared_field(key: str) -> pl.Expr:
    return pl.col("op").str.extract(ranges.cost_field_pattern(key))


def _with_declared_costs(kernels: pl.DataFrame) -> pl.DataFrame:
    """A kernel whose op is a cost range (`ks.cost|<kernel>|flops=…|bytes=…|precision=…`, kernelscope.engine_costs)
    takes the cost its launch declared instead of a model's, split by duration among the kernels of that one
    range (several on the engine's torch backend). A CUDA-graph kernel given the op of its eager twin has no
    op_id: the range's cost is its own."""
    if not kernels.height or not kernels["op"].str.starts_with(ranges.COST_PREFIX).any():
        return kernels  # no cost range (every foreign trace): the regexes and windows below would change nothing
    flops = _declared_field("flops").cast(pl.Float64, strict=False)
    nbytes = _declared_field("bytes").cast(pl.Float64, strict=False)
    declared = (pl.col("op").str.starts_with(ranges.COST_PREFIX) & flops.is_not_null() & nbytes.is_not_null()
                & pl.col("kind").is_in(["kernel", "cpu_op"])).fill_null(False)
    total_ns = pl.col("dur_ns").sum().over("op_id")
    share = (pl.when(pl.col("op_id").is_null()).then(1.0)
             .when(total_ns > 0).then(pl.col("dur_ns") / total_ns)
             .otherwise(1.0 / pl.len().over("op_id")))
    return kernels.with_columns(
        pl.when(declared).then(flops * share).otherwise(pl.col("flops")).alias("flops"),
        pl.when(declared).then(nbytes * share).otherwise(pl.col("bytes_moved")).alias("bytes_moved"),
        pl.when(declared).then(_declared_field("precision").fill_null(ranges.COST_DEFAULT_PRECISION))
        .otherwise(pl.col("precision")).alias("precision"),
        pl.when(declared).then(pl.lit(DECLARED_MODEL)).otherwise(pl.col("cost_model")).alias("cost_model"),
        pl.when(declared).then(pl.col("op_id")).otherwise(pl.col("cost_op_id")).alias("cost_op_id"),
        pl.when(declared).then(pl.lit("kernel_metadata")).otherwise(pl.col("cost_source")).alias("cost_source"),
    )


def with_costs_and_names(run: Run) -> Run:
    """The run with every kernel's catalog names and analytic cost. Runs written by kernelscope store both;
    older runs and fresh captures get them computed here. CPU ops are always named again: their categories
    come from a small data file (data/cpu_ops.toml) that may have grown since the run was written."""
    kernels = run.kernels
    if kernels.height and (kernels["library"].is_null().any() or (kernels["kind"] == "cpu_op").any()):
        kernels = with_kernel_catalog(kernels)
    if not costs_stored(kernels):
        kernels = kernel_costs(kernels, run.ops, cost_context(run.info))
    return run.with_kernels(kernels)
