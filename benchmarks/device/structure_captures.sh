#!/usr/bin/env bash
# Held-out captures for structure inference (structure from evidence alone): plain torch.profiler traces of
# six programs that push no annotation (compiled HF generate, a greedy loop with and without record_shapes, training
# steps, a small MoE's generate, a Triton-heavy decoder), each with its truth recorded at capture time, then what
# kernelscope infers from each (summary.json `structure`, run.json `attribution.structure`). One H200, < 8 minutes.
# Run from a checkout root on the GPU machine; writes under $OUT:
#   $OUT/structure/<name>.json.gz, <name>.truth.json, captures.json   the fixtures (gzip ≤ 2 MB each) and their truth
#   $OUT/inferred/<name>.json                                          kernelscope's summary structure and levels
#   $OUT/steps.txt, $OUT/env.txt
set -u -o pipefail
OUT=${OUT:-device-out}
W=/tmp/ks-structure
rm -rf "$W" && mkdir -p "$W" "$OUT/structure" "$OUT/inferred"
export PYTHONPATH=src:.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
log() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/steps.txt"; }
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/env.txt"
python3 -c "import torch, transformers, triton; print(torch.__version__, transformers.__version__, triton.__version__)" >> "$OUT/env.txt"

log "captures"; t0=$SECONDS
timeout 420 python3 benchmarks/device/structure_captures.py --out "$OUT/structure" 2>&1 | tail -40
log "captures rc=$? $((SECONDS-t0))s"

for trace in "$OUT"/structure/*.json.gz; do
  name=$(basename "$trace" .json.gz); t0=$SECONDS
  timeout 60 python3 -m kernelscope -q import "$trace" --out "$W/$name" --no-report > "$W/$name.log" 2>&1
  rc=$?
  python3 - "$W/$name" "$OUT/inferred/$name.json" "$rc" <<'PY'
import json, sys
run, out, rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
result = {"rc": rc}
try:
    result["summary_structure"] = json.load(open(f"{run}/summary.json")).get("structure")
    attribution = json.load(open(f"{run}/run.json")).get("attribution", {})
    result["levels"] = attribution.get("structure")
    result["sources"] = {k: attribution.get(k, {}).get("source") for k in ("phase", "module")}
except OSError as exc:
    result["error"] = str(exc)
json.dump(result, open(out, "w"), indent=1)
PY
  log "import $name rc=$rc $((SECONDS-t0))s"
done
ls -la "$OUT/structure"; cat "$OUT/steps.txt"
