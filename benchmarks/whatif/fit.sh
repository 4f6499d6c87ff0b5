#!/usr/bin/env bash
# Refit the shipped projection model (src/kernelscope/data/projection.toml). The factors are fitted on the committed
# device runs: the run directories under tests/data/runs (qwen2-0.5b, qwen2-1.5b batch 1 and qwen2-1.5b batch 8, each
# on an H200 and an H100) and the H200 Kineto captures of llama-3-8b, qwen2-1.5b batch 8 prompt 16 and deepseek-v3
# (imported first). Each device's per-kernel latency scale comes from pairs of runs of one workload on two devices: our
# three H200/H100 pairs, and TraceLens's five Hugging Face models on an H100 and an MI300X (from the corpus folder,
# $CORPUS, default /work/corpus: benchmarks/corpus/build_corpus.py builds it), which give their scales only.
# Then `python3 benchmarks/whatif/held_out.py --uncertainty-into src/kernelscope/data/projection.toml` refreshes the
# held-out ranges.
set -euo pipefail
cd "$(dirname "$0")/../.."
CORPUS=${CORPUS:-/work/corpus}
TL="$CORPUS/tracelens/tests/traces"
MODELS="Qwen_Qwen1.5-0.5B-Chat__1016005 gaunernst_bert-small-uncased__1016001 Falconsai_nsfw_image_detection__1016002
facebook_timesformer-base-finetuned-k400__1016002 google_owlv2-large-patch14-ensemble__1016001"
for m in $MODELS; do
  for d in h100 mi300; do
    [ -f "$TL/$d/$m.json.gz" ] || { echo "fit.sh: $TL/$d/$m.json.gz missing (build the corpus: benchmarks/corpus/build_corpus.py)" >&2; exit 2; }
  done
done
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
for t in llama-3-8b-p16-n3 qwen2-1.5b-b8-p16-n3 deepseek-v3-p16-n3; do
  python3 -m kernelscope -q import "tests/data/kineto/h200-$t.trace.json.gz" --out "$W/h200-$t" --no-report > /dev/null
done
PAIRS=()
for m in $MODELS; do
  for d in h100 mi300; do
    python3 -m kernelscope -q import "$TL/$d/$m.json.gz" --out "$W/tracelens-$d-$m" --no-report > /dev/null
  done
  PAIRS+=(--pair "$W/tracelens-h100-$m" "$W/tracelens-mi300-$m")
done
R=tests/data/runs
python3 -m kernelscope -q hw fit $R/h200-qwen2-0.5b-ncu $R/h100-qwen2-0.5b-ncu $R/h200-qwen2-1.5b-slim \
  $R/h100-qwen2-1.5b-b1-slim $R/h200-qwen2-1.5b-b8-slim $R/h100-qwen2-1.5b-b8-slim "$W"/h200-* \
  --pair $R/h200-qwen2-0.5b-ncu $R/h100-qwen2-0.5b-ncu --pair $R/h200-qwen2-1.5b-slim $R/h100-qwen2-1.5b-b1-slim \
  --pair $R/h200-qwen2-1.5b-b8-slim $R/h100-qwen2-1.5b-b8-slim \
  "${PAIRS[@]}" --out "${1:-src/kernelscope/data/projection.toml}"
