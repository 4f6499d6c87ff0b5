#!/usr/bin/env bash
# Device calls for the engine (kind nvidia-h100-x1). Results in $OUT.
#   PART=engine  (carry [".whl/small", ".whl/a"]): compiled-operator check with the batch-8 GEMV sweep, the prefill
#                GEMM tile sweep, and the decode/prefill benchmark (programmatic dependent launch on and off).
#                Also parks the first half of polars' runtime wheel for PART=profile.
#   PART=profile (carry [".whl/b"], within the machine's idle window after PART=engine): installs polars, then
#                `kernelscope profile --backend engine` with its report and attribution check.
#   PART=sweeps  (carry [".whl/small"]): the prefill GEMM and flash-attention tile sweeps alone.
#   PART=compare (carry [".whl/small"]): benchmarks/engine/side_by_side.py on old/src and src, alternating, then
#                the quick benchmark.
# Extra arguments: the commit to record; QUICK=1 runs the benchmark with --quick; SKIP_GEMM=1 skips the GEMM sweep;
# SWEEP=1 adds the batch-8 GEMV tile sweep to the operator check.
set -u -o pipefail
OUT=${OUT:-device-out}
COMMIT=${1:-unknown}
PART=${PART:-engine}
export PYTHONUNBUFFERED=1 PYTHONPATH=src
log() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/steps.txt"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/device.txt"
if [ "$PART" = compare ]; then
  # Side by side with an older tree unpacked at old/src (git archive OLD src | tar -x -C old), alternating.
  python3 -m pip install -q --no-index --find-links .whl/small msgspec > "$OUT/pip.log" 2>&1
  for round in 1 2; do
    for tree in old/src src; do
      log "side_by_side $tree round $round"
      PYTHONPATH=$tree timeout 150 python3 benchmarks/engine/side_by_side.py --label "$tree" >> "$OUT/side_by_side.jsonl" 2>> "$OUT/side_by_side.log"
    done
  done
  cat "$OUT/side_by_side.jsonl"
  log "engine_decode"
  timeout 300 python3 benchmarks/engine_decode.py --out "$OUT/engine_decode.json" --commit "$COMMIT" --quick > "$OUT/engine_decode.log" 2>&1
  log "engine_decode rc=$?"
  grep -A30 "^summary" "$OUT/engine_decode.log"
elif [ "$PART" = sweeps ]; then
  python3 -m pip install -q --no-index --find-links .whl/small msgspec > "$OUT/pip.log" 2>&1
  log "gemm_sweep"; timeout 250 python3 benchmarks/engine/gemm_sweep.py --out "$OUT/gemm" > "$OUT/gemm_sweep.log" 2>&1
  log "gemm_sweep rc=$?"
  log "attention_sweep"
  timeout 150 python3 benchmarks/engine/attention_sweep.py --out "$OUT/attention" > "$OUT/attention_sweep.log" 2>&1
  log "attention_sweep rc=$?"
  grep "^best" "$OUT/gemm_sweep.log"; cat "$OUT/attention_sweep.log"
elif [ "$PART" = engine ]; then
  python3 -m pip install -q --no-index --find-links .whl/small msgspec pycxxfilt jinja2 markupsafe rich pygments \
    markdown-it-py mdurl > "$OUT/pip.log" 2>&1; log "pip rc=$?"
  mkdir -p /root/ks-chunks && cp .whl/a/chunk.00 /root/ks-chunks/
  log "ops_check"; t0=$SECONDS
  timeout 200 python3 benchmarks/engine/ops_check.py ${SWEEP:+--sweep --batches 8} --out "$OUT/ops" > "$OUT/ops_check.log" 2>&1
  log "ops_check rc=$? $((SECONDS-t0))s"
  if [ -z "${SKIP_GEMM:-}" ]; then
    log "gemm_sweep"; t0=$SECONDS
    timeout 120 python3 benchmarks/engine/gemm_sweep.py --out "$OUT/gemm" > "$OUT/gemm_sweep.log" 2>&1
    log "gemm_sweep rc=$? $((SECONDS-t0))s"
  fi
  log "engine_decode"; t0=$SECONDS
  timeout 420 python3 benchmarks/engine_decode.py --out "$OUT/engine_decode.json" --commit "$COMMIT" \
    ${QUICK:+--quick} > "$OUT/engine_decode.log" 2>&1
  log "engine_decode rc=$? $((SECONDS-t0))s"
  for f in "$OUT"/*.log; do echo "== $f"; tail -n 30 "$f"; done
else
  cat /root/ks-chunks/chunk.00 .whl/b/chunk.01 > /root/ks-chunks/polars_runtime_32-2.1.0-cp311-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
  python3 -m pip install -q --no-index --find-links /root/ks-chunks --find-links .whl/small polars polars-runtime-32 \
    > "$OUT/pip.log" 2>&1; log "pip rc=$?"
  run=/tmp/engine-run
  log "profile"; t0=$SECONDS
  timeout 300 python3 -m kernelscope -q profile --backend engine --model qwen2-1.5b --out "$run" > "$OUT/profile.log" 2>&1
  log "profile rc=$? $((SECONDS-t0))s"
  python3 benchmarks/engine/profile_check.py "$run" > "$OUT/check.json"; log "check rc=$?"
  cp "$run/summary.json" "$run/run.json" "$OUT/" 2>/dev/null
  tar czf "$OUT/report.tgz" -C "$run" summary.json report/report.md report/report.zh.md report/tables 2>/dev/null
  tail -n 20 "$OUT/profile.log"; cat "$OUT/check.json"
fi
