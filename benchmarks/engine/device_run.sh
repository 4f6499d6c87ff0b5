#!/usr/bin/env bash
# One device call for the engine (kind nvidia-h100-x1, carry [".whl"]): compiled-operator check, the decode
# benchmark, and `kernelscope profile --backend engine` with its report and attribution check. Results in $OUT.
set -u -o pipefail
OUT=${OUT:-device-out}
COMMIT=${1:-unknown}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:src || exit 1
export PYTHONUNBUFFERED=1
log() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/steps.txt"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/device.txt"
log "ops_check"; t0=$SECONDS
timeout 170 python3 benchmarks/engine/ops_check.py --out "$OUT/ops" > "$OUT/ops_check.log" 2>&1
log "ops_check rc=$? $((SECONDS-t0))s"
log "engine_decode"; t0=$SECONDS
timeout 280 python3 benchmarks/engine_decode.py --out "$OUT/engine_decode.json" --commit "$COMMIT" > "$OUT/engine_decode.log" 2>&1
log "engine_decode rc=$? $((SECONDS-t0))s"
here=benchmarks/results/engine-profile-h100-2026-11-22
run=/tmp/engine-run
log "profile"; t0=$SECONDS
timeout 120 python3 -m kernelscope -q profile --backend engine --model qwen2-1.5b --out "$run" > "$OUT/profile.log" 2>&1
log "profile rc=$? $((SECONDS-t0))s"
python3 "$here/check.py" "$run" > "$OUT/check.json"; log "check rc=$?"
cp "$run/summary.json" "$run/run.json" "$OUT/" 2>/dev/null
tar czf "$OUT/report.tgz" -C "$run" summary.json report/report.md report/report.zh.md report/tables 2>/dev/null
# The device returns a limited number of files: keep the small ones in one archive.
tar czf "$OUT/small.tgz" -C "$OUT" steps.txt summary.json ops 2>/dev/null
for f in "$OUT"/*.log; do tail -n 5 "$f"; done
