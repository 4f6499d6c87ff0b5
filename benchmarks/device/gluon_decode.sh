#!/usr/bin/env bash
# Device run of the persistent Gluon decode step (one launch a token for every layer and the LM head) against the
# engine's decode step, qwen2-1.5b at batch 1 on one Hopper GPU (H100/H200): first the kernel is compiled for
# sm_90a without a launch (gluon_compile_check.py --decode: a compile error lands in the log in full), then
# benchmarks/engine/gluon_decode.py runs its smoke child (2 layers), the 32-step comparison and the side-by-side
# timing. Writes only $OUT/gluon-decode.json and $OUT/gluon-decode.log. Every step has a timeout; the whole run
# stays under 6 minutes.
#
#   OUT=/tmp/out bash benchmarks/device/gluon_decode.sh      (from the checkout root, PYTHONPATH=src)
set -u -o pipefail
OUT=${OUT:-device-out}
mkdir -p "$OUT"
export PYTHONPATH=src:${PYTHONPATH:-} PYTHONUNBUFFERED=1
export KS_COMMIT=${KS_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
LOG="$OUT/gluon-decode.log"
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  echo "commit $KS_COMMIT"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  echo "== compile check (sm_90a, no launch)"
  timeout 60 python3 benchmarks/engine/gluon_compile_check.py --decode
  echo "compile check rc=$?"
  echo "== decode"
  timeout 290 python3 benchmarks/engine/gluon_decode.py --out "$OUT" --budget 270 --smoke-budget 150
  echo "decode rc=$?"
  date -u +"%Y-%m-%dT%H:%M:%SZ"
} > "$LOG" 2>&1
tail -n 60 "$LOG"
ls -la "$OUT"
