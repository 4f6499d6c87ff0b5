#!/usr/bin/env bash
# Device run for the what-if's held-out set (benchmarks/whatif/held_out.py): H200 runs of the workloads the committed
# H100 runs measured, so that each becomes a pair (same model, batch, prompt and new tokens on two GPUs), and more
# H200 runs across models, batch sizes and prompt lengths for the fit. One H200, about 5 minutes; writes under $OUT:
#   held-out-runs.tar.gz run directories (kernelscope profile --no-report, without their traces), to be trimmed
#                        like tests/data/runs
#   calibration.json     the H200's measured ceilings
#   steps.txt, env.txt   what ran, how long, the GPU and driver
# Pairs it makes with committed H100 runs: qwen2-1.5b batch 8 prompt 128 new 64 (h100-qwen2-1.5b-b8-slim).
# The other runs (qwen2-0.5b and qwen2-1.5b at batch 4, prompt 512) pair with
# nothing we hold: an H100 (or another generation) is not available here, so further pairs need public traces.
set -u -o pipefail
OUT=${OUT:-device-out}
W=/tmp/ks-held-out
rm -rf "$W" && mkdir -p "$W/runs" "$W/calibration" "$OUT"
export PYTHONPATH=src:${PYTHONPATH:-} PYTHONUNBUFFERED=1 KERNELSCOPE_CALIBRATION_DIR=$W/calibration
ks() { python3 -m kernelscope -q "$@"; }
log() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/steps.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.txt"
echo "commit ${KS_COMMIT:-unknown}" >> "$OUT/env.txt"

log "calibrate"; t0=$SECONDS
ks hw calibrate --quick --out "$W/calibration/device.json" > "$W/calibrate.log" 2>&1
log "calibrate rc=$? $((SECONDS-t0))s"; cp "$W/calibration/device.json" "$OUT/calibration.json" 2>/dev/null

# name model batch prompt new-tokens
while read -r name model batch prompt new; do
  [ -z "$name" ] && continue
  log "profile $name"; t0=$SECONDS
  timeout 120 python3 -m kernelscope -q profile --model "$model" --batch-size "$batch" --prompt-len "$prompt" \
    --new-tokens "$new" --repeats 1 --no-report --out "$W/runs/$name" > "$W/$name.log" 2>&1
  log "profile $name rc=$? $((SECONDS-t0))s"
  tail -n 3 "$W/$name.log"
done <<'EOF'
h200-qwen2-1.5b-b8-slim qwen2-1.5b 8 128 64
h200-qwen2-0.5b-b4-p512 qwen2-0.5b 4 512 16
h200-qwen2-1.5b-b4-p512 qwen2-1.5b 4 512 16
EOF
# Trace files are large; the run directories' tables are what the held-out set reads. One archive: the device
# machine returns flat files only.
(cd "$W/runs" && tar czf "$OUT/held-out-runs.tar.gz" --exclude='trace.json.gz' --exclude='report' .)
log "done"
