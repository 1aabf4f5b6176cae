"""GRPO against the live environment, on whole multi-turn episodes.

What it is: TRL's ``GRPOTrainer`` (without the batch's padding in its forward passes:
``training/rl/trim.py``) with a ``rollout_func`` that plays complete negotiations with
the batched rollout engine. Each dataset row names a train-split product and a seed; TRL repeats
each row ``num_generations`` times, so the G episodes of a group share the scenario, the seller
persona and the seller's seed, and the group baseline compares buyer behaviours on the same
game. The episode's token stream after the first prompt is the completion; the buyer's own
tokens are trained (``env_mask`` 1) and the seller's messages and template tokens are masked out.
The seller is frozen: the scripted persona mix by default, or a frozen model (``--seller_model``).
The reward is the environment's verifiable buyer reward. No reference model (beta 0) by default.

Per step, ``artifacts/grpo_training_curve.json`` records reward mean/std/min/max, deal rate,
first-offer ratio, turns per episode, format-error rate and ``frac_reward_zero_std`` (so the
paper's phases can be looked for), plus TRL's loss and KL logs.

    python training/grpo.py                               # from runs/sft/final (python training/sft.py), CPU
    python training/grpo.py --smoke                       # seconds: what the tests run
    python training/grpo.py --model_name_or_path Qwen/Qwen3-0.6B --use_peft --use_vllm --bf16 --use_cpu false
"""

from __future__ import annotations

from trl import get_peft_config

from training.rl.run import GRPOScriptArguments, HaggleGRPOConfig, prepare, train_and_finish
from training.rl.trim import TrimmedGRPOTrainer

DEFAULT_CURVE = "artifacts/grpo_training_curve.json"
DEFAULT_DIR = "runs/grpo"


def main(argv: list[str] | None = None):
    run = prepare(GRPOScriptArguments, HaggleGRPOConfig, argv, __file__, DEFAULT_CURVE, DEFAULT_DIR)
    trainer = TrimmedGRPOTrainer(model=run.model, reward_funcs=run.reward_funcs, args=run.cfg, train_dataset=run.dataset,
                          processing_class=run.tokenizer, rollout_func=run.rollouts,
                          peft_config=get_peft_config(run.model_args))
    trainer.score_trained_only = run.script.lm_head_trained_only
    return trainer, train_and_finish(trainer, run)


if __name__ == "__main__":
    main()
