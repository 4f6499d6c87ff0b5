#!/usr/bin/env bash
# Device run for the foundation checks: the default profile (qwen2-1.5b, bf16, batch 1, prompt 128,
# 64 new tokens) and small real traces used as CPU test fixtures. Run from the checkout root on the GPU
# machine; writes everything under $OUT (or ./device-out).
set -u -o pipefail
OUT=${OUT:-device-out}
W=/tmp/ks-work
rm -rf "$W" && mkdir -p "$W/runs" "$OUT"
export PYTHONPATH=src PYTHONUNBUFFERED=1
ks() { python3 -m kernelscope -q "$@"; }
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  python3 -c 'import torch, transformers, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__, "triton", triton.__version__)'
  echo "commit ${KS_COMMIT:-unknown}"
  date -u
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

run() {  # name, then kernelscope profile arguments
  local name=$1; shift
  local t0=$SECONDS
  ks profile --out "$W/runs/$name" "$@" > "$W/$name.log" 2>&1
  local rc=$?
  printf '%-28s rc=%s wall=%ss\n' "$name" "$rc" "$((SECONDS - t0))" | tee -a "$OUT/runs.txt"
  tail -3 "$W/$name.log"
}

run qwen2-1.5b-default                                   # the main job on its defaults
run qwen2-0.5b-p16-n4      --model qwen2-0.5b --prompt-len 16 --new-tokens 4 --repeats 1
run qwen2-1.5b-b8-p16-n3   --model qwen2-1.5b --batch-size 8 --prompt-len 16 --new-tokens 3 --repeats 1
run llama-3-8b-p16-n3      --model llama-3-8b --prompt-len 16 --new-tokens 3 --repeats 1
run deepseek-v3-p16-n3     --model deepseek-v3 --prompt-len 16 --new-tokens 3 --repeats 1

# Small results: summaries, run.json, reports and the small traces (fixtures).
cd "$W/runs"
tar czf "$OUT/small.tar.gz" --exclude='qwen2-1.5b-default/trace.json.gz' --exclude='*/ops.parquet' \
    */summary.json */run.json */report */trace.json.gz */kernels.parquet ../*.log 2>/dev/null
cp qwen2-1.5b-default/trace.json.gz "$OUT/qwen2-1.5b-default.trace.json.gz" 2>/dev/null
ls -la "$OUT"
cat "$OUT/runs.txt"
