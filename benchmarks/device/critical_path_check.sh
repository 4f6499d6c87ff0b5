#!/usr/bin/env bash
# Device run for the critical path's re-timing (docs/critical-path.md, docs/whatif.md "What shortening buys"): four
# interventions on one GPU, each recorded as it is and with a spin kernel of known length added, imported with
# kernelscope, and `whatif --speedup '*spin_kernel*=1000000'` on the intervened run compared with the baseline as
# re-measured (benchmarks/device/critical_path_check.py). Random weights, no network. About 3-5 minutes on an H200.
# Run from a checkout root; writes $OUT/critical_path_check.json (per case: predicted and measured change of the
# step, the sum of the spins, the verdict), $OUT/env.txt, $OUT/steps.txt and $OUT/runs.tar.gz (the imported runs).
set -u -o pipefail
OUT=${OUT:-device-out}
W=/tmp/ks-critical-path
rm -rf "$W" && mkdir -p "$W" "$OUT"
export PYTHONPATH=src:${PYTHONPATH:-} PYTHONUNBUFFERED=1
log() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/steps.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv > "$OUT/env.txt" 2>&1
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" \
  >> "$OUT/env.txt" 2>&1
echo "commit ${KS_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}" >> "$OUT/env.txt"

log "cases"; t0=$SECONDS
timeout 450 python3 benchmarks/device/critical_path_check.py --out "$W" ${CASES:+--cases "$CASES"} \
  > "$W/check.log" 2>&1
log "cases rc=$? $((SECONDS-t0))s"
cp "$W/critical_path_check.json" "$OUT/" 2>/dev/null
tail -20 "$W/check.log"
cp "$W/check.log" "$OUT/"
(cd "$W" && tar czf "$OUT/runs.tar.gz" --exclude='*.json.gz' */runs 2>/dev/null)
(cd "$W" && tar czf "$OUT/traces.tar.gz" */trace.json.gz 2>/dev/null)
ls -la "$OUT"; cat "$OUT/steps.txt"
