#!/usr/bin/env bash
# DeepSeek-V3 at full width over several GPUs (a measured layer → module → kernel table):
# `kernelscope profile --gpus G --ep G --model deepseek-v3-full --layers L`, batch 1 and batch B, each run
# profiling prefill and decode, with its report (layer types dense and MoE, modules and kernels per rank, the
# communication section, the per-rank skew).
#   GPUS=8 (kind nvidia-h200-x8): L=32 by default (3 dense + 29 MoE: about 100 GB of weights per H200 with the
#   experts split 8 ways); GPUS=2 (nvidia-h200-x2 / h100-x2): L=6 (3 dense + 3 MoE, about 42 GB per GPU).
# Other settings: BATCH (default 32), PROMPT (128), NEW (16). Wheels in .whl/small as for multi_gpu_capture.sh.
# Writes under $OUT: steps.txt, env.txt, one tar.gz per run (report, tables, run.json, summary.json; the traces
# when they are under 14 MB), logs.tar.gz.
set -u -o pipefail
OUT=${OUT:-device-out}
GPUS=${GPUS:-2}
if [ "$GPUS" -ge 8 ]; then LAYERS=${LAYERS:-32}; else LAYERS=${LAYERS:-6}; fi
BATCH=${BATCH:-32}
PROMPT=${PROMPT:-128}
NEW=${NEW:-16}
W=/tmp/ks-deepseek
rm -rf "$W" && mkdir -p "$W/runs" "$OUT"
source benchmarks/device/ranks_setup.sh
echo "commit ${KS_COMMIT:-unknown} gpus $GPUS layers $LAYERS batch 1,$BATCH prompt $PROMPT new $NEW" >> "$OUT/env.txt"
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__, "gpus", torch.cuda.device_count())' >> "$OUT/env.txt"

for batch in 1 "$BATCH"; do
  run="ds-l$LAYERS-ep$GPUS-b$batch"
  log "profile $run"; t0=$SECONDS
  python3 -m kernelscope -q profile --gpus "$GPUS" --ep "$GPUS" --model deepseek-v3-full --layers "$LAYERS" \
    --batch-size "$batch" --prompt-len "$PROMPT" --new-tokens "$NEW" --repeats 2 --out "$W/runs/$run" \
    > "$W/$run.log" 2>&1
  log "rc=$? $((SECONDS-t0))s"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader | tr '\n' ' ' >> "$OUT/steps.txt"; echo >> "$OUT/steps.txt"
  tail -n 3 "$W/$run.log"
  if [ -d "$W/runs/$run" ]; then
    traces=$(du -sm "$W/runs/$run/traces" | cut -f1)
    exclude=(--exclude='*.svg' --exclude='*.png' --exclude='*.html')
    [ "$traces" -gt 14 ] && exclude+=(--exclude='traces')
    tar czf "$OUT/$run.tar.gz" "${exclude[@]}" -C "$W/runs" "$run"
  fi
done
cd "$W" && tar czf "$OUT/logs.tar.gz" ./*.log
ls -la "$OUT"; cat "$OUT/steps.txt"
