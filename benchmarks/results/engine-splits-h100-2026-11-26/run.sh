#!/usr/bin/env bash
# The one device call of this folder (kind nvidia-h100-x1; carry [".whl/tiny", "old"], where old/src is
# `git archive HEAD src` of 5e6b9db and src holds the change). Results in $OUT (8 files at most come back).
set -u -o pipefail
export PYTHONUNBUFFERED=1
log() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/steps.log"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee -a "$OUT/steps.log"
python3 -m pip install -q --no-index --find-links .whl/tiny msgspec >> "$OUT/steps.log" 2>&1
log "pip rc=$?"
# Side by side, alternating trees: batch 8 then batch 1, two rounds each.
for batch in 8 1; do
  for round in 1 2; do
    for tree in old/src src; do
      log "side_by_side $tree b$batch r$round"
      PYTHONPATH=$tree timeout 90 python3 benchmarks/engine/side_by_side.py --label "$tree-b$batch-r$round" \
        --batch "$batch" --prompts 128:64 --repeats 5 >> "$OUT/side_by_side.jsonl" 2>> "$OUT/steps.log"
      log "rc=$?"
    done
  done
done
cat "$OUT/side_by_side.jsonl"
log "ops_check"
PYTHONPATH=src timeout 120 python3 benchmarks/engine/ops_check.py --out "$OUT/ops" > "$OUT/ops_check.log" 2>&1
log "ops_check rc=$?"
log "engine_decode"
PYTHONPATH=src timeout 150 python3 benchmarks/engine_decode.py --quick --out "$OUT/engine_decode.json" \
  --commit 5e6b9db+splits > "$OUT/engine_decode.log" 2>&1
log "engine_decode rc=$?"
log "gemv_plan_compare"
PYTHONPATH=src timeout "${COMPARE_S:-60}" python3 benchmarks/engine/gemv_plan_compare.py --out "$OUT/cmp" \
  --models llama-3-8b,qwen2-1.5b,qwen2-0.5b --batches 8 > "$OUT/gemv_plan_compare.log" 2>&1
log "gemv_plan_compare rc=$?"
tail -n 14 "$OUT/ops_check.log"
grep -A16 "^summary" "$OUT/engine_decode.log"
tail -n 14 "$OUT/gemv_plan_compare.log"
