#!/usr/bin/env bash
# What ran on the device (kind nvidia-h100-x1), from the repository root, with the wheels of msgspec and polars
# carried in .whl/ (docs: /work/.library/device/README.md). Results land in $OUT.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:src || exit 1
export PYTHONUNBUFFERED=1
here=benchmarks/results/engine-profile-h100-2026-11-22
run=/tmp/engine-run
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/device.txt"
python3 -m kernelscope profile --backend engine --model qwen2-1.5b --out "$run" 2>&1 | tee "$OUT/profile.log"
python3 -m kernelscope report "$run" 2>&1 | tee -a "$OUT/profile.log"
python3 "$here/check.py" "$run" > "$OUT/check.json"; echo "check rc=$?" | tee -a "$OUT/profile.log"
cp "$run/summary.json" "$run/run.json" "$OUT/"
tar czf "$OUT/report.tgz" -C "$run" report/report.md report/report.zh.md report/tables
