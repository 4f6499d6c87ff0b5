#!/usr/bin/env bash
# Device run for `kernelscope ncu RUN --coverage 0.95` (docs/cli.md): the default workload profiled, then every
# distinct (kernel, launch configuration) of its decode in descending device time until 95% of decode kernel time is
# covered, each profiled once by Nsight Compute and joined to every launch of it. One GPU, under 8 minutes.
# Writes under $OUT: steps.txt (what ran, how long), env.txt, ncu_info.json (run.json's `ncu`: configurations,
# planned_share, measured_share, profiled and matched launches, wall_s), coverage.txt (the measured share checked
# from the run's own tables), run/ (run.json, summary.json, ncu.parquet: the run without its trace).
set -u -o pipefail
OUT=${OUT:-device-out}
W=/tmp/ks-ncu-coverage
rm -rf "$W" && mkdir -p "$W" "$OUT/run"
export PYTHONPATH=src:${PYTHONPATH:-} PYTHONUNBUFFERED=1
ks() { python3 -m kernelscope -q "$@"; }
log() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/steps.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.txt"
/usr/local/cuda/bin/ncu --version >> "$OUT/env.txt" 2>&1
echo "commit ${KS_COMMIT:-unknown}" >> "$OUT/env.txt"

log "profile (default workload)"; t0=$SECONDS
timeout 150 python3 -m kernelscope -q profile --no-report --out "$W/run" > "$W/profile.log" 2>&1
log "profile rc=$? $((SECONDS-t0))s"; tail -3 "$W/profile.log"

log "ncu --coverage 0.95"; t0=$SECONDS
PATH=/usr/local/cuda/bin:$PATH ks ncu "$W/run" --coverage 0.95 --timeout 330 > "$W/ncu.log" 2>&1
log "ncu rc=$? $((SECONDS-t0))s"; tail -5 "$W/ncu.log"

python3 - "$W/run" > "$OUT/coverage.txt" 2>&1 <<'PY'
import json, sys
from pathlib import Path
import polars as pl
from kernelscope.analyze.ncu_coverage import every_launch, measured_share
run = Path(sys.argv[1])
info = json.loads((run / "run.json").read_text()).get("ncu") or {}
print(json.dumps(info, indent=1))
json.dump(info, open(Path(sys.argv[1]).parent / "ncu_info.json", "w"), indent=1)
kernels = pl.read_parquet(run / "kernels.parquet")
ncu = pl.read_parquet(run / "ncu.parquet")
print("measured share of decode kernel time:", measured_share(every_launch(kernels, ncu, "decode")))
PY
cp "$W/ncu_info.json" "$OUT/" 2>/dev/null
cp "$W/run/run.json" "$W/run/summary.json" "$W/run/ncu.parquet" "$OUT/run/" 2>/dev/null
cat "$OUT/coverage.txt"
log "done"
