"""Tensor-core FLOPs a GEMM kernel executes, from the tile its name states (benchmarks/device/cost_check_analysis.py).

Nsight Compute counts tensor-core work per instruction (`sm__ops_path_tensor_src_*`), and a tensor core always
computes a whole tile: rows or columns past the problem's edge, or past a group's last row in a grouped GEMM, are
computed on zeros and counted. The analytic FLOPs are the useful 2·M·N·K; these give the whole-tile count a
launch executes, so that a measured count above the analytic one can be checked to be exactly the padding.

- cuBLAS's nvjet kernels: `nvjet_sm90_<types>_<A>x<B>_<K>x<stages>_<cx>x<cy>_…` — cuBLAS is column-major, so its
  tile's A runs along the torch output's columns (N) and B along its rows (M); the tile counts are rounded up to
  whole clusters (cx, cy); a split-K kernel (`splitK`) runs the K blocks in as many slices as the grid holds tiles
  over, each slice the same number of blocks.
- CUTLASS 3 grouped GEMMs (torch's `_grouped_mm`): the mainloop's cluster and tile shapes (`cute::tuple<C<M>,
  C<N>, C<K>>` each); each group's rows are padded to whole clusters of tiles, and the groups' sizes (per-expert
  token counts) are data the trace does not hold, so a count is checked to be whole tiles within the bounds the
  groups allow.
"""

from __future__ import annotations

import math
import re

_NVJET = re.compile(r"nvjet_sm\d+_[a-z0-9]+_(\d+)x(\d+)_(\d+)x(\d+)_(\d+)x(\d+)_")
# CollectiveMma<Mainloop…<stages, ClusterShape, schedule>, TileShape, …>
_SHAPE = r"cute::tuple<cute::C<(\d+)>, cute::C<(\d+)>, cute::C<(\d+)>>"
_CUTLASS_TILE = re.compile(rf"CollectiveMma<[\w:]*Mainloop\w*<\d+, {_SHAPE}, [\w:]+>, {_SHAPE}")


def _whole(count: int, multiple: int) -> int:
    return -(-count // multiple) * multiple


def nvjet_tile_flops(name: str, m: int, n: int, k: int, grid: tuple[int, int, int] | None) -> float | None:
    """The FLOPs an nvjet launch of the problem m × n × k executes on its tensor cores (whole tiles), or None when
    the name states no tile."""
    found = _NVJET.search(name)
    if not found or min(m, n, k) <= 0:
        return None
    along_n, along_m, tile_k, _stages, cluster_n, cluster_m = (int(x) for x in found.groups())
    tiles_n = _whole(math.ceil(n / along_n), cluster_n)
    tiles_m = _whole(math.ceil(m / along_m), cluster_m)
    k_done = k
    if "splitK" in name and grid:
        ctas = grid[0] * grid[1] * grid[2]
        if ctas % (tiles_n * tiles_m) == 0:
            slices = ctas // (tiles_n * tiles_m)
            k_done = math.ceil(math.ceil(k / tile_k) / slices) * slices * tile_k
    return 2.0 * tiles_n * along_n * tiles_m * along_m * k_done


def grouped_tile_rows(name: str) -> int | None:
    """The rows a CUTLASS grouped GEMM pads each group to: its tile's M times its cluster's (the scheduler hands
    out whole clusters of tiles per group), or None."""
    found = _CUTLASS_TILE.search(name)
    return int(found.group(1)) * int(found.group(4)) if found else None


def grouped_padding(name: str, m: int, n: int, k: int, groups: int | None, measured: float) -> dict | None:
    """Whether a grouped GEMM's measured tensor FLOPs are whole tiles of rows: the padded rows (measured ÷ 2·N·K),
    the tiles they make and the bounds the groups allow (every group's rows a whole number of tiles: M ÷ tile;
    every group one partial tile: that plus the groups)."""
    rows = grouped_tile_rows(name)
    if rows is None or not groups or min(m, n, k) <= 0:
        return None
    padded_rows = measured / (2.0 * n * k)
    tiles = padded_rows / rows
    low, high = math.ceil(m / rows), math.ceil(m / rows) + groups
    whole = abs(tiles - round(tiles)) < 1e-6
    return {"tile_rows": rows, "padded_rows": padded_rows, "tiles": tiles, "tiles_min": low, "tiles_max": high,
            "whole_tiles_within_bounds": whole and low <= round(tiles) <= high}
