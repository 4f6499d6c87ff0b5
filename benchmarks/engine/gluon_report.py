"""The summary and the printed table of gluon_probe.py's result (the JSON it writes)."""

from __future__ import annotations

from persistent_host import log


def summarize(result: dict, threshold: float = 90.0) -> dict:
    """The best checked batch-1 variant of each kind (the one-launch chain with and without the barrier, the
    per-matrix launches, the baselines) and whether the best Gluon chain with the barrier streams above threshold %."""
    best: dict[str, dict] = {}
    for name, row in result.get("variants", {}).items():
        if row.get("batch") != 1 or not row.get("ok") or "pct_of_copy" not in row:
            continue
        kind = row["variant"]
        if kind not in best or row["pct_of_copy"] > best[kind]["pct_of_copy"]:
            best[kind] = {"name": name, "ms": row["ms"], "GBps": row["GBps"], "pct_of_copy": row["pct_of_copy"]}
    chain = best.get("chain_ws_sync")
    return {"threshold_pct": threshold, "best_by_kind": best,
            "chain_with_barrier_passes": bool(chain and chain["pct_of_copy"] > threshold)}


def print_table(result: dict) -> None:
    log("")
    log(f"copy {result['copy_GBps']:.0f} GB/s (weights-size buffer; end {result.get('copy_GBps_end', 0):.0f}), "
        f"1 GiB copy {result['copy_1GiB_GBps']:.0f} GB/s; weights {result['weight_bytes'] / 1e9:.3f} GB; "
        f"90% line {result['weight_bytes'] / (0.9 * result['copy_GBps']) / 1e6:.3f} ms")
    log(f"{'variant':50} {'mode':6} {'ms':>7} {'GB/s':>6} {'%copy':>6} {'rel_err':>8} {'max_abs':>8} ok")
    rows = sorted(result.get("variants", {}).items(), key=lambda kv: (kv[1].get("batch", 0), -kv[1].get("GBps", 0)))
    for name, row in rows:
        if "ms" not in row:
            log(f"{name:50} {row.get('mode', ''):6} {row.get('skipped') or row.get('error', '')[:70]}")
            continue
        log(f"{name:50} {row['mode']:6} {row['ms']:7.3f} {row['GBps']:6.0f} {row['pct_of_copy']:6.1f} "
            f"{row.get('rel_err', float('nan')):8.1e} {row.get('max_abs_err', float('nan')):8.1e} "
            f"{str(row.get('ok', '-'))[0]}")
