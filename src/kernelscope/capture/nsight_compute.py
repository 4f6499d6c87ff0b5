"""Drive the Nsight Compute CLI: find it, ask which metrics the device has, profile a command, export CSV."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from pathlib import Path

from kernelscope.errors import UserError

# Tensor-core work: the per-source-type totals `sm__ops_path_tensor_src_<type>[_dst_<type>].sum` (the `_op_*`
# and `_sparsity_*` variants split the same work further and would count it twice). Requested here, read by
# load/ncu.py.
TENSOR_OPS = re.compile(r"^sm__ops_path_tensor_src_[a-z0-9]+(?:_dst_[a-z0-9]+)?\.sum$")

DEFAULT_SECTIONS = ["SpeedOfLight", "MemoryWorkloadAnalysis", "Occupancy", "SpeedOfLight_RooflineChart",
                    "SchedulerStats", "LaunchStats"]
# Counters beyond the sections: FLOPs per precision and pipe, DRAM bytes read and written. Only those the
# device reports are requested (an unknown metric name makes ncu fail).
WANTED_METRICS = [
    "sm__sass_thread_inst_executed_op_dfma_pred_on.sum", "sm__sass_thread_inst_executed_op_dadd_pred_on.sum",
    "sm__sass_thread_inst_executed_op_dmul_pred_on.sum", "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "sm__sass_thread_inst_executed_op_fadd_pred_on.sum", "sm__sass_thread_inst_executed_op_fmul_pred_on.sum",
    "sm__sass_thread_inst_executed_op_hfma_pred_on.sum", "sm__sass_thread_inst_executed_op_hadd_pred_on.sum",
    "sm__sass_thread_inst_executed_op_hmul_pred_on.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
    "dram__bytes.sum.per_second", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__inst_executed_pipe_tensor.sum",
]


def find_ncu() -> str:
    candidates = [shutil.which("ncu"), "/usr/local/cuda/bin/ncu", *sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"))]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise UserError("ncu (Nsight Compute CLI) not found: install Nsight Compute, or put ncu on PATH")


def available_metrics(ncu: str) -> set[str]:
    """Base metric names the present device reports (`ncu --query-metrics`)."""
    out = _run([ncu, "--query-metrics"], timeout=120)
    names = set()
    for line in out.stdout.splitlines():
        match = re.match(r"^([a-z0-9_]+__[A-Za-z0-9_]+)\s", line)
        if match:
            names.add(match.group(1))
    return names


def choose_metrics(available: set[str]) -> list[str]:
    chosen = [m for m in WANTED_METRICS if m.split(".")[0] in available]
    chosen += sorted(f"{m}.sum" for m in available if TENSOR_OPS.match(f"{m}.sum"))
    return chosen


def profile_command(
    ncu: str, report: Path, command: list[str], *, nvtx_include: list[str], kernel_regex: str, launches: int,
    sections: list[str], metrics: list[str], timeout: float, nvtx_exclude: list[str] | None = None,
) -> subprocess.CompletedProcess:
    args = [
        ncu, "--clock-control", "none", "--target-processes", "all", "--nvtx",
        *[a for r in nvtx_include for a in ("--nvtx-include", r)],
        *[a for r in nvtx_exclude or [] for a in ("--nvtx-exclude", r)],
        "--kernel-name-base", "function", "--kernel-name", f"regex:{kernel_regex}",
        "--filter-mode", "per-launch-config", "--launch-count", str(launches),
        *[a for s in sections for a in ("--section", s)],
    ]
    if metrics:
        args += ["--metrics", ",".join(metrics)]
    args += ["--export", str(report), "--force-overwrite", *command]
    return _run(args, timeout=timeout)


def export_csv(ncu: str, report: Path, page: str, out: Path) -> Path:
    result = _run([ncu, "--import", str(report), "--csv", "--page", page, "--print-kernel-base", "demangled"],
                  timeout=600)
    out.write_text(result.stdout, encoding="utf-8")
    return out


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    try:
        result = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise UserError(f"ncu did not finish within {timeout:.0f} s (use fewer --top kernels or --launches)") from None
    except OSError as exc:
        raise UserError(f"cannot start {args[0]}: {exc.strerror}") from None
    text = result.stdout + result.stderr
    if "ERR_NVGPUCTRPERM" in text:
        raise UserError("ncu: no permission to read GPU performance counters (ERR_NVGPUCTRPERM): run as root, or "
                        "allow counter access (NVreg_RestrictProfilingToAdminUsers=0)")
    if "LibraryNotLoaded" in text:
        raise UserError("ncu: the profiling library did not load on this machine (LibraryNotLoaded): hardware "
                        "counters are not available here (e.g. a sandboxed VM)")
    if result.returncode != 0:
        tail = " | ".join(line for line in text.strip().splitlines()[-3:] if line.strip())
        raise UserError(f"ncu failed (exit {result.returncode}): {tail}")
    return result
