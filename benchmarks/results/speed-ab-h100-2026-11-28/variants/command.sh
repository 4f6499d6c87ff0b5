#!/usr/bin/env bash
# Device-only (run as bench-old/timeline.sh, sitecustomize.py under bench-old/sc/): import with report on the 333 MB trace, main-process spans, variants (figures off, 8 helpers).
set -u
OUT=${OUT:-device-out}; mkdir -p "$OUT"
source benchmarks/device/small_wheels.sh
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/pycache
mkdir -p /tmp/sj && tar xzf .whl/small/simdjson-src.tar.gz -C /tmp/sj
SUFFIX=$(python3 -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
INCLUDE=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])")
g++ -O2 -std=c++17 -DNDEBUG -fPIC -shared src/kernelscope/load/kineto/native/kineto_scan.cpp /tmp/sj/simdjson.cpp -I/tmp/sj -I"$INCLUDE" -o "src/kernelscope/load/kineto/_kineto_scan$SUFFIX"
PYTHONPATH=$PWD/src$SITE python3 benchmarks/make_big_trace.py /tmp/big330.json --mb 330 --source tests/data/kineto/h200-llama-3-8b-p16-n3.trace.json.gz > /dev/null
one() {  # label env...
  local label=$1; shift
  rm -rf /tmp/rr
  local t0=$(date +%s.%N)
  env "$@" PYTHONPATH="$PWD/bench-old/sc:$PWD/src$SITE" python3 -m kernelscope -q import /tmp/big330.json --out /tmp/rr $NOREP > /dev/null 2> /tmp/err.txt
  local t1=$(date +%s.%N)
  echo "$label $(python3 -c "print(f'{$t1-$t0:.3f}')")" | tee -a "$OUT/runs.txt"
  { echo "== $label"; cat /tmp/err.txt; } >> "$OUT/spans.txt"
}
for round in 0 1 2 3 4; do
  NOREP=--no-report one "r$round no-report" KS_X=0
  NOREP= one "r$round full" KS_X=0
  NOREP= one "r$round full-timed" KS_TIMING=1
  NOREP= one "r$round nofig" KS_VARIANT=1 KS_NOFIG=1
  NOREP= one "r$round helpers8" KS_VARIANT=1 KS_HELPERS=8
done
