#!/usr/bin/env bash
# Device run for the integrity audit and the Perfetto lanes: kernelscope's engine with programmatic dependent launch
# on (KERNELSCOPE_ENGINE_PDL=1, decode from a CUDA graph), and the same run without it, on one H200. For each run:
# the integrity audit kernelscope stored (run.json) against the counts made from its own trace with the standard
# library (tests/trace_reference.py), and the Perfetto export read back (slices that cross on a track, device events
# that overlap on a lane: both must be 0). Writes every result under $OUT; the PDL run directory (without its
# report) is kept as engine-pdl-run.tar.gz, small enough to commit as a fixture. About 2 minutes.
#
#   OUT=/tmp/out bash benchmarks/device/engine_pdl_lanes.sh      (from the checkout root, PYTHONPATH=src)
set -u -o pipefail
OUT=${OUT:-device-out}
W=/tmp/ks-pdl
rm -rf "$W" && mkdir -p "$W/runs" "$OUT"
export PYTHONPATH=src:.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
log() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/steps.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.txt" 2>&1
git rev-parse --short HEAD >> "$OUT/env.txt" 2>/dev/null

for mode in pdl nopdl; do
  pdl=$([ "$mode" = pdl ] && echo 1 || echo 0)
  log "engine profile $mode"; t0=$SECONDS
  KERNELSCOPE_ENGINE_PDL=$pdl python3 -m kernelscope -q profile --backend engine --model qwen2-0.5b \
    --prompt-len 64 --new-tokens 16 --repeats 3 --figure-formats none --out "$W/runs/engine-$mode" \
    > "$W/profile-$mode.log" 2>&1
  log "engine profile $mode rc=$? $((SECONDS-t0))s"
  python3 -m kernelscope -q export "$W/runs/engine-$mode" --format perfetto --out "$W/engine-$mode.perfetto.json.gz" \
    > "$W/export-$mode.log" 2>&1
  log "export $mode rc=$?"
done

python3 - "$W" "$OUT" <<'EOF'
import json, sys
from pathlib import Path
from tests.audit_reference import audit_reference, crossing_slices

work, out = Path(sys.argv[1]), Path(sys.argv[2])
results = {}
for mode in ("pdl", "nopdl"):
    run = work / "runs" / f"engine-{mode}"
    row = {}
    try:
        stored = json.loads((run / "run.json").read_text())["trace"]["audit"]
        expected = audit_reference(run / "trace.json.gz")
        row["audit"] = stored
        row["audit_expected"] = expected
        row["audit_match"] = {k: stored[k] for k in expected} == expected
        row["perfetto"] = crossing_slices(work / f"engine-{mode}.perfetto.json.gz")
        row["perfetto_nests"] = row["perfetto"]["crossing"] == 0 and row["perfetto"]["device_overlaps"] == 0
        row["integrity"] = json.loads((run / "summary.json").read_text()).get("integrity")
    except Exception as exc:  # a failed step: say which, keep the others
        row["error"] = f"{type(exc).__name__}: {exc}"
    results[mode] = row
(out / "engine_pdl_lanes.json").write_text(json.dumps(results, indent=2) + "\n")
for mode, row in results.items():
    print(mode, {k: row.get(k) for k in ("audit_match", "perfetto_nests", "error")},
          {k: (row.get("audit") or {}).get(k) for k in ("stream_overlaps", "stream_overlaps_pdl", "stream_overlap_ns")})
EOF
tail -3 "$W"/*.log
cd "$W/runs" && tar czf "$OUT/engine-pdl-run.tar.gz" --exclude='report' engine-pdl
ls -la "$OUT"; cat "$OUT/steps.txt"
