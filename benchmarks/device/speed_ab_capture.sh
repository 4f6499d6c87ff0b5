#!/usr/bin/env bash
# Device run, CPU side (the GPU machine's 16 cores): source trees side by side on one 330 MB Kineto trace —
# whole-process `import --no-report`, `import` with its report and `report` alone, trees alternating, ROUNDS rounds
# (default 3) after a warm-up, each with its peak RSS. OLD_SRC names the second tree's src folder (carried
# untracked); TREES (default "$OLD_SRC src")
# may name more. Every tree gets the native reader built here from .whl/small/simdjson-src.tar.gz. Writes under $OUT.
set -u -o pipefail
OUT=${OUT:-device-out}
OLD_SRC=${OLD_SRC:-bench-old/src}
TREES=${TREES:-"$OLD_SRC src"}
mkdir -p "$OUT"
source benchmarks/device/small_wheels.sh
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/pycache PYTHONUNBUFFERED=1
log() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/steps.txt"; }
{ echo "commit ${KS_COMMIT:-unknown}"; nproc; python3 --version; python3 -c "import matplotlib; print('matplotlib', matplotlib.__version__)"; } > "$OUT/env.txt" 2>&1

mkdir -p /tmp/sj && tar xzf .whl/small/simdjson-src.tar.gz -C /tmp/sj
SUFFIX=$(python3 -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
INCLUDE=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])")
for tree in $TREES; do
  g++ -O2 -std=c++17 -DNDEBUG -fPIC -shared "$tree/kernelscope/load/kineto/native/kineto_scan.cpp" /tmp/sj/simdjson.cpp \
    -I/tmp/sj -I"$INCLUDE" -o "$tree/kernelscope/load/kineto/_kineto_scan$SUFFIX" >> "$OUT/build.txt" 2>&1
  log "built $tree rc=$?"
done
PYTHONPATH=$PWD/src$SITE python3 benchmarks/make_big_trace.py /tmp/big330.json --mb 330 \
  --source tests/data/kineto/h200-llama-3-8b-p16-n3.trace.json.gz > /dev/null
log "trace $(stat -c %s /tmp/big330.json) bytes"

timed() {  # label tree command...: one whole process, wall seconds and its peak RSS, into $OUT/runs.txt
  local label=$1 tree=$2; shift 2
  PYTHONPATH="$PWD/$tree$SITE" python3 - "$label tree=$tree" "$@" 2>> "$OUT/errors.txt" <<'PY' | tee -a "$OUT/runs.txt"
import resource, subprocess, sys, time
label, argv = sys.argv[1], [sys.executable, "-m", "kernelscope", "-q", *sys.argv[2:]]
start = time.perf_counter()
code = subprocess.run(argv, stdout=subprocess.DEVNULL).returncode
seconds = time.perf_counter() - start
peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(f"{label} seconds={seconds:.3f} peak_kb={peak_kb} rc={code}")
PY
}
for round in $(seq 0 "${ROUNDS:-3}"); do  # round 0: warm-up (bytecode, page cache), not counted
  for tree in $TREES; do
    rm -rf /tmp/r-$round; timed "round=$round import-no-report" "$tree" import /tmp/big330.json --out /tmp/r-$round --no-report
    rm -rf /tmp/r-$round/report; timed "round=$round report" "$tree" report /tmp/r-$round
    rm -rf /tmp/r-$round; timed "round=$round import-with-report" "$tree" import /tmp/big330.json --out /tmp/r-$round
  done
done
ls "/tmp/r-${ROUNDS:-3}/report/figures" > "$OUT/figures.txt"
log "done"
