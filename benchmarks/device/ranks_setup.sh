# Sourced by the multi-GPU device scripts (OUT set): kernelscope from this checkout, NVLink multicast off in every
# process the ranks start (the GPUs are shared: see the machine notes), the wheels the image lacks from
# .whl/small, a log() that stamps steps.txt, and the GPUs and their links in env.txt.
export PYTHONPATH=$PWD/src:${PYTHONPATH:-} PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [ -d .whl/small ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/small/*.whl \
    > "$OUT/pip.log" 2>&1 || { tail "$OUT/pip.log"; exit 1; }
  export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
log() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/steps.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv > "$OUT/env.txt"
nvidia-smi topo -m >> "$OUT/env.txt" 2>&1
