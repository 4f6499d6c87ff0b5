#!/usr/bin/env bash
# Device run, CPU side (the GPU machine's 16 cores, kind nvidia-h200): one node, many ranks. MODE=8x2g (default):
# 8 rank traces of 2 GB (16 GB of Kineto JSON) imported with the report; MODE=64x1.5g: 64 ranks of 1.5 GB each,
# gzip-compressed on disk, imported without the report (then, if time is left, MODE=64x1.5g-cluster: the same
# through `--cluster local`, where Ray is installed). The native reader is built there first (as
# native_reader_capture.sh does). Each mode fits one call (about 8 minutes: building the ranks ~2-3 min, the
# import is stopped at LIMIT seconds, default 300). Writes $OUT/many-ranks-$MODE.json, steps.txt, env.txt.
set -u -o pipefail
OUT=${OUT:-device-out}
MODE=${MODE:-8x2g}
LIMIT=${LIMIT:-300}
mkdir -p "$OUT"
source benchmarks/device/small_wheels.sh
export PYTHONPATH=$PWD/src:${PYTHONPATH:-}$SITE PYTHONUNBUFFERED=1
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/pycache
log() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/steps.txt"; }
{ echo "commit ${KS_COMMIT:-unknown}"; nproc; free -g; df -h /tmp; python3 --version; } > "$OUT/env.txt" 2>&1

mkdir -p /tmp/sj && tar xzf .whl/small/simdjson-src.tar.gz -C /tmp/sj
SUFFIX=$(python3 -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
INCLUDE=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])")
g++ -O2 -std=c++17 -DNDEBUG -fPIC -shared src/kernelscope/load/kineto/native/kineto_scan.cpp /tmp/sj/simdjson.cpp \
  -I/tmp/sj -I"$INCLUDE" -o "src/kernelscope/load/kineto/_kineto_scan$SUFFIX" > "$OUT/build.txt" 2>&1
python3 -c "from kernelscope.load.kineto import native_tables as n; assert n.available(), 'not built'" || exit 1
log "native reader built; mode $MODE"
case "$MODE" in
  8x2g) ARGS=(--ranks 8 --mb 2000 --work /tmp/ks-ranks8) ;;
  64x1.5g) ARGS=(--ranks 64 --mb 1500 --gzip --no-report --work /tmp/ks-ranks64) ;;
  64x1.5g-cluster) ARGS=(--ranks 64 --mb 1500 --gzip --no-report --cluster local --work /tmp/ks-ranks64) ;;
  *) echo "unknown MODE $MODE"; exit 2 ;;
esac
python3 benchmarks/many_ranks.py "${ARGS[@]}" --limit "$LIMIT" --out "$OUT/many-ranks-$MODE.json" 2>&1 | tee "$OUT/many-ranks-$MODE.log"
log "done rc=${PIPESTATUS[0]}"
