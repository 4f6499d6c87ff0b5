#!/usr/bin/env bash
# Device call 4 of this folder ("Cap validation"; kind nvidia-h100-x1; carry [".whl/tiny", "old", "cap16"]):
# old/src = `git archive HEAD src` (6cdf4e5; its attention is 3d1bb7d's), cap16/src = the
# change with at most 16 splits, src = the change with max_splits_64_unmeasured.patch applied (at most 64).
set -u -o pipefail
export PYTHONUNBUFFERED=1
log() { printf '%s +%ss %s\n' "$(date +%T)" "$SECONDS" "$*" | tee -a "$OUT/steps.log"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee -a "$OUT/steps.log"
python3 -m pip install -q --no-index --find-links .whl/tiny msgspec >> "$OUT/steps.log" 2>&1
log "pip rc=$?"
# Decode attention alone, each tree's own plan, contexts 201 / 1,000 / 2,048 / 2,200.
for tree in src cap16/src; do
  label=$([ "$tree" = src ] && echo attn64 || echo cap16)
  log "decode_attention_sweep $tree"
  PYTHONPATH=$tree timeout 75 python3 benchmarks/engine/decode_attention_sweep.py --out "$OUT" --label "$label" \
    --table-only --contexts 201,1000,2048,2200 2>&1 | tail -n 17 | tee -a "$OUT/steps.log"
done
# Side by side, alternating old / cap16 / patched, two rounds: qwen2-1.5b batch 1 after 128 and 2,048 tokens
# (contexts 129-192 and 2,049-2,064), qwen2-1.5b batch 8 and llama-3-8b batch 1 after 128.
for case in qwen2-1.5b:1:128:64,2048:16 qwen2-1.5b:8:128:64 llama-3-8b:1:128:64; do
  model=${case%%:*}; rest=${case#*:}; batch=${rest%%:*}; prompts=${rest#*:}
  for round in 1 2; do
    for tree in old/src cap16/src src; do
      log "side_by_side $tree $model b$batch r$round"
      PYTHONPATH=$tree timeout 70 python3 benchmarks/engine/side_by_side.py --label "$tree-$model-b$batch-r$round" \
        --model "$model" --batch "$batch" --prompts "$prompts" --repeats 5 >> "$OUT/side_by_side.jsonl" \
        2>> "$OUT/steps.log"
      log "rc=$?"
    done
  done
done
cat "$OUT/side_by_side.jsonl"
log "engine_decode"
PYTHONPATH=src timeout 170 python3 benchmarks/engine_decode.py --quick --llama-b1 --out "$OUT/engine_decode.json" \
  --commit "${COMMIT:-6cdf4e5+attn64}" > "$OUT/engine_decode.log" 2>&1
log "engine_decode rc=$?"
grep -A24 "^summary" "$OUT/engine_decode.log"
# HEAD's own plan at the long contexts, if time is left (kernel-level baseline for 2,200 tokens).
if [ "$SECONDS" -lt 420 ]; then
  log "decode_attention_sweep old/src"
  PYTHONPATH=old/src timeout 45 python3 benchmarks/engine/decode_attention_sweep.py --out "$OUT" --label head \
    --table-only --models qwen2-1.5b,llama-3-8b --batches 1 --contexts 2048,2200 2>&1 | tail -n 5 | tee -a "$OUT/steps.log"
fi
log "done"
