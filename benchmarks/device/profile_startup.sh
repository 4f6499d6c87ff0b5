#!/usr/bin/env bash
# Device run: what the default GPU profile does before its first step, and its report with 4 or 8 figure helpers.
# Writes under $OUT: startup.json (cProfile until the first step), importtime.txt (the slowest imports), micro.txt
# (torch, transformers and CUDA start-up alone, 3 runs each), helpers-<n>-<k>.json (benchmarks/profile_overhead.py).
set -u -o pipefail
OUT=${OUT:-device-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPYCACHEPREFIX=/tmp/pycache
unset PYTHONDONTWRITEBYTECODE
source benchmarks/device/small_wheels.sh
export PYTHONPATH="$PWD/src$SITE"
python3 benchmarks/profile_overhead.py --out /tmp/warm.json > /tmp/warm.log 2>&1 || tail -5 /tmp/warm.log
python3 -X importtime benchmarks/profile_startup.py --out "$OUT/startup.json" > /tmp/startup.log 2> /tmp/importtime.log \
  || tail -5 /tmp/startup.log
python3 - /tmp/importtime.log > "$OUT/importtime.txt" <<'PY'
import sys
rows = []
for line in open(sys.argv[1]):
    if line.startswith("import time:") and "|" in line and "cumulative" not in line:
        own, cumulative, name = line[len("import time:"):].split("|")
        rows.append((int(cumulative), int(own), name.rstrip()))
print("slowest imports by cumulative time (us), depth shown by indent")
for cumulative, own, name in sorted(rows, reverse=True)[:80]:
    print(f"{cumulative:>10} {own:>9} {name}")
print("\nslowest by own time")
for cumulative, own, name in sorted(rows, key=lambda r: -r[1])[:40]:
    print(f"{cumulative:>10} {own:>9} {name}")
PY
{
  for k in 1 2 3; do
    for code in "import torch" "import torch, transformers" \
        "import torch; from transformers import AutoConfig, Qwen2ForCausalLM" \
        "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()"; do
      TIMEFORMAT="%R s  $code"
      time python3 -c "$code"
    done
  done
} > "$OUT/micro.txt" 2>&1
for k in 1 2; do
  for n in 4 8; do
    python3 benchmarks/profile_overhead.py --figure-helpers "$n" --out "$OUT/helpers-$n-$k.json" > /tmp/h.log 2>&1 \
      || tail -5 /tmp/h.log
  done
done
for f in "$OUT"/helpers-*.json; do
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[1].split('/')[-1], round(r['outside_model_runs_s'],2), [(s['step'][:26], round(s['seconds'],2)) for s in r['steps'] if not s['step'].startswith(('Warm','Timing','Profiling'))], 'before steps', round(r['total_s']-sum(s['seconds'] for s in r['steps']),2))" "$f"
done | tee "$OUT/summary.txt"
