#!/usr/bin/env bash
# Device run: the default GPU profile's time outside the model's own runs (benchmarks/profile_overhead.py) for two
# source trees side by side: OLD_SRC (e.g. `git archive <commit> src | tar -x -C ab_old`, then ab_old/src) and this
# checkout's src. One run of each first compiles and caches bytecode (under a prefix: the image writes none); then
# ROUNDS rounds alternate the trees. Writes old-<k>.json / new-<k>.json and summary.txt under $OUT; with
# KEEP_REPORT=1 also the last new profile's report (report-new/).
set -u -o pipefail
OLD_SRC=${1:?usage: profile_overhead_ab.sh OLD_SRC [ROUNDS]}
ROUNDS=${2:-2}
OUT=${OUT:-device-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPYCACHEPREFIX=/tmp/pycache
unset PYTHONDONTWRITEBYTECODE
source benchmarks/device/small_wheels.sh
measure() {  # tree name, src dir, output file, more arguments of profile_overhead.py
  PYTHONPATH="$2$SITE" python3 benchmarks/profile_overhead.py --out "$3" "${@:4}" > "/tmp/$1.log" 2>&1 || tail -5 "/tmp/$1.log"
}
measure old-warm "$OLD_SRC" /tmp/old-warm.json
measure new-warm "$PWD/src" /tmp/new-warm.json
for k in $(seq 1 "$ROUNDS"); do
  measure old "$OLD_SRC" "$OUT/old-$k.json"
  keep=()
  [ "$k" = "$ROUNDS" ] && [ -n "${KEEP_REPORT:-}" ] && keep=(--keep-report "$OUT/report-new")
  measure new "$PWD/src" "$OUT/new-$k.json" "${keep[@]}"
done
for f in "$OUT"/old-*.json "$OUT"/new-*.json; do
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[1].split('/')[-1], round(r['outside_model_runs_s'],2), [(s['step'][:26], round(s['seconds'],2)) for s in r['steps'] if not s['step'].startswith(('Warm','Timing','Profiling'))], 'before steps', round(r['total_s']-sum(s['seconds'] for s in r['steps']),2))" "$f"
done | tee "$OUT/summary.txt"
