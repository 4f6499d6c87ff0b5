#!/usr/bin/env bash
# Device run on two GPUs (kind nvidia-h200-x2), the end-of-session check of the current code:
#   1. the README's main job: `kernelscope profile` on its default (qwen2-1.5b, one GPU), timed;
#   2. `kernelscope profile --gpus 2 --ep 2 --model deepseek-v3` (full width, 3 layers, experts split over the
#      ranks), with its report: the phase table's GPU busy of a run of several GPUs must stay within 0-100% and its
#      mean gaps non-negative (phases.phase_table), checked from the run's kernels in plain Python;
#   3. `kernelscope report` of both runs again, read back from their files: summary.json must not change.
# Wheels the image lacks travel in .whl/small (carry it; see multi_gpu_capture.sh for keeping the tree small).
# Writes under $OUT: steps.txt, env.txt, busy.txt, one tar.gz per run (report, tables, run.json, summary.json).
set -u -o pipefail
OUT=${OUT:-device-out}
W=/tmp/ks-regression
rm -rf "$W" && mkdir -p "$W/runs" "$OUT"
source benchmarks/device/ranks_setup.sh
ks() { python3 -m kernelscope -q "$@"; }
echo "commit ${KS_COMMIT:-unknown}" >> "$OUT/env.txt"
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__, "gpus", torch.cuda.device_count())' >> "$OUT/env.txt"

log "default profile"; t0=$SECONDS
python3 -m kernelscope profile --out "$W/runs/default" > "$W/default.log" 2>&1
log "default profile rc=$? $((SECONDS-t0))s"
log "deepseek-v3 on 2 GPUs, ep 2"; t0=$SECONDS
ks profile --gpus 2 --ep 2 --model deepseek-v3 --prompt-len 64 --new-tokens 8 --repeats 2 --out "$W/runs/ds-ep2" \
  > "$W/ds-ep2.log" 2>&1
log "deepseek-v3 ep 2 rc=$? $((SECONDS-t0))s"
# The runs read back (their constant columns from the Parquet footers): the report made again must say the same.
for run in default ds-ep2; do
  [ -d "$W/runs/$run" ] || continue
  cp "$W/runs/$run/summary.json" "$W/$run.summary.before.json"
  ks report "$W/runs/$run" > /dev/null 2>> "$W/rerender.log"
  log "report $run again rc=$? summary $(cmp -s "$W/$run.summary.before.json" "$W/runs/$run/summary.json" && echo same || echo DIFFERS)"
done
for run in default ds-ep2; do
  [ -d "$W/runs/$run" ] || continue
  python3 - "$W/runs/$run" >> "$OUT/busy.txt" <<'PY'
import csv, sys
from pathlib import Path
import polars as pl
run = Path(sys.argv[1])
kernels = pl.read_parquet(run / "kernels.parquet").filter(pl.col("start_ns").is_not_null())
rows = {r["phase"]: r for r in csv.DictReader(open(run / "report" / "tables" / "phases.csv"))}
for (phase,), part in kernels.partition_by("phase", as_dict=True).items():
    busy, lanes = 0, 0
    for _, lane in part.partition_by("rank", "device", as_dict=True).items():
        lanes += 1
        reach = None
        for start, dur in sorted(zip(lane["start_ns"].to_list(), lane["dur_ns"].to_list())):
            end = start + dur
            if reach is None or start > reach:
                busy, reach = busy + end - start, end
            elif end > reach:
                busy, reach = busy + end - reach, end
    span = int((part["start_ns"] + part["dur_ns"]).max() - part["start_ns"].min())
    row = rows.get(phase, {})
    print(f"{run.name} {phase}: gpus={lanes} busy_pct(plain)={100 * busy / (span * lanes):.2f} "
          f"report busy_pct={row.get('busy_pct')} mean_gap_ns={row.get('mean_gap_ns')}")
PY
  tar czf "$OUT/$run.tar.gz" --exclude='*.png' --exclude='*.svg' --exclude='*.html' --exclude='trace.json.gz' \
    --exclude='traces' -C "$W/runs" "$run"
done
tail -n 12 "$W/default.log" > "$OUT/default-closing.txt"
cd "$W" && tar czf "$OUT/logs.tar.gz" ./*.log
cat "$OUT/steps.txt" "$OUT/busy.txt"
