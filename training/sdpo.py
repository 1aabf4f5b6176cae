"""SDPO (Self-Distillation Policy Optimization) on whole multi-turn episodes.

What it is (arXiv 2601.20802): the same on-policy episodes as GRPO
(``training/grpo.py``'s rollouts, groups sharing scenario, persona and seed), plus a teacher
that is the *same policy* conditioned on hindsight. After each episode the buyer's tokens are
re-scored with a feedback note added to its system prompt: the outcome, what went wrong and
how to fix it, and, when a sibling episode of the same game did better with a positive reward,
that sibling's moves as a demonstration. The feedback uses only what the buyer may know (its
budget, the public messages, the reward); never the seller's cost.

Per buyer token: ``A_sdpo(t) = clamp(log p_teacher(y_t) - log p_student(y_t), -5, 5)``, mixed
with the group-relative episode advantage as ``A = lam * A_grpo + (1 - lam) * A_sdpo``, ``lam``
annealed linearly from ``--lam_start`` to ``--lam_end``. No reference model (KL 0). TRL's
``trl.experimental.sdpo.SDPOTrainer`` is single-turn with 0/1 success rewards, so this subclasses
TRL's ``GRPOTrainer`` and only replaces the advantages with per-token ones (TRL's loss accepts
``(B, T)`` advantages). By default the gap is centred on the step's mean (``--gap_center``): the
raw gap of a small model is biased negative, which pushes every sampled token down (runs diverged).

    python training/sdpo.py                        # from runs/sft/final (python training/sft.py), CPU
    python training/sdpo.py --smoke
"""

from __future__ import annotations

from trl import get_peft_config

from training.rl.hindsight import HaggleSDPOConfig, SDPOScriptArguments, SDPOTrainer
from training.rl.run import prepare, train_and_finish

DEFAULT_CURVE = "artifacts/sdpo_training_curve.json"
DEFAULT_DIR = "runs/sdpo"


def main(argv: list[str] | None = None):
    run = prepare(SDPOScriptArguments, HaggleSDPOConfig, argv, __file__, DEFAULT_CURVE, DEFAULT_DIR)
    trainer = SDPOTrainer(model=run.model, reward_funcs=run.reward_funcs, args=run.cfg, train_dataset=run.dataset,
                          processing_class=run.tokenizer, rollout_func=run.rollouts,
                          peft_config=get_peft_config(run.model_args), rollouts=run.rollouts, sdpo=run.script)
    trainer.score_trained_only = run.script.lm_head_trained_only
    return trainer, train_and_finish(trainer, run)


if __name__ == "__main__":
    main()
