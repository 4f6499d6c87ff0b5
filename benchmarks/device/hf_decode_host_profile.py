"""Where the host time of an eager transformers decode step goes (the `hf_decode` workload of
critical_path_check.py, spins of zero length): per-step wall time, kernels launched per step, and the Python
functions that take the host's time (cProfile, top entries by own time), and the step again with one thread and
with the cuDNN attention backend disabled. Writes one JSON to --out.

    python3 benchmarks/device/hf_decode_host_profile.py --out DIR [--steps 20]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from critical_path_check import CASES, _hf_decode  # noqa: E402


def _timed_ms(step, steps: int) -> list[float]:
    """Each of `steps` calls of `step`, synchronised, in ms."""
    import torch

    times = []
    for _ in range(steps):
        started = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - started) * 1e3)
    return times


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    import torch
    import transformers

    case = next(c for c in CASES if c.workload == "hf_decode")
    step = _hf_decode(case, {"cycles": 0})
    result: dict = {"torch": torch.__version__, "transformers": transformers.__version__,
                    "threads": torch.get_num_threads()}
    for _ in range(30):
        step()
    torch.cuda.synchronize()
    times = _timed_ms(step, args.steps)
    result["step_ms_median"] = statistics.median(times)
    result["step_ms"] = [round(t, 3) for t in times]
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        step()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    result["kernels_per_step"] = len(kernels)
    result["cpu_ops_top"] = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(40)
    result["cprofile_tottime"] = text.getvalue()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(40)
    result["cprofile_cumulative"] = text.getvalue()
    torch.set_num_threads(1)
    result["step_ms_median_one_thread"] = statistics.median(_timed_ms(step, args.steps))
    # The cuDNN attention backend's host time per call is the suspect: the same steps with it disabled (SDPA then
    # picks the flash or memory-efficient kernel).
    torch.backends.cuda.enable_cudnn_sdp(False)
    for _ in range(10):
        step()
    result["step_ms_median_without_cudnn_sdp"] = statistics.median(_timed_ms(step, args.steps))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "hf-decode-host-profile.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if not isinstance(v, str)}, indent=1))
    print(result["cprofile_tottime"][:6000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
