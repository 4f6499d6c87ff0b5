#!/usr/bin/env bash
# Device run for the roofline and Nsight Compute: measured ceilings (hw calibrate), the default profile
# with the new report, `kernelscope ncu` on a small run (fixtures) and on the default run (top 20 decode
# kernels, timed). Run from the checkout root on the GPU machine; writes under $OUT.
set -u -o pipefail
OUT=${OUT:-device-out}
W=/tmp/ks-work
rm -rf "$W" && mkdir -p "$W/runs" "$OUT"
export PYTHONPATH=src:${PYTHONPATH:-} PYTHONUNBUFFERED=1 KERNELSCOPE_CALIBRATION_DIR=$W/calibration
ks() { python3 -m kernelscope -q "$@"; }
log() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/steps.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.txt"
echo "commit ${KS_COMMIT:-unknown}" >> "$OUT/env.txt"

log "calibrate"; t0=$SECONDS
ks hw calibrate --out "$W/calibration.json" > "$W/calibrate.log" 2>&1; log "calibrate rc=$? $((SECONDS-t0))s"
mkdir -p "$W/calibration" && cp "$W/calibration.json" "$W/calibration/" 2>/dev/null
cp "$W/calibration.json" "$OUT/" 2>/dev/null; cat "$W/calibrate.log"
python3 - <<'PY' > /dev/null 2>&1
import json, pathlib, re
p = pathlib.Path("/tmp/ks-work/calibration.json")
d = json.loads(p.read_text()); slug = re.sub(r"[^a-z0-9]+", "-", d["device"].lower()).strip("-")
(pathlib.Path("/tmp/ks-work/calibration") / f"{slug}.json").write_text(p.read_text())
PY

log "small profile"; t0=$SECONDS
ks profile --model qwen2-0.5b --prompt-len 16 --new-tokens 4 --repeats 1 --out "$W/runs/small" > "$W/small.log" 2>&1
log "small profile rc=$? $((SECONDS-t0))s"
log "small ncu"; t0=$SECONDS
ks ncu "$W/runs/small" --top 4 --launches 1 --timeout 200 > "$W/small-ncu.log" 2>&1; rc=$?
log "small ncu rc=$rc $((SECONDS-t0))s"; tail -3 "$W/small-ncu.log"
if [ $rc -ne 0 ]; then  # keep something to learn from: a plain capture without NVTX gating
  /usr/local/cuda/bin/ncu --clock-control none --target-processes all -c 6 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section Occupancy --export "$W/plain.ncu-rep" -f \
    python3 -m kernelscope.commands.replay "$W/runs/small" > "$W/plain.log" 2>&1
  /usr/local/cuda/bin/ncu --import "$W/plain.ncu-rep" --csv --page raw > "$W/plain-raw.csv" 2>&1
  /usr/local/cuda/bin/ncu --import "$W/plain.ncu-rep" --csv --page details > "$W/plain-details.csv" 2>&1
fi
/usr/local/cuda/bin/ncu --query-metrics > "$W/query-metrics.txt" 2>&1

log "default profile"; t0=$SECONDS
ks profile --out "$W/runs/qwen2-1.5b-default" > "$W/default.log" 2>&1; log "default profile rc=$? $((SECONDS-t0))s"
log "default ncu top 20"; t0=$SECONDS
ks ncu "$W/runs/qwen2-1.5b-default" --top 20 --launches 3 --timeout 330 > "$W/default-ncu.log" 2>&1
log "default ncu rc=$? $((SECONDS-t0))s"; tail -3 "$W/default-ncu.log"

cd "$W"
tar czf "$OUT/results.tar.gz" --exclude='*/trace.json.gz' --exclude='runs/qwen2-1.5b-default/ncu/profile.ncu-rep' \
  runs *.log *.csv *.txt *.ncu-rep calibration.json 2>/dev/null
ls -la "$OUT"; cat "$OUT/steps.txt"
