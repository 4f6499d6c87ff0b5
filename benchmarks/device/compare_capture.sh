#!/usr/bin/env bash
# Device run for the comparison: the same workloads as the H200 fixtures and results, on another GPU, so
# `kernelscope compare` has two real device runs of one workload (and two batch sizes of one model):
# measured ceilings, the small fixture run (+ ncu on its top decode kernels), the default run at batch 1 and 8.
# Run from a checkout root on the GPU machine; writes under $OUT.
set -u -o pipefail
OUT=${OUT:-device-out}
W=/tmp/ks-compare
rm -rf "$W" && mkdir -p "$W/runs" "$W/calibration" "$OUT"
export PYTHONPATH=src:${PYTHONPATH:-} PYTHONUNBUFFERED=1 KERNELSCOPE_CALIBRATION_DIR=$W/calibration
ks() { python3 -m kernelscope -q "$@"; }
log() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/steps.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.txt"
echo "commit ${KS_COMMIT:-unknown}" >> "$OUT/env.txt"

log "calibrate"; t0=$SECONDS
ks hw calibrate --out "$W/calibration/device.json" > "$W/calibrate.log" 2>&1; log "calibrate rc=$? $((SECONDS-t0))s"
cp "$W/calibration/device.json" "$OUT/calibration.json" 2>/dev/null; cat "$W/calibrate.log"

log "small profile"; t0=$SECONDS
ks profile --model qwen2-0.5b --prompt-len 16 --new-tokens 4 --repeats 1 --out "$W/runs/small" > "$W/small.log" 2>&1
log "small profile rc=$? $((SECONDS-t0))s"
log "small ncu"; t0=$SECONDS
ks ncu "$W/runs/small" --top 4 --launches 1 --timeout 200 > "$W/small-ncu.log" 2>&1; log "small ncu rc=$? $((SECONDS-t0))s"

for b in 1 8; do
  log "default profile batch $b"; t0=$SECONDS
  ks profile --batch-size "$b" --out "$W/runs/qwen2-1.5b-b$b" > "$W/default-b$b.log" 2>&1
  log "default profile batch $b rc=$? $((SECONDS-t0))s"
done
tail -3 "$W"/*.log
cd "$W"
tar czf "$OUT/results.tar.gz" --exclude='*.ncu-rep' --exclude='*/ncu/details.csv' runs calibration *.log
ls -la "$OUT"; cat "$OUT/steps.txt"
