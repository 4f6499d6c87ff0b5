#!/usr/bin/env bash
# Device run on two GPUs (kind nvidia-h200-x2): `kernelscope profile --gpus 2` on
#   1. the Qwen2-0.5B-shaped 4-layer checkpoint of benchmarks/foreign/capture.py (batch 2, prompt 64, 6 new tokens),
#      beside the same model recorded by plain torchrun (capture.py --part tp: no ranges of ours), then imported;
#   2. qwen2-1.5b with tensor parallelism (prompt 128, 64 new tokens), with its report;
#   3. (PART=moe) the deepseek-v3 preset (full width, 3 layers) with experts split over the ranks (--ep 2).
# Writes under $OUT: steps.txt, env.txt, one tar.gz per run directory (and the plain traces), logs.tar.gz.
# Wheels the image lacks (msgspec, polars, pycxxfilt, jinja2, rich, cmarkgfm with cffi and pycparser, …; built for
# the device's Python 3.12) travel in .whl/small (carry it); to fit the
# 64 MiB a call may carry, keep benchmarks/results and tests/data out of the tree that travels (git rm -r --cached
# them and list them in .git/info/exclude for the call; git reset afterwards).
set -u -o pipefail
OUT=${OUT:-device-out}
PART=${PART:-tp}
W=/tmp/ks-multi
rm -rf "$W" && mkdir -p "$W/runs" "$W/plain" "$OUT"
source benchmarks/device/ranks_setup.sh
ks() { python3 -m kernelscope -q "$@"; }
echo "commit ${KS_COMMIT:-unknown}" >> "$OUT/env.txt"
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__, "gpus", torch.cuda.device_count())' >> "$OUT/env.txt"

if [ "$PART" = tp ]; then
  log "checkpoint"
  python3 - <<'EOF'
import sys, torch
sys.path.insert(0, "benchmarks/foreign")
from capture import config
from transformers import AutoModelForCausalLM
torch.manual_seed(0)
with torch.device("cuda"):
    model = AutoModelForCausalLM.from_config(config(), dtype=torch.bfloat16)
model.save_pretrained("/tmp/ks-multi/qwen2-0.5b-4l")
EOF
  log "profile --gpus 2 small"; t0=$SECONDS
  ks profile --gpus 2 --model "$W/qwen2-0.5b-4l" --batch-size 2 --prompt-len 64 --new-tokens 6 \
    --out "$W/runs/tp2-small" > "$W/tp2-small.log" 2>&1; log "rc=$? $((SECONDS-t0))s"
  log "plain torchrun"; t0=$SECONDS
  python3 -m torch.distributed.run --nproc-per-node 2 benchmarks/foreign/capture.py --out "$W/plain" --part tp \
    > "$W/plain.log" 2>&1; log "rc=$? $((SECONDS-t0))s"
  log "import plain"; t0=$SECONDS
  ks import "$W"/plain/tp2_rank*.json.gz --out "$W/runs/tp2-plain-import" > "$W/import.log" 2>&1
  log "rc=$? $((SECONDS-t0))s"
  log "profile --gpus 2 qwen2-1.5b"; t0=$SECONDS
  ks profile --gpus 2 --model qwen2-1.5b --out "$W/runs/qwen2-1.5b-tp2" > "$W/tp2-1.5b.log" 2>&1
  log "rc=$? $((SECONDS-t0))s"
else
  log "profile --gpus 2 deepseek-v3 --ep 2"; t0=$SECONDS
  ks profile --gpus 2 --model deepseek-v3 --ep 2 --prompt-len 64 --new-tokens 8 --repeats 2 \
    --out "$W/runs/deepseek-v3-ep2" > "$W/ep2.log" 2>&1; log "rc=$? $((SECONDS-t0))s"
fi
tail -3 "$W"/*.log
cd "$W"
for run in runs/*; do tar czf "$OUT/$(basename "$run").tar.gz" "$run"; done
[ -d plain ] && tar czf "$OUT/plain.tar.gz" plain
tar czf "$OUT/logs.tar.gz" *.log
ls -la "$OUT"; cat "$OUT/steps.txt"
