"""Validation of the critical path's re-timing by intervention, on one GPU (benchmarks/device/critical_path_check.sh).

Each case records a workload twice under torch.profiler, as it is (baseline) and with one kind of work made slower
by a known amount: a spin kernel (`torch.cuda._sleep`, kernel `spin_kernel`) after some of its kernels. Both traces
are imported with `kernelscope import`; `kernelscope whatif INTERVENED --speedup '*spin_kernel*=1000000'` predicts
each step without the spins, and the prediction is compared with the baseline as re-measured:

  predicted change = intervened step − re-timed step (whatif),   measured change = intervened step − baseline step,

per step, means over the profiled steps but the first. Beside them: what adding up the spins' device time would have
said (the sum), and each variant's step time without the profiler. Cases:
- `device_bound_on_path`: a chain of large bf16 GEMMs (device-bound), a spin after every second GEMM, same stream;
- `side_stream_off_path`: the same chain, a spin on a second stream that the main stream joins at the step's end,
  shorter than the chain: off the critical path (predicted ≈ 0);
- `light_chain_side_stream_off_path`: a chain of small elementwise kernels the host launches one by one (the GPU
  mostly idle, so the side stream's spin competes for no SM), a spin of 5 ms on a second stream joined at the step's
  end, shorter than the chain (about 9 ms unprofiled): off the critical path (predicted ≈ 0). The spin is long so
  that the intervention is large against the step's own noise (a host-bound step varies by ~1% from step to step). The GEMM chain's side spin holds an SM that a GEMM's tiles wait for, so
  its step grows by tens of µs that no schedule of the trace shows;
- `hf_decode_launch_bound_10us` / `_100us`: eager decode of a Qwen2-shaped transformers model (random weights, batch
  1), a spin after every MLP down-projection: launch-bound, so most of the spin hides behind the host's launches;
- `hf_decode_exposed_20ms`: the same with spins long enough to outlast the host's launches of a layer, so part of
  each spin reaches the step's wall: the re-timing has to tell which part.

A case passes when |predicted − measured| ≤ 10% of |measured|, or, where both are small (under 2% of the baseline
step), when they differ by under 2% of the baseline step; an off-path case (predicted ≈ 0) when they differ by under
10% of what the spins' change added up to (the intervention's own size). Steps are marked with kernelscope's range
names (`ks.phase:decode:<i>`, docs/run-format.md), so the import finds them.

    python3 benchmarks/device/critical_path_check.py --out DIR [--cases a,b] [--steps 12]
    python3 benchmarks/device/critical_path_check.py analyse BASE.json INTERVENED.json --out DIR   (CPU: the comparison)

torch is imported only by the recording functions: the analysis runs anywhere kernelscope does.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

SPIN_TARGET = "*spin_kernel*"  # torch.cuda._sleep launches at::cuda::(anonymous namespace)::spin_kernel
# The baseline keeps the spins, SHORTER times shorter: the intervention changes how long a kernel runs, not how
# many kernels there are (removing a kernel also removes its launch and its place in the stream, which a speed-up
# does not). The prediction is `whatif --speedup SPIN=SHORTER` on the intervened run.
SHORTER = 10
TOLERANCE = 0.10  # of the measured change
SMALL = 0.02  # of the baseline step: changes below this count as none
CLOCK_HZ = 1.98e9  # H200 SM boost clock: cycles of the spin per second (its real length is read from the trace)


@dataclass
class Case:
    name: str
    workload: str  # gemm_chain, hf_decode
    spin_us: float  # the spin's length
    where: str  # same_stream, side_stream, down_proj
    expect: str  # on_path, off_path, partly


CASES = [
    Case("device_bound_on_path", "gemm_chain", 100.0, "same_stream", "on_path"),
    Case("side_stream_off_path", "gemm_chain", 300.0, "side_stream", "off_path"),
    Case("light_chain_side_stream_off_path", "small_chain", 5000.0, "side_stream", "off_path"),
    Case("hf_decode_launch_bound_10us", "hf_decode", 10.0, "down_proj", "partly"),
    Case("hf_decode_launch_bound_100us", "hf_decode", 100.0, "down_proj", "partly"),
    Case("hf_decode_exposed_20ms", "hf_decode", 20000.0, "down_proj", "partly"),
]


# ---- the comparison (CPU)

def kernelscope(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-m", "kernelscope", "-q", *args], capture_output=True, text=True, env=env,
                          timeout=600)


def imported(trace: Path, out: Path) -> Path:
    result = kernelscope("import", str(trace), "--out", str(out), "--no-report")
    if result.returncode:
        raise RuntimeError(f"import {trace}: {result.stderr.strip()}")
    return out


def step_times(run: Path, phase: str = "decode") -> list[int]:
    """The run's steps of `phase`, each one's wall time (ns) in step order (critical_path.parquet holds them)."""
    import polars as pl

    segments = pl.read_parquet(run / "critical_path.parquet").filter(pl.col("phase") == phase)
    per = segments.group_by("step").agg(pl.col("dur_ns").sum()).sort("step")
    return per["dur_ns"].to_list()


def analyse(base_trace: Path, intervened_trace: Path, work: Path, target: str = SPIN_TARGET,
            phase: str = "decode") -> dict:
    """The measured and predicted change of each step (means over the steps but the first) and the verdict."""
    work.mkdir(parents=True, exist_ok=True)
    base = imported(base_trace, work / "base")
    intervened = imported(intervened_trace, work / "intervened")
    study_dir = work / "whatif"
    result = kernelscope("whatif", str(intervened), "--speedup", f"{target}={SHORTER}", "--out", str(study_dir))
    if result.returncode:
        return {"error": result.stderr.strip()}
    study = json.loads((study_dir / "speedup.json").read_text())
    rows = [r for r in study["steps"] if r["phase"] == phase]
    rows.sort(key=lambda r: r["step"] if r["step"] is not None else -1)
    base_steps = step_times(base, phase)
    count = min(len(rows), len(base_steps))
    keep = range(1, count) if count > 1 else range(count)  # the first step warms caches and allocators
    # Medians: a host-bound step's time has outliers (a page fault, the other processes of the host).
    measured_b = statistics.median(base_steps[i] for i in keep)
    measured_i = statistics.median(rows[i]["step_ns"] for i in keep)
    retimed = statistics.median(rows[i]["new_step_ns"] for i in keep)
    summed = statistics.median(rows[i]["sum_saved_ns"] for i in keep)
    predicted, measured = measured_i - retimed, measured_i - measured_b
    small = SMALL * measured_b
    if abs(measured) >= small:
        passed = abs(predicted - measured) <= TOLERANCE * abs(measured)
        rule = f"|predicted − measured| ≤ {TOLERANCE:.0%} of |measured|"
    else:
        passed = abs(predicted - measured) <= small
        rule = f"both under {SMALL:.0%} of the baseline step: |predicted − measured| ≤ {SMALL:.0%} of it"
    return {
        "steps_compared": len(keep), "baseline_step_ns": measured_b, "intervened_step_ns": measured_i,
        "retimed_step_ns": retimed, "predicted_change_ns": predicted, "measured_change_ns": measured,
        "sum_of_spins_ns": summed, "error_ns": predicted - measured,
        "error_of_measured": (predicted - measured) / measured if measured else None,
        "rule": rule, "passed": passed, "matched_launches": study["speedups"][0]["device_nodes"],
        "baseline_path_shares": _shares(base, phase),
    }


def _shares(run: Path, phase: str) -> dict | None:
    summary = json.loads((run / "summary.json").read_text()).get("critical_path") or {}
    return (summary.get(phase) or {}).get("shares")


def analyse_interleaved(trace: Path, work: Path, target: str = SPIN_TARGET, phase: str = "decode",
                        expect: str = "on_path") -> dict:
    """One trace of alternating steps (even: spins SHORTER times shorter; odd: full length). Measured: the median
    odd step less the median even step. Predicted: `whatif --speedup SPIN=SHORTER` on the odd steps, their median
    step less their median re-timed step (re-timed, an odd step is an even one if the model is right)."""
    work.mkdir(parents=True, exist_ok=True)
    run = imported(trace, work / "run")
    study_dir = work / "whatif"
    result = kernelscope("whatif", str(run), "--speedup", f"{target}={SHORTER}", "--out", str(study_dir))
    if result.returncode:
        return {"error": result.stderr.strip()}
    study = json.loads((study_dir / "speedup.json").read_text())
    rows = [r for r in study["steps"] if r["phase"] == phase and r["step"] is not None and r["step"] > 1]
    short = [r for r in rows if r["step"] % 2 == 0]  # steps 0 and 1 warm the profiler: left out
    long = [r for r in rows if r["step"] % 2 == 1]
    measured_short = statistics.median(r["step_ns"] for r in short)
    measured_long = statistics.median(r["step_ns"] for r in long)
    retimed_long = statistics.median(r["new_step_ns"] for r in long)
    predicted, measured = measured_long - retimed_long, measured_long - measured_short
    small = SMALL * measured_short
    spins = statistics.median(r["sum_saved_ns"] for r in long)
    if expect == "off_path":
        passed = abs(predicted - measured) <= TOLERANCE * spins
        rule = f"off the path: |predicted − measured| ≤ {TOLERANCE:.0%} of the spins' change"
    elif abs(measured) >= small:
        passed = abs(predicted - measured) <= TOLERANCE * abs(measured)
        rule = f"|predicted − measured| ≤ {TOLERANCE:.0%} of |measured|"
    else:
        passed = abs(predicted - measured) <= small
        rule = f"both under {SMALL:.0%} of the short step: |predicted − measured| ≤ {SMALL:.0%} of it"
    return {
        "pairs": min(len(short), len(long)), "short_step_ns": measured_short, "long_step_ns": measured_long,
        "retimed_long_step_ns": retimed_long, "predicted_change_ns": predicted, "measured_change_ns": measured,
        "spins_saved_ns": spins, "error_ns": predicted - measured,
        "error_of_measured": (predicted - measured) / measured if measured else None, "rule": rule, "passed": passed,
        "matched_launches": study["speedups"][0]["device_nodes"], "path_shares": _shares(run, phase),
    }


# ---- the workloads (GPU)

def record(case: Case, trace: Path, steps: int) -> dict:
    """Run `case` with its spins alternately SHORTER times shorter (even steps) and at full length (odd steps), in
    one process: warm-up, plain timing, then `steps` profiled steps into `trace`. Interleaving keeps the clocks,
    the host's load and the caches the same for both variants (separate runs drifted by 10% and more)."""
    import torch

    torch.manual_seed(0)
    spin = {"cycles": _cycles(case.spin_us / SHORTER)}
    step = {"gemm_chain": _gemm_chain, "small_chain": _small_chain, "hf_decode": _hf_decode}[case.workload](case, spin)

    def variant(i: int) -> None:
        spin["cycles"] = _cycles(case.spin_us if i % 2 else case.spin_us / SHORTER)
        step()

    # Warm-up until the steps settle (the first HF model of a process ran 4x slower for its first dozens of steps):
    # at least 20 steps and 2 s, then until the last pairs are within 5% of each other.
    times: list[float] = []
    started_all = time.perf_counter()
    while len(times) < 200:
        started = time.perf_counter()
        variant(len(times))
        torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
        last = times[-6::2]
        if len(times) >= 20 and time.perf_counter() - started_all > 2 and max(last) <= 1.05 * min(last):
            break
    plain: list[list[float]] = [[], []]
    for i in range(steps):
        started = time.perf_counter()
        variant(i)
        torch.cuda.synchronize()
        plain[i % 2].append((time.perf_counter() - started) * 1e9)
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as profiler:
        for i in range(steps):
            with torch.profiler.record_function(f"ks.phase:decode:{i}"):
                variant(i)
        torch.cuda.synchronize()
    profiler.export_chrome_trace(str(trace))
    return {"plain_short_step_ns": statistics.median(plain[0]), "plain_long_step_ns": statistics.median(plain[1])}


def _cycles(us: float) -> int:
    return int(us * 1e-6 * CLOCK_HZ)


def _gemm_chain(case: Case, spin: dict):
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True
    main = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    x0 = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    weights = [torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) / 64 for _ in range(8)]

    def step() -> None:
        x = x0
        side.wait_stream(main)
        if case.where == "side_stream":
            with torch.cuda.stream(side):
                torch.cuda._sleep(spin["cycles"])
        for i, w in enumerate(weights):
            x = torch.nn.functional.gelu(x @ w)
            if case.where == "same_stream" and i % 2 == 1:
                torch.cuda._sleep(spin["cycles"])
        main.wait_stream(side)
        float(x[0, 0])  # the step's result read back, as a decode step reads its token
    return step


def _small_chain(case: Case, spin: dict):
    """Small elementwise kernels launched one by one (a few µs of GPU work each, the host slower than the GPU)."""
    import torch

    main = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    x0 = torch.randn(4096, device="cuda")

    def step() -> None:
        side.wait_stream(main)
        with torch.cuda.stream(side):
            torch.cuda._sleep(spin["cycles"])
        x = x0
        for _ in range(400):
            x = x * 1.0001 + 0.0001
        main.wait_stream(side)
        float(x[0])
    return step


def _hf_decode(case: Case, spin: dict):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(hidden_size=896, intermediate_size=4864, num_hidden_layers=8, num_attention_heads=14,
                         num_key_value_heads=2, vocab_size=32000, max_position_embeddings=4096)
    model = Qwen2ForCausalLM(config).to("cuda", torch.bfloat16).eval()
    for layer in model.model.layers:  # every down-projection is followed by a spin of the current length
        down = layer.mlp.down_proj
        original = down.forward

        def forward(x, original=original):
            out = original(x)
            torch.cuda._sleep(spin["cycles"])
            return out
        down.forward = forward
    prompt = torch.randint(0, config.vocab_size, (1, 64), device="cuda")
    state = {}

    @torch.no_grad()
    def step() -> None:
        if "past" not in state or state["length"] > 512:  # a fresh prefill now and then keeps the cache short
            out = model(input_ids=prompt, use_cache=True)
            state.update(past=out.past_key_values, length=prompt.shape[1])
            state["token"] = out.logits[:, -1:].argmax(-1)
        out = model(input_ids=state["token"], past_key_values=state["past"], use_cache=True)
        state["past"], state["length"] = out.past_key_values, state["length"] + 1
        state["token"] = out.logits[:, -1:].argmax(-1)
        int(state["token"][0, 0])  # generate() reads every token back
    return step


def run_cases(out: Path, names: list[str], steps: int) -> dict:
    results = {"cases": {}, "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    for case in [c for c in CASES if c.name in names]:
        work = out / case.name
        work.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        try:
            plain = record(case, work / "trace.json", steps)
            compared = analyse_interleaved(work / "trace.json", work / "runs", expect=case.expect)
            plain["plain_measured_change_ns"] = plain["plain_long_step_ns"] - plain["plain_short_step_ns"]
            results["cases"][case.name] = {**asdict(case), **compared, **plain,
                                           "seconds": round(time.perf_counter() - started, 1)}
        except Exception as exc:  # one case failing leaves the others' results
            results["cases"][case.name] = {**asdict(case), "error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps({case.name: results["cases"][case.name]}, default=str), flush=True)
        for trace in work.glob("*.json"):  # kept gzipped (the runs beside them hold what the check reads)
            with trace.open("rb") as raw, gzip.open(trace.with_suffix(".json.gz"), "wb") as packed:
                shutil.copyfileobj(raw, packed)
            trace.unlink()
    done = [c for c in results["cases"].values() if "passed" in c]
    results["passed"] = sum(c["passed"] for c in done)
    results["cases_run"] = len(results["cases"])
    return results


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "analyse":
        parser = argparse.ArgumentParser(prog="critical_path_check.py analyse")
        parser.add_argument("base", type=Path)
        parser.add_argument("intervened", type=Path)
        parser.add_argument("--out", type=Path, required=True)
        parser.add_argument("--target", default=SPIN_TARGET)
        parser.add_argument("--phase", default="decode")
        args = parser.parse_args(argv[1:])
        result = analyse(args.base, args.intervened, args.out, args.target, args.phase)
        (args.out / "analysis.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
        print(json.dumps(result, indent=1, default=str))
        return 0
    parser = argparse.ArgumentParser(prog="critical_path_check.py")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cases", default=",".join(c.name for c in CASES))
    parser.add_argument("--steps", type=int, default=26)
    args = parser.parse_args(argv)
    names = [n for n in args.cases.split(",") if n]
    unknown = sorted(set(names) - {c.name for c in CASES})
    if unknown:
        parser.error(f"unknown cases: {', '.join(unknown)}")
    args.out.mkdir(parents=True, exist_ok=True)
    results = run_cases(args.out, names, args.steps)
    (args.out / "critical_path_check.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    print(f"passed {results['passed']} of {results['cases_run']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
