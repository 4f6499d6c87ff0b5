#!/usr/bin/env bash
# Device call 3 of this folder (kind nvidia-h100-x1; carry [".whl/tiny", "old"], where old/src is
# `git archive HEAD src` of 3d1bb7d and src holds the change). Results in $OUT (8 files at most come back).
set -u -o pipefail
export PYTHONUNBUFFERED=1
log() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/steps.log"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee -a "$OUT/steps.log"
python3 -m pip install -q --no-index --find-links .whl/tiny msgspec >> "$OUT/steps.log" 2>&1
log "pip rc=$?"
# Decode attention alone, each tree's own plan: 16 (model, batch, context) cases.
for tree in old/src src; do
  label=$([ "$tree" = src ] && echo new || echo head)
  log "decode_attention_sweep $tree"
  PYTHONPATH=$tree timeout 90 python3 benchmarks/engine/decode_attention_sweep.py --out "$OUT" --label "$label" \
    --table-only 2>&1 | tail -n 17 | tee -a "$OUT/steps.log"
done
# Side by side, alternating trees: llama-3-8b batch 1, qwen2-1.5b batch 1, qwen2-1.5b batch 8; two rounds each;
# prompts of 128 (64 new tokens) and 2,048 (16 new tokens).
for case in llama-3-8b:1 qwen2-1.5b:1 qwen2-1.5b:8; do
  model=${case%:*}; batch=${case#*:}
  for round in 1 2; do
    for tree in old/src src; do
      log "side_by_side $tree $model b$batch r$round"
      PYTHONPATH=$tree timeout 150 python3 benchmarks/engine/side_by_side.py --label "$tree-$model-b$batch-r$round" \
        --model "$model" --batch "$batch" --prompts 128:64,2048:16 --repeats 5 >> "$OUT/side_by_side.jsonl" \
        2>> "$OUT/steps.log"
      log "rc=$?"
    done
  done
done
cat "$OUT/side_by_side.jsonl"
log "engine_decode"
PYTHONPATH=src timeout 240 python3 benchmarks/engine_decode.py --quick --llama-b1 --out "$OUT/engine_decode.json" \
  --commit "${COMMIT:-3d1bb7d+attn}" > "$OUT/engine_decode.log" 2>&1
log "engine_decode rc=$?"
log "ops_check"
PYTHONPATH=src timeout 120 python3 benchmarks/engine/ops_check.py --out "$OUT/ops" > "$OUT/ops_check.log" 2>&1
log "ops_check rc=$?"
tail -n 16 "$OUT/ops_check.log"
grep -A24 "^summary" "$OUT/engine_decode.log"
