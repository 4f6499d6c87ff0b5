"""One node, many ranks: N rank traces of M MB each (optionally gzip-compressed), built from a real two-rank capture
with matching collectives, imported by one `kernelscope import` with its report; wall time, CPU time of the
process tree, how busy the cores were, and peak memory of the tree against the input's size.

    python benchmarks/many_ranks.py --ranks 8 --mb 2000 --work /tmp/ks-ranks [--jobs N] [--cluster local] [--gzip]
    python benchmarks/many_ranks.py --ranks 64 --mb 1500 --gzip --no-report --work /tmp/ks-ranks64

The ranks are tests/data/multi_gpu/deepseek_v3_ep2_rank{0,1}.json.gz (`kernelscope profile --gpus 2`, DeepSeek-V3
cut to 3 layers, expert parallel over 2 H200; NCCL collectives with their args). Each of the two is grown to M MB
by benchmarks/make_big_trace.py, rank 1 with exactly as many repeated decode steps as rank 0, so that every rank
holds the same sequence of collectives; rank r is a copy of base r mod 2 (files are ranks in their order). Built
once under --work (outside the repository; never committed); building is not timed. The import is one process
tree timed whole: wall, user+system CPU (the larger of resource.getrusage of children and the
processes' own times sampled from /proc), busy cores = CPU / wall, peak summed RSS
sampled every 100 ms (/proc). Writes a JSON record to --out (default benchmarks/results/many-ranks-<date>.json).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _provenance import commit  # noqa: E402
from make_big_trace import build  # noqa: E402

SOURCES = [ROOT / "tests/data/multi_gpu" / f"deepseek_v3_ep2_rank{r}.json.gz" for r in (0, 1)]


def _compress(plain: Path) -> Path:
    packed = plain.with_name(plain.name + ".gz")
    with plain.open("rb") as src, gzip.open(packed, "wb", compresslevel=1) as dst:
        shutil.copyfileobj(src, dst, 16 << 20)
    plain.unlink()
    return packed


def bases(work: Path, mb: float, packed: bool) -> list[Path]:
    """The two grown ranks (built once): rank 0 to the size, rank 1 to as many decode steps."""
    names = [work / f"base{r}-{int(mb)}mb.json" for r in (0, 1)]
    done = [n.with_name(n.name + ".gz") if packed else n for n in names]
    if all(d.exists() for d in done):
        return done
    first = build(SOURCES[0], names[0], int(mb * 1e6))
    build(SOURCES[1], names[1], 0, copies_wanted=first["decode_copies"])
    if packed:
        with ProcessPoolExecutor(2) as pool:
            done = list(pool.map(_compress, names))
    return done


def rank_files(work: Path, base: list[Path], ranks: int) -> list[Path]:
    files = []
    for r in range(ranks):
        target = work / "ranks" / f"rank{r:03d}{''.join(base[r % 2].suffixes[-2:])}"
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists() or target.stat().st_size != base[r % 2].stat().st_size:
            shutil.copyfile(base[r % 2], target)
        files.append(target)
    return files


def tree_rss(root: int, cpu_ticks: dict[int, int] | None = None) -> int:
    """Summed resident memory of process `root` and its descendants, from /proc (no psutil on the device); each
    one's CPU time so far (user+system clock ticks) goes into `cpu_ticks` (helpers of a fork server are not our
    children: their time never reaches getrusage)."""
    parent, rss, ticks = {}, {}, {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = Path(f"/proc/{entry.name}/stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            pid = int(entry.name)
            parent[pid] = int(fields[1])
            rss[pid] = int(fields[21]) * page
            ticks[pid] = int(fields[11]) + int(fields[12])
    members, grew = {root}, True
    while grew:
        more = {pid for pid, ppid in parent.items() if ppid in members} - members
        grew = bool(more)
        members |= more
    if cpu_ticks is not None:
        for pid in members:
            cpu_ticks[pid] = max(cpu_ticks.get(pid, 0), ticks.get(pid, 0))
    return sum(rss.get(pid, 0) for pid in members)


def measured(cmd: list[str], env: dict[str, str], limit_s: float) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    peak, timed_out, ticks = 0, False, {}
    while proc.poll() is None:
        peak = max(peak, tree_rss(proc.pid, ticks))
        if time.perf_counter() - started > limit_s:  # the whole tree, as a user's Ctrl-C would
            timed_out = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 2)
            break
        time.sleep(0.1)
    out, err = proc.communicate()
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    waited = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    sampled = sum(ticks.values()) / os.sysconf("SC_CLK_TCK")
    cpu = max(waited, sampled)
    return {"cpu_waited_s": round(waited, 2), "cpu_sampled_s": round(sampled, 2),"returncode": proc.returncode, "timed_out": timed_out, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "busy_cores": round(cpu / wall, 2), "peak_rss_bytes": peak, "stdout_tail": out[-2000:],
            "stderr_tail": err[-3000:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--mb", type=float, default=2000.0, help="uncompressed size of each rank file (MB)")
    parser.add_argument("--gzip", action="store_true", help="rank files gzip-compressed on disk")
    parser.add_argument("--no-report", action="store_true", help="import without the report")
    parser.add_argument("--jobs", type=int, help="import --jobs (default: the import's own choice)")
    parser.add_argument("--cluster", help="import --cluster ADDRESS (e.g. local) instead of processes")
    parser.add_argument("--work", type=Path, default=Path("/tmp/kernelscope-many-ranks"))
    parser.add_argument("--limit", type=float, default=1e9, help="stop the import after this many seconds")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if ROOT in args.work.resolve().parents:
        raise SystemExit("--work must be outside the repository")
    args.work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    files = rank_files(args.work, bases(args.work, args.mb, args.gzip), args.ranks)
    built_s = time.perf_counter() - t0
    on_disk = sum(f.stat().st_size for f in files)
    plain = int(args.mb * 1e6) * args.ranks
    run = args.work / "run"
    shutil.rmtree(run, ignore_errors=True)
    cmd = [sys.executable, "-m", "kernelscope", "-q", "import", *map(str, files), "--out", str(run)]
    cmd += ["--no-report"] if args.no_report else []
    cmd += ["--jobs", str(args.jobs)] if args.jobs else []
    cmd += ["--cluster", args.cluster] if args.cluster else []
    load = os.getloadavg()
    result = measured(cmd, dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])), args.limit)
    summary = {}
    with contextlib.suppress(OSError, ValueError):
        summary = json.loads((run / "summary.json").read_text())
    record = {
        "benchmark": "many-ranks", "date": date.today().isoformat(), "commit": commit(),
        "machine": {"cores": os.cpu_count(), "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
                    "cpu": platform.processor() or platform.machine(), "python": platform.python_version(),
                    "load_average_before": load, "load_average_after": os.getloadavg()},
        "input": {"ranks": args.ranks, "mb_per_rank": args.mb, "gzip": args.gzip, "bytes_on_disk": on_disk,
                  "bytes_uncompressed_approx": plain, "sources": [str(s.relative_to(ROOT)) for s in SOURCES],
                  "built_s": round(built_s, 1)},
        "command": " ".join(["kernelscope -q import", f"<{args.ranks} rank files>", *cmd[5 + args.ranks:]]),
        "import": result,
        "peak_rss_over_input": round(result["peak_rss_bytes"] / plain, 3),
        "kernel_count": summary.get("kernel_count"),
        "goals": {"wall_s": 120 if args.ranks <= 8 else 600, "peak_rss_over_input": 0.5},
    }
    out = args.out or ROOT / "benchmarks/results" / f"many-ranks-{date.today().isoformat()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps({k: record[k] for k in ("input", "peak_rss_over_input", "kernel_count")}
                     | {"import": {k: v for k, v in result.items() if not k.endswith("_tail")}}, indent=2))
    if result["returncode"] != 0:
        print(result["stderr_tail"], file=sys.stderr)
    print(out)


if __name__ == "__main__":
    main()
