#!/usr/bin/env bash
# Device run for shared/seeds/001's study on our tool: DeepSeek-OCR-2 (random weights, bf16) over 8 synthetic
# document pages with the seed's generation settings, Nsight Compute on the top 20 decode kernels, then the report
# in English and Chinese. Writes under $OUT. Usage: bash benchmarks/device/ocr_capture.sh [IMAGES] [REPEATS]
set -u -o pipefail
OUT=${OUT:-device-out}
IMAGES=${1:-8}
REPEATS=${2:-1}
W=/tmp/ks-ocr
rm -rf "$W" && mkdir -p "$W/runs" "$OUT"
export PYTHONPATH=src:${PYTHONPATH:-} PYTHONUNBUFFERED=1
ks() { python3 -m kernelscope -q "$@"; }
log() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/steps.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.txt"
echo "commit ${KS_COMMIT:-unknown}" >> "$OUT/env.txt"
R="$W/runs/deepseek-ocr-2"
log "profile deepseek-ocr-2 images=$IMAGES repeats=$REPEATS"; t0=$SECONDS
ks profile --model deepseek-ocr-2 --dtype bf16 --images "$IMAGES" --new-tokens 64 --temperature 0 \
  --no-repeat-ngram-size 20 --base-size 1024 --crop-mode --warmup 1 --repeats "$REPEATS" --no-report \
  --out "$R" > "$W/profile.log" 2>&1
log "profile rc=$? $((SECONDS-t0))s"
left=$((560 - SECONDS))
log "ncu decode top 20 (timeout ${left}s)"; t0=$SECONDS
ks ncu "$R" --top 20 --launches 1 --timeout "$left" > "$W/ncu.log" 2>&1; log "ncu rc=$? $((SECONDS-t0))s"
log "report"; t0=$SECONDS
ks report "$R" > "$W/report.log" 2>&1; log "report rc=$? $((SECONDS-t0))s"
tail -3 "$W"/*.log
cd "$W"
tar czf "$OUT/results.tar.gz" --exclude='*/trace.json.gz' --exclude='*.ncu-rep' --exclude='*/ncu/details.csv' runs *.log
ls -la "$OUT" "$R"; cat "$OUT/steps.txt"
