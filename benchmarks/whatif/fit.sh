#!/usr/bin/env bash
# Refit the shipped projection model (src/kernelscope/data/projection.toml) on the committed device runs: the
# run directories under tests/data/runs (qwen2-0.5b on H200 and H100, qwen2-1.5b batch 1 on H200 and H100, batch 8
# on H100) and the H200 Kineto captures of llama-3-8b, qwen2-1.5b batch 8 and deepseek-v3 (imported first).
set -euo pipefail
cd "$(dirname "$0")/../.."
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
for t in llama-3-8b-p16-n3 qwen2-1.5b-b8-p16-n3 deepseek-v3-p16-n3; do
  python3 -m kernelscope -q import "tests/data/kineto/h200-$t.trace.json.gz" --out "$W/h200-$t" --no-report > /dev/null
done
python3 -m kernelscope -q hw fit tests/data/runs/h200-qwen2-0.5b-ncu tests/data/runs/h100-qwen2-0.5b-ncu \
  tests/data/runs/h200-qwen2-1.5b-slim tests/data/runs/h100-qwen2-1.5b-b1-slim tests/data/runs/h100-qwen2-1.5b-b8-slim \
  "$W"/h200-* --out "${1:-src/kernelscope/data/projection.toml}"
