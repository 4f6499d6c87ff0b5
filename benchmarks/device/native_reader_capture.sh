#!/usr/bin/env bash
# Device run, CPU side (the GPU machine's 16 cores): the native Kineto reader built there from the simdjson sources
# carried as .whl/small/simdjson-src.tar.gz (the device has no network, so no build isolation), then a 330 MB trace
# read with 1 to 16 decode threads (benchmarks/decode_workers.py) and, beside it, by the msgspec path's helper
# processes (KERNELSCOPE_NATIVE_READER=0); the two paths' tables compared on that trace; whole-process
# `import --no-report` both ways, alternating. Writes under $OUT.
set -u -o pipefail
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source benchmarks/device/small_wheels.sh
export PYTHONPATH=$PWD/src:${PYTHONPATH:-}$SITE PYTHONUNBUFFERED=1
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/pycache  # bytecode cached, as on any installed machine
log() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/steps.txt"; }
{ echo "commit ${KS_COMMIT:-unknown}"; nproc; python3 --version; g++ --version | head -1; } > "$OUT/env.txt" 2>&1

mkdir -p /tmp/sj && tar xzf .whl/small/simdjson-src.tar.gz -C /tmp/sj
SUFFIX=$(python3 -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
INCLUDE=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])")
log "build"
g++ -O2 -std=c++17 -DNDEBUG -fPIC -shared src/kernelscope/load/kineto/native/kineto_scan.cpp /tmp/sj/simdjson.cpp \
  -I/tmp/sj -I"$INCLUDE" -o "src/kernelscope/load/kineto/_kineto_scan$SUFFIX" > "$OUT/build.txt" 2>&1
log "build rc=$?"
python3 -c "from kernelscope.load.kineto import native_tables as n; assert n.available(), 'not built'" || exit 1

python3 benchmarks/make_big_trace.py /tmp/big330.json --mb 330 \
  --source tests/data/kineto/h200-llama-3-8b-p16-n3.trace.json.gz > /dev/null
log "same tables both ways"
python3 - > "$OUT/same-tables.txt" 2>&1 <<'PY'
from pathlib import Path
from kernelscope.load.kineto import native_tables
from kernelscope.load.kineto.reader import load_kineto
fast = load_kineto(Path("/tmp/big330.json"))
native_tables._kineto_scan = None
slow = load_kineto(Path("/tmp/big330.json"))
for name in ("kernels", "launches", "ops"):
    print(name, getattr(fast, name).height, getattr(fast, name).equals(getattr(slow, name)))
print("dropped", fast.meta.dropped_events == slow.meta.dropped_events, "events", fast.meta.event_count == slow.meta.event_count)
PY
cat "$OUT/same-tables.txt"
log "decode threads"
python3 benchmarks/decode_workers.py --trace /tmp/big330.json --workers 1,2,4,6,8,12,16 --repeats 3 \
  --out "$OUT/decode-threads.json" > /tmp/threads.log 2>&1; log "decode threads rc=$?"
tail -9 /tmp/threads.log
log "decode processes (msgspec path)"
KERNELSCOPE_NATIVE_READER=0 python3 benchmarks/decode_workers.py --trace /tmp/big330.json --workers 1,8 --repeats 3 \
  --out "$OUT/decode-processes.json" > /tmp/processes.log 2>&1; log "decode processes rc=$?"
tail -4 /tmp/processes.log
log "whole-process import --no-report"
for round in 1 2 3; do
  for native in 1 0; do
    rm -rf /tmp/run-import
    start=$(date +%s.%N)
    KERNELSCOPE_NATIVE_READER=$native python3 -m kernelscope -q import /tmp/big330.json --out /tmp/run-import --no-report \
      > /dev/null 2>> "$OUT/import-errors.txt"
    end=$(date +%s.%N)
    echo "native=$native round=$round seconds=$(python3 -c "print(round($end - $start, 3))")" | tee -a "$OUT/import.txt"
  done
done
log "done"
