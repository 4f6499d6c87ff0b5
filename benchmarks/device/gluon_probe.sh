#!/usr/bin/env bash
# Device run of the Gluon streaming probe on one Hopper GPU (H100/H200): can TMA bulk copies into a shared-memory
# ring with a loader warp (gl.warp_specialize) stream qwen2-1.5b's batch-1 decode weights at > 90% of the copy
# bandwidth? First the kernels are compiled for sm_90a without a launch (gluon_compile_check.py --quick: a compile
# error lands in the log in full), then benchmarks/engine/gluon_probe.py runs its smoke children and the side-by-side
# timing. Writes only $OUT/gluon-probe.json and $OUT/gluon-probe.log. About 3–4 minutes; every step has a timeout,
# the whole run stays under 6 minutes.
#
#   OUT=/tmp/out bash benchmarks/device/gluon_probe.sh      (from the checkout root, PYTHONPATH=src)
set -u -o pipefail
OUT=${OUT:-device-out}
mkdir -p "$OUT"
export PYTHONPATH=src:${PYTHONPATH:-} PYTHONUNBUFFERED=1
export KS_COMMIT=${KS_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
LOG="$OUT/gluon-probe.log"
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  echo "commit $KS_COMMIT"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  echo "== compile check (sm_90a, no launch)"
  timeout 45 python3 benchmarks/engine/gluon_compile_check.py --quick
  echo "compile check rc=$?"
  echo "== probe"
  timeout 280 python3 benchmarks/engine/gluon_probe.py --out "$OUT" --budget 240 --smoke-budget 130
  echo "probe rc=$?"
  date -u +"%Y-%m-%dT%H:%M:%SZ"
} > "$LOG" 2>&1
tail -n 80 "$LOG"
ls -la "$OUT"
