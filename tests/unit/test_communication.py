"""Communication across ranks on our two-GPU H200 capture (HF generate, transformers' tensor parallelism, plain
torchrun, no ranges of ours): collectives matched across ranks, waits, message sizes, bus bandwidth, shares.
Expected values are computed from the two JSON files with plain Python."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest

from kernelscope.cli import main

CAPTURED = Path(__file__).resolve().parents[1] / "data" / "foreign" / "captured"
RANKS = [CAPTURED / "tp2_rank0.json.gz", CAPTURED / "tp2_rank1.json.gz"]
DTYPE_BYTES = {"BFloat16": 2, "Float": 4, "Half": 2}


def _nccl(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    return sorted((e for e in events if e.get("cat") == "kernel" and e["name"].startswith("nccl")),
                  key=lambda e: e["ts"])


def _waits_us() -> list[float]:
    """Per rank, µs waited inside collectives, read from the two trace files: the n-th NCCL kernel of each rank (the
    same collective on both) against the later of the two starts."""
    waits = [0.0, 0.0]
    for a, b in zip(*(_nccl(p) for p in RANKS), strict=True):
        assert a["name"] == b["name"]
        last = max(a["ts"], b["ts"])
        waits[0] += last - a["ts"]
        waits[1] += last - b["ts"]
    return waits


def _device_total_us(path: Path) -> float:
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    return sum(e["dur"] for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))


@pytest.fixture(scope="module")
def comm(tmp_path_factory):
    from kernelscope.analyze.costs.kernel_costs import with_costs_and_names
    from kernelscope.analyze.ranks.communication import communication
    from kernelscope.load import rundir

    out = tmp_path_factory.mktemp("tp2") / "run"
    assert main(["-q", "import", *map(str, RANKS), "--out", str(out), "--no-report"]) == 0
    run = with_costs_and_names(rundir.read_run(out))
    return communication(run.kernels, link_bandwidth=900e9, link="NVLink 4")


@pytest.mark.slow
def test_every_collective_is_matched_across_the_two_ranks(comm):
    per_rank = [_nccl(p) for p in RANKS]
    assert len(per_rank[0]) == len(per_rank[1]) == 60
    assert comm.ranks == 2 and comm.unmatched == 0
    assert comm.instances.height == sum(len(r) for r in per_rank)
    for rank, events in enumerate(per_rank):
        mine = comm.instances.filter(pl.col("rank") == rank)
        assert mine["dur_ns"].sum() == pytest.approx(sum(e["dur"] for e in events) * 1e3, abs=len(events))


def test_wait_is_the_gap_to_the_last_rank_to_arrive(comm):
    """The n-th all-reduce of rank 0 with the n-th of rank 1: the earlier one waits for the later one."""
    per_rank = [[e for e in _nccl(p) if e["args"]["Collective name"] == "allreduce"] for p in RANKS]
    expected = [[max(a["ts"], b["ts"]) - e["ts"] for e in (a, b)] for a, b in zip(*per_rank, strict=True)]
    ours = comm.instances.filter(pl.col("kind") == "all_reduce").sort("seq", "rank")
    got = ours["wait_ns"].to_list()
    flat = [w * 1e3 for pair in expected for w in pair]
    assert len(got) == len(flat)
    # Both ranks are on one clock (the import moves them there); times are rounded to the ns.
    assert max(abs(g - f) for g, f in zip(got, flat, strict=True)) <= 2


def test_message_bytes_and_bus_bandwidth(comm):
    events = _nccl(RANKS[0])
    sizes = {(e["args"]["Collective name"], e["args"]["In msg nelems"] * DTYPE_BYTES[e["args"]["dtype"]])
             for e in events if e["args"]["Collective name"] == "allreduce"}
    table = comm.by_collective.filter(pl.col("kind") == "all_reduce")
    assert set(table["bytes"].cast(pl.Int64).to_list()) == {b for _, b in sizes}
    gathers = comm.by_collective.filter(pl.col("kind") == "all_gather")
    gather_bytes = {e["args"]["Out msg nelems"] * DTYPE_BYTES[e["args"]["dtype"]] for e in events
                    if e["args"]["Collective name"].startswith("allgather")}
    assert set(gathers["bytes"].cast(pl.Int64).to_list()) == gather_bytes and gather_bytes
    # Bus bandwidth of one group: bytes × instances / summed transfer time × 2(n−1)/n = 1 for two ranks.
    row = table.sort("instances", descending=True).row(0, named=True)
    mine = comm.instances.filter((pl.col("kind") == "all_reduce") & (pl.col("bytes") == row["bytes"])
                                 & (pl.col("phase") == row["phase"]) & (pl.col("where") == row["where"]))
    transfer = mine.group_by("seq").agg(pl.col("transfer_ns").mean())["transfer_ns"].sum()
    assert row["bus_bytes_per_s"] == pytest.approx(row["bytes"] * row["instances"] / (transfer * 1e-9))
    assert row["link_pct"] == pytest.approx(row["bus_bytes_per_s"] / 450e9 * 100)


@pytest.mark.slow
def test_share_of_device_time_per_rank(comm):
    totals = comm.by_rank.group_by("rank").agg(pl.col("comm_ns").sum(), pl.col("device_time_ns").sum()).sort("rank")
    for rank, path in enumerate(RANKS):
        row = totals.row(rank, named=True)
        assert row["comm_ns"] == pytest.approx(sum(e["dur"] for e in _nccl(path)) * 1e3, abs=60)
        assert row["device_time_ns"] <= _device_total_us(path) * 1e3 + 2000
    assert ((comm.by_rank["overlap_ns"] >= 0) & (comm.by_rank["overlap_ns"] <= comm.by_rank["comm_ns"])).all()


def test_collective_kind_from_names_without_args():
    from kernelscope.analyze.ranks.communication import bus_factor, collective_kind

    assert collective_kind(None, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)") == \
        "all_reduce"
    assert collective_kind(None, "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)") == "all_gather"
    assert collective_kind("allreduce", "whatever") == "all_reduce"
    assert collective_kind(None, "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)") == "send_recv"
    assert bus_factor("all_reduce", 8) == pytest.approx(1.75) and bus_factor("all_gather", 4) == 0.75


@pytest.mark.slow
def test_report_has_the_communication_section(tmp_path):
    out = tmp_path / "run"
    assert main(["-q", "import", *map(str, RANKS), "--out", str(out), "--lang", "en,zh"]) == 0
    text = (out / "report" / "report.md").read_text()
    zh = (out / "report" / "report.zh.md").read_text()
    assert "## Communication across ranks" in text and "## 跨 rank 通信" in zh
    table = pl.read_csv(out / "report" / "tables" / "communication_ranks.csv")
    assert sorted(table["rank"].unique().to_list()) == [0, 1]
    # Findings: the rank that waits most in decode, read from the traces (waits to the last rank's start).
    waits = _waits_us()
    worst = waits.index(max(waits))
    findings = pl.read_csv(out / "report" / "tables" / "findings.csv")
    decode = findings.filter((pl.col("rule") == "decode-rank-wait") & (pl.col("number") == "decode_wait_rank"))
    assert decode.height == 1 and int(float(decode["value"][0])) == worst
    line = next(line for line in text.splitlines() if line.startswith("- **F") and "In decode, rank" in line)
    assert f"rank {worst} waits" in line
    # The largest decode collective is named with its module, and literally (no escaping shown twice).
    largest = next(line for line in text.splitlines() if "The largest collective of decode" in line)
    assert "all\\_reduce issued by Qwen2" in largest and "\\\\" not in largest


@pytest.mark.slow
def test_one_rank_of_a_group_says_its_waits_cannot_be_told(tmp_path):
    """One rank's trace of a two-rank run: its collectives (read from the file) have no counterparts to be matched
    with, and the section says so, in each language, instead of claiming every collective was matched."""
    assert _nccl(RANKS[0])
    out = tmp_path / "run"
    assert main(["-q", "import", str(RANKS[0]), "--out", str(out), "--lang", "en,zh"]) == 0
    text = (out / "report" / "report.md").read_text()
    zh = (out / "report" / "report.zh.md").read_text()
    section = text.split("## Communication across ranks", 1)[1].split("\n## ", 1)[0]
    assert "One rank's trace" in section and "1 ranks" not in section and "is matched with" not in section
    assert "只有一个 rank 的剖析数据" in zh.split("## 跨 rank 通信", 1)[1]


def test_rank_numbers_come_from_the_traces_when_each_names_a_different_one():
    from kernelscope.analyze.ranks.ranks import trace_ranks

    assert trace_ranks([{"rank": 1, "world_size": 2}, {"rank": 0, "world_size": 2}]) == [1, 0]
    # Missing, repeated or malformed ranks: the files' order.
    assert trace_ranks([{"rank": 0}, None]) == [0, 1]
    assert trace_ranks([{"rank": 0}, {"rank": 0}]) == [0, 1]
    assert trace_ranks([{"rank": "1"}, {"rank": True}]) == [0, 1]
    assert trace_ranks([{"rank": -1}, {"rank": 0}]) == [0, 1]


def test_each_collective_row_says_where_in_the_model_it_runs(comm, tmp_path):
    from kernelscope.analyze.structure.layers import module_in_layer

    table = comm.by_collective
    # Tensor parallelism all-reduces after the row-parallel projections of every layer: one row each for
    # attention's output projection and the MLP's down projection, whatever the layer.
    instances = comm.instances.filter(pl.col("rank") == 0)
    for row in table.iter_rows(named=True):
        mine = instances.filter((pl.col("phase") == row["phase"]) & (pl.col("kind") == row["kind"])
                                & (pl.col("bytes") == row["bytes"]))
        where = mine.with_columns(pl.when(pl.col("layer").is_not_null()).then(module_in_layer())
                                  .otherwise(pl.col("module")).alias("_w"))
        assert where.filter(pl.col("_w") == row["where"]).height == row["instances"]
    decode_layers = table.filter((pl.col("phase") == "decode") & (pl.col("kind") == "all_reduce")
                                 & pl.col("where").str.contains("Linear"))
    assert decode_layers.height == 2 and decode_layers["instances"].to_list() == [20, 20]  # 4 layers × 5 steps


def test_time_in_collectives_per_layer_type_and_step(comm):
    table = comm.by_layer
    assert table is not None
    kernels = comm.instances  # every collective kernel of the run is an instance here (nothing unmatched)
    for row in table.iter_rows(named=True):
        inside = row["layer_type"] != "outside layers"
        mine = kernels.filter((pl.col("phase") == row["phase"]) & (pl.col("layer").is_not_null() == inside))
        steps = mine["step"].n_unique() if row["phase"] == "decode" else 1
        assert row["comm_per_step_ns"] == pytest.approx(mine["dur_ns"].sum() / steps / 2)
        assert row["wait_pct"] == pytest.approx(100 * mine["wait_ns"].sum() / mine["dur_ns"].sum())
        assert row["layers"] == (4 if inside else 0)


@pytest.mark.slow
def test_expert_parallel_token_exchange_counts_as_communication(tmp_path):
    """The same two ranks with every NCCL kernel renamed to a DeepEP dispatch kernel and its collective args
    removed: DeepEP's kernels are matched across ranks like collectives (without message sizes)."""
    from kernelscope.analyze.costs.kernel_costs import with_costs_and_names
    from kernelscope.analyze.ranks.communication import communication
    from kernelscope.load import rundir

    renamed = []
    for path in RANKS:
        with gzip.open(path, "rt") as f:
            document = json.load(f)
        for event in document["traceEvents"]:
            if event.get("cat") == "kernel" and event["name"].startswith("nccl"):
                event["name"] = "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*)"
                event["args"] = {k: v for k, v in event["args"].items() if "msg" not in k and "Collective" not in k}
        target = tmp_path / path.name
        target.write_bytes(gzip.compress(json.dumps(document).encode()))
        renamed.append(target)
    out = tmp_path / "run"
    assert main(["-q", "import", *map(str, renamed), "--out", str(out), "--no-report"]) == 0
    run = with_costs_and_names(rundir.read_run(out))
    result = communication(run.kernels, link_bandwidth=900e9)
    assert result is not None and result.unmatched == 0
    assert set(result.instances["kind"]) == {"dispatch"}
    assert result.instances.height == sum(len(_nccl(p)) for p in RANKS)
    assert result.by_collective["bus_bytes_per_s"].null_count() == result.by_collective.height  # no sizes known


def test_the_part_of_a_wait_that_more_work_explains(comm, tmp_path):
    """Per matched collective and rank, the part of its wait that the last rank's extra compute explains: the last
    rank's busy time (the union of its other kernels) since its previous collective in the phase, or the phase's first
    kernel, minus this rank's, kept within [0, wait]. Busy times recomputed here from the run's rows in plain Python."""
    from kernelscope.analyze.costs.kernel_costs import with_costs_and_names
    from kernelscope.analyze.ranks.communication import is_collective
    from kernelscope.load import rundir

    out = tmp_path / "run"
    assert main(["-q", "import", *map(str, RANKS), "--out", str(out), "--no-report"]) == 0
    kernels = with_costs_and_names(rundir.read_run(out)).kernels.filter(pl.col("start_ns").is_not_null())
    kernels = kernels.with_columns(is_collective().alias("coll"))
    busy = {}
    for lane in kernels.partition_by("rank", "phase"):
        rows = sorted(lane.select("kernel_id", "start_ns", "dur_ns", "coll").iter_rows(), key=lambda r: (r[1], r[0]))
        window = min(r[1] for r in rows)
        compute = [(s, s + d) for _, s, d, c in rows if not c]
        for kernel_id, start, dur, coll in rows:
            if not coll:
                continue
            begin = min(window, start)
            covered, reach = 0, begin
            for s, e in sorted(compute):
                s, e = max(s, reach), min(e, start)
                if e > s:
                    covered += e - s
                    reach = e
            busy[kernel_id] = covered
            window = max(window, start + dur)
    inst = comm.instances.select("group", "kind", "seq", "rank", "kernel_id", "start_ns", "wait_ns", "imbalance_ns")
    checked = 0
    for _, group in inst.partition_by("group", "kind", "seq", as_dict=True).items():
        last = group.sort("start_ns", descending=True).row(0, named=True)
        for row in group.iter_rows(named=True):
            expected = min(max(busy[last["kernel_id"]] - busy[row["kernel_id"]], 0), row["wait_ns"])
            assert row["imbalance_ns"] == expected
            checked += 1
    assert checked == inst.height > 0
    by_rank = comm.by_rank.filter(pl.col("wait_ns") > 0)
    assert by_rank["imbalance_pct"].to_list() == pytest.approx(
        [100 * i / w for i, w in zip(by_rank["imbalance_ns"], by_rank["wait_ns"], strict=True)])


def test_a_wait_is_told_apart_into_more_work_and_a_late_start():
    """Two ranks, one all-reduce after a previous one that ended at 0. Rank 0 computes 5 µs, rank 1 1 µs: rank 1's
    4 µs wait is all more work elsewhere. Then the same work on both, rank 0 starting it 3 µs late: rank 1's wait is
    none of it more work."""
    from kernelscope.analyze.ranks.communication import communication
    from kernelscope.contracts.tables import conform_kernels

    def run(rank0, rank1):
        rows = []
        for rank, (work_start, work_dur, arrive) in enumerate((rank0, rank1)):
            rows += [("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", rank, "decode", -1000, 1000, "communication"),
                     ("gemv", rank, "decode", work_start, work_dur, "GEMV"),
                     ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", rank, "decode", arrive, 500, "communication")]
        frame = pl.DataFrame(rows, schema=["name", "rank", "phase", "start_ns", "dur_ns", "category"], orient="row")
        frame = frame.with_columns(pl.lit("kernel").alias("kind"), pl.lit("NCCL").alias("library"),
                                   pl.int_range(pl.len()).alias("kernel_id"), pl.col("rank").alias("device"))
        return communication(conform_kernels(frame)).instances.filter(pl.col("seq") == 1).sort("rank")

    more_work = run((0, 5000, 5000), (0, 1000, 1000))
    assert more_work["wait_ns"].to_list() == [0, 4000] and more_work["imbalance_ns"].to_list() == [0, 4000]
    late_start = run((3000, 1000, 4000), (0, 1000, 1000))
    assert late_start["wait_ns"].to_list() == [0, 3000] and late_start["imbalance_ns"].to_list() == [0, 0]


@pytest.mark.slow
def test_the_ranks_table_gives_each_rank_its_work_less_its_waits(tmp_path):
    """Device time less the waits inside collectives, per rank; both read from the two trace files in plain Python
    (waits: the n-th collective of each name on each rank against the later of the two starts)."""
    out = tmp_path / "run"
    assert main(["-q", "import", *map(str, RANKS), "--out", str(out), "--lang", "en"]) == 0
    waits = _waits_us()
    table = pl.read_csv(out / "report" / "tables" / "ranks.csv").sort("rank")
    for rank, path in enumerate(RANKS):
        row = table.row(rank, named=True)
        assert row["device_time_ns"] == pytest.approx(_device_total_us(path) * 1e3, abs=2000)
        assert row["working_ns"] == pytest.approx((_device_total_us(path) - waits[rank]) * 1e3, abs=2000)
    assert "Less waiting in collectives" in (out / "report" / "report.md").read_text()


@pytest.mark.slow
def test_the_closing_lines_name_the_rank_that_waits_longest(tmp_path, capsys):
    """`import` of the two ranks ends with a line on collectives: the rank that waits longest (read from the two trace
    files in plain Python) and its wait; a run of one rank has no such line."""
    import re

    waits = _waits_us()
    worst = waits.index(max(waits))
    assert main(["import", *map(str, RANKS), "--out", str(tmp_path / "two"), "--no-report"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("  collectives:"))
    shown = re.search(rf"rank {worst} waits longest inside them, ([\d.,]+) (ms|µs)", line)
    assert shown is not None, line
    value_us = float(shown.group(1).replace(",", "")) * (1000 if shown.group(2) == "ms" else 1)
    assert value_us == pytest.approx(waits[worst], rel=1e-3)
    assert "of that wait is the other ranks' extra work" in line
    assert main(["import", str(RANKS[0]), "--out", str(tmp_path / "one"), "--no-report"]) == 0
    assert "collectives:" not in capsys.readouterr().out
