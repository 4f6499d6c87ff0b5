#!/usr/bin/env bash
# Device run, two CPU-side measurements on the GPU machine's 16 cores: reading a 330 MB Kineto trace with 1 to 16
# decode processes (benchmarks/decode_workers.py), then where the default GPU profile's time goes outside the
# model's own runs (benchmarks/profile_overhead.py), three times. The image writes no bytecode
# (PYTHONDONTWRITEBYTECODE=1), so every process compiles torch's and transformers' modules again; run 1 keeps that, runs 2 and 3 cache bytecode under a prefix first (as
# any installed machine has it) and show what kernelscope itself adds. Writes under $OUT.
set -u -o pipefail
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source benchmarks/device/small_wheels.sh
export PYTHONPATH=$PWD/src:${PYTHONPATH:-}$SITE PYTHONUNBUFFERED=1
log() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/steps.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.txt"
{ echo "commit ${KS_COMMIT:-unknown}"; echo "PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-unset}"
  nproc; } >> "$OUT/env.txt"
log "decode workers"
python3 benchmarks/make_big_trace.py /tmp/big330.json --mb 330 \
  --source tests/data/kineto/h200-llama-3-8b-p16-n3.trace.json.gz > /dev/null
python3 benchmarks/decode_workers.py --trace /tmp/big330.json --workers 1,2,4,6,8,12,16 --repeats 3 \
  --out "$OUT/decode-workers.json" > /tmp/decode-workers.log 2>&1; log "decode workers rc=$?"
tail -5 /tmp/decode-workers.log
log "run 1 (no bytecode cache)"
python3 benchmarks/profile_overhead.py --out "$OUT/run1.json" > /tmp/run1.log 2>&1; log "run 1 rc=$?"
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/pycache
for i in 2 3; do
  log "run $i (bytecode cached under $PYTHONPYCACHEPREFIX)"
  python3 benchmarks/profile_overhead.py --out "$OUT/run$i.json" > "/tmp/run$i.log" 2>&1; log "run $i rc=$?"
done
for i in 1 2 3; do
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[1], round(r['total_s'],1), round(r['outside_model_runs_s'],1), [(s['step'][:40], round(s['seconds'],2)) for s in r['steps']])" "$OUT/run$i.json"
done | tee "$OUT/summary.txt"
