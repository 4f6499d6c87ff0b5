#!/usr/bin/env bash
# Device run: the default profile with the current code, `kernelscope ncu` on its decode phase (top 20, timed)
# and on its prefill phase (top 10, one launch per configuration: FLOP accuracy of the cost models where
# GEMM tiles are full). Writes under $OUT.
set -u -o pipefail
OUT=${OUT:-device-out}
W=/tmp/ks-final
rm -rf "$W" && mkdir -p "$W/runs" "$OUT"
export PYTHONPATH=src:${PYTHONPATH:-} PYTHONUNBUFFERED=1
ks() { python3 -m kernelscope -q "$@"; }
log() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/steps.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.txt"
echo "commit ${KS_COMMIT:-unknown}" >> "$OUT/env.txt"
R="$W/runs/qwen2-1.5b-default"
log "default profile"; t0=$SECONDS
ks profile --out "$R" > "$W/default.log" 2>&1; log "default profile rc=$? $((SECONDS-t0))s"
cp -r "$R" "$W/runs/qwen2-1.5b-prefill-ncu"
log "ncu decode top 20"; t0=$SECONDS
ks ncu "$R" --top 20 --launches 3 --timeout 400 > "$W/ncu-decode.log" 2>&1; log "ncu decode rc=$? $((SECONDS-t0))s"
log "ncu prefill top 10"; t0=$SECONDS
ks ncu "$W/runs/qwen2-1.5b-prefill-ncu" --phase prefill --top 10 --launches 1 --timeout 200 > "$W/ncu-prefill.log" 2>&1
log "ncu prefill rc=$? $((SECONDS-t0))s"
tail -2 "$W"/*.log
cd "$W"
tar czf "$OUT/results.tar.gz" --exclude='*/trace.json.gz' --exclude='*.ncu-rep' --exclude='*/ncu/details.csv' runs *.log
ls -la "$OUT"; cat "$OUT/steps.txt"
