#!/usr/bin/env bash
# Device run for `profile --energy` (docs/energy.md) and `kernelscope ncu RUN --coverage 0.95` (docs/cli.md), in one
# call on one GPU (under 10 minutes):
#   1. the default workload profiled with --energy (run/): the energy pass's windows and samples, and the run that
#      `ncu --coverage` then measures;
#   2. a second energy run of another shape (batch 8, prompt 512, 32 new tokens: run-b8/);
#   3. `ncu run/ --coverage 0.95` within what is left of the call.
# Writes under $OUT: steps.txt, env.txt, energy-runs.tar.gz (run/ and run-b8/: run.json, summary.json,
# power.parquet, energy.parquet, kernels.parquet, ncu.parquet; no trace, no report), coverage.txt (the measured share checked
# from the run's own tables), the logs.
set -u -o pipefail
OUT=${OUT:-device-out}
W=/tmp/ks-energy
rm -rf "$W" && mkdir -p "$W" "$OUT" "$W/keep"
export PYTHONPATH=src:${PYTHONPATH:-} PYTHONUNBUFFERED=1
ks() { python3 -m kernelscope -q "$@"; }
log() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/steps.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv > "$OUT/env.txt"
/usr/local/cuda/bin/ncu --version >> "$OUT/env.txt" 2>&1
python3 -c "import pynvml; print('nvidia-ml-py', pynvml.__version__ if hasattr(pynvml, '__version__') else '?')" \
  >> "$OUT/env.txt" 2>&1
echo "commit ${KS_COMMIT:-unknown}" >> "$OUT/env.txt"
begin=$SECONDS

log "profile --energy (default workload)"; t0=$SECONDS
timeout 170 python3 -m kernelscope -q profile --energy --no-report --out "$W/run" > "$W/profile.log" 2>&1
log "profile rc=$? $((SECONDS-t0))s"; tail -n 3 "$W/profile.log"

log "profile --energy b8 p512"; t0=$SECONDS
timeout 110 python3 -m kernelscope -q profile --energy --no-report --batch-size 8 --prompt-len 512 --new-tokens 32 \
  --out "$W/run-b8" > "$W/profile-b8.log" 2>&1
log "profile b8 rc=$? $((SECONDS-t0))s"; tail -n 3 "$W/profile-b8.log"

[ -f "$W/run/run.json" ] || { log "energy profile failed: plain profile for ncu"; timeout 150 python3 -m kernelscope -q profile --no-report --out "$W/run" > "$W/profile-plain.log" 2>&1; }
left=$((${BUDGET_S:-560} - (SECONDS - begin) - 40))
log "ncu --coverage 0.95 (timeout ${left}s)"; t0=$SECONDS
PATH=/usr/local/cuda/bin:$PATH ks ncu "$W/run" --coverage 0.95 --timeout "$left" > "$W/ncu.log" 2>&1
log "ncu rc=$? $((SECONDS-t0))s"; tail -n 5 "$W/ncu.log"

python3 - "$W/run" > "$OUT/coverage.txt" 2>&1 <<'PY'
import json, sys
from pathlib import Path
import polars as pl
from kernelscope.analyze.costs.ncu_coverage import every_launch, measured_share
run = Path(sys.argv[1])
info = json.loads((run / "run.json").read_text()).get("ncu") or {}
print(json.dumps(info, indent=1))
kernels = pl.read_parquet(run / "kernels.parquet")
ncu = pl.read_parquet(run / "ncu.parquet")
print("measured share of decode kernel time:", measured_share(every_launch(kernels, ncu, "decode")))
PY
for name in run run-b8; do
  mkdir -p "$W/keep/$name"
  cp "$W/$name"/*.json "$W/$name"/power.parquet "$W/$name"/energy.parquet "$W/$name"/kernels.parquet \
    "$W/$name"/ncu.parquet "$W/keep/$name/" 2>/dev/null
done
(cd "$W/keep" && tar czf "$OUT/energy-runs.tar.gz" .)
cp "$W"/*.log "$OUT/"
python3 - "$W/keep" <<'PY'
import json, sys
from pathlib import Path
for run in sorted(Path(sys.argv[1]).iterdir()):
    try:
        e = json.loads((run / "run.json").read_text()).get("energy") or {}
    except OSError as exc:
        print(run.name, exc); continue
    print(run.name, {k: e.get(k) for k in ("samples", "counter_update_ms", "counter_joules", "power_joules", "agreement")})
    for p in e.get("phases", []):
        print("  ", p)
PY
tail -n 3 "$OUT/coverage.txt"
log "done $((SECONDS-begin))s"
