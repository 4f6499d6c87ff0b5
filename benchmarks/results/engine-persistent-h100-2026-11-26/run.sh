#!/usr/bin/env bash
# Call 1 (kind nvidia-h100-x1): the barrier and GEMV-chain phases of the persistent-kernel probe. Results in $OUT.
set -u -o pipefail
OUT=${OUT:-device-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=src
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/device.txt"
timeout 560 python3 benchmarks/engine/persistent_probe.py --out "$OUT" --phases barrier,chain > "$OUT/probe.log" 2>&1
echo "rc=$?" >> "$OUT/probe.log"
grep -v '^{' "$OUT/probe.log" | tail -60
