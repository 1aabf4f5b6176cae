#!/usr/bin/env bash
# The short runs that choose SmolLM2's second RL recipe, side by side: each variant continues the shipped GRPO buyer
# (artifacts/checkpoints/grpo-smollm2) for STEPS steps of the bilateral recipe (recipes/smollm2/grpo.yaml: 32 episodes
# a step, 4 groups of 8, the seller mix without the held-out persona), at a constant learning rate, sampling on
# llama.cpp. Every variant plays the same rows in the same order (TRL's sampler, seed 0; spare groups come from rows
# after the dataset's), so step k of one is step k of another on the same products, sellers and seeds. Each curve
# (reward, zero-variance share, deal rate, thought consistency per step) goes to artifacts/probes/; the adapters stay
# in runs/grpo2-short/<name>/ (not shipped).
#   bash training/recipes/smollm2/short_runs.sh                 # every variant in turn (resumes a cut run)
#   RUNS="control spares" STEPS=8 bash training/recipes/smollm2/short_runs.sh
# PARALLEL=1 starts every variant at once (a GPU machine: recipes/smollm2/lent_gpu_short.sh), each logging to
# RUN_ROOT/<name>.log; EXTRA_FLAGS go to every variant; START, RUN_ROOT and CURVES (the curves' folder and
# name prefix) move what the runs read and write; CONFIG names the recipe the variants share. Branches of a long run
# keep its rows step for step with its --max_steps and --stop_at_step, e.g. the steady student's (grpo10.yaml):
#   CONFIG=training/recipes/smollm2/grpo10.yaml START=runs/smollm2/sft_steady_heldout/final STEPS=160 \
#   EXTRA_FLAGS="--stop_at_step 8" RUN_ROOT=runs/grpo10-short CURVES=artifacts/probes/grpo10_short \
#   RUNS="lr2e5 beta004 t04" bash training/recipes/smollm2/short_runs.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
STEPS=${STEPS:-8}
START=${START:-artifacts/checkpoints/grpo-smollm2}
CONFIG=${CONFIG:-training/recipes/smollm2/grpo.yaml}
RUN_ROOT=${RUN_ROOT:-runs/grpo2-short}
CURVES=${CURVES:-artifacts/probes/grpo2_short}
declare -A FLAGS=(
  [control]=""                               # the shipped recipe as it is
  [spares]="--spare_groups 4"                # DAPO's dynamic sampling: flat groups replaced by spares with signal
  # advantages over the step's reward std, not each group's: a group whose deals differ by a dollar no longer gets
  # the unit-size push that closing against walking away gets (Dr. GRPO drops the division; the market recipe does this)
  [batchstd]="--scale_rewards batch"
  [consistency]="--consistency_weight 0.1"   # minus 0.1 a false ask/offer-vs-budget claim in the buyer's Thoughts
  [beta0]="--beta 0"                         # no KL anchor (and no reference forward)
  # the three that could add up: signal in every group, no anchor (flat groups then cost nothing), true Thoughts
  [combo]="--spare_groups 4 --beta 0 --consistency_weight 0.1"
  # a smaller step for a start that RL at 1e-4 and no anchor drove away from closing (grpo8), and a cooler sample
  # whose last-round arithmetic errs less often (a wrong jump over the budget is what punished the jump there)
  [lr2e5]="--learning_rate 2e-5"
  [beta004]="--learning_rate 2e-5 --beta 0.04"
  [t04]="--learning_rate 2e-5 --temperature 0.4"
)
RUNS=${RUNS:-control spares batchstd consistency beta0 combo}
for name in $RUNS; do
  [ -n "${FLAGS[$name]+x}" ] || { echo "unknown variant: $name (${!FLAGS[*]})" >&2; exit 2; }
done
mkdir -p "$RUN_ROOT" "$(dirname "$CURVES")"
pids=()
for name in $RUNS; do
  echo "== $name: ${FLAGS[$name]:-(the recipe as it is)}"
  # shellcheck disable=SC2086  # the flags are words
  cmd=(python training/grpo.py --config "$CONFIG"
    --model_name_or_path "$START" --max_steps "$STEPS" --lr_scheduler_type constant
    --rollout_backend "${ROLLOUT_BACKEND:-llamacpp}" --output_dir "$RUN_ROOT/$name"
    --episode_log "$RUN_ROOT/$name/episodes" --curve "${CURVES}_${name}_training_curve.json"
    ${FLAGS[$name]} ${EXTRA_FLAGS:-})
  if [ -n "${PARALLEL:-}" ]; then
    "${cmd[@]}" > "$RUN_ROOT/$name.log" 2>&1 &
    pids+=($!)
  else
    "${cmd[@]}"
  fi
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
[ "$status" = 0 ] || echo "a variant failed: see $RUN_ROOT/<name>.log" >&2
# the side-by-side table (reward as sampled, zero-variance share, deal rate, Thought consistency, seconds a step)
curves=()
for name in $RUNS; do
  f="${CURVES}_${name}_training_curve.json"
  [ -f "$f" ] && curves+=("$name=$f")
done
python training/compare_runs.py "${curves[@]}"
exit "$status"
