#!/usr/bin/env bash
# Device run for the cost models: analytic FLOPs and bytes against Nsight Compute per kernel class, on HF eager
# generate of a Qwen2-shaped model, a Qwen3-MoE-shaped model and FP8 torch._scaled_mm (benchmarks/device/cost_check.py
# says what and how; FP8 first, then dense, then MoE, all within COST_CHECK_SECONDS = 420 s). Run from the checkout
# root on the GPU machine (one H200, under 8 minutes); writes under $OUT:
# cost_check.json (per workload: coverage per cost source, per-launch and per-class analytic ÷ measured ratios,
# the checks), steps.txt, env.txt, and results.tar.gz (the traces, the ncu CSVs, the logs).
set -u -o pipefail
OUT=${OUT:-device-out}
W=/tmp/ks-cost-check
rm -rf "$W" && mkdir -p "$W" "$OUT"
export PYTHONPATH=src:${PYTHONPATH:-} PYTHONUNBUFFERED=1
log() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/steps.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.txt"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" >> "$OUT/env.txt"
echo "commit ${KS_COMMIT:-unknown}" >> "$OUT/env.txt"

log "cost check"; t0=$SECONDS
COST_CHECK_SECONDS=420 timeout 450 python3 benchmarks/device/cost_check.py --out "$W" > "$W/cost_check.log" 2>&1
log "cost check rc=$? $((SECONDS-t0))s"
cp "$W/cost_check.json" "$OUT/" 2>/dev/null
tail -40 "$W/cost_check.log"
cd "$W"
tar czf "$OUT/results.tar.gz" --exclude='*.ncu-rep' --exclude='*/run*/trace.json.gz' . 2>/dev/null
ls -la "$OUT"; cat "$OUT/steps.txt"
