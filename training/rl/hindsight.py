"""SDPO's part beside GRPO's machinery (``training/sdpo.py`` runs it): hindsight feedback on a
finished episode, the teacher's log-probs under it, and per-token advantages mixed from the two.

The teacher is the *same policy* conditioned on hindsight: after each episode the buyer's tokens
are re-scored with a feedback note added to its system prompt (the outcome, what went wrong and how
to fix it, and, when a sibling episode of the same game did better with a positive reward, that
sibling's moves as a demonstration), written from what the buyer may know only, never the seller's
cost. Per buyer token ``A_sdpo(t) = clamp(log p_teacher(y_t) - log p_student(y_t), -5, 5)``, mixed
with the group-relative episode advantage as ``A = lam * A_grpo + (1 - lam) * A_sdpo``, ``lam``
annealed linearly. TRL's ``trl.experimental.sdpo.SDPOTrainer`` is single-turn with 0/1 success
rewards, so ``SDPOTrainer`` here subclasses TRL's ``GRPOTrainer`` and only replaces the advantages
with per-token ones (TRL's loss accepts ``(B, T)`` advantages).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from trl import GRPOTrainer

from env.bargain.protocol import format_price
from training.games import GAMES
from training.rl.run import GRPOScriptArguments, HaggleGRPOConfig
from training.rl.trim import TrimmedBatches


@dataclass
class SDPOScriptArguments(GRPOScriptArguments):
    curve: str = field(default="artifacts/sdpo_training_curve.json", metadata={"help": "training-curve artifact "
                                                                                       "('' for none)"})
    lam_start: float = field(default=0.9, metadata={"help": "weight of the GRPO advantage at the start"})
    lam_end: float = field(default=0.5, metadata={"help": "weight of the GRPO advantage at the end"})
    gap_clamp: float = field(default=5.0, metadata={"help": "clamp of the teacher/student log-prob gap"})
    gap_center: str = field(default="batch", metadata={
        "help": "batch: subtract the step's mean gap over buyer tokens, so the dense term says which tokens the "
                "hindsight teacher prefers rather than pushing every token down (a small model reads the feedback "
                "note as off-distribution text: its teacher scores all tokens lower, about -0.13 per token for the "
                "tiny model, and uncentred runs diverged); none: the paper's raw gap"})

    def __post_init__(self):
        super().__post_init__()
        if not GAMES[self.env].hindsight:
            raise ValueError(f"SDPO's hindsight feedback is written for the bilateral buyer, not --env {self.env}; "
                             f"train it with training/grpo.py --env {self.env} (or sft.py --env {self.env})")
        if self.gap_center not in ("batch", "none"):
            raise ValueError(f"--gap_center must be batch or none, got {self.gap_center!r}")
        if not (0 <= self.lam_end <= 1 and 0 <= self.lam_start <= 1) or self.gap_clamp <= 0:
            raise ValueError("need 0 <= lam_start, lam_end <= 1 and gap_clamp > 0")


@dataclass
class HaggleSDPOConfig(HaggleGRPOConfig):
    output_dir: str = field(default="runs/sdpo")


def hindsight(record, siblings: list) -> str:
    """Feedback on one finished episode, from the buyer's own knowledge only (its budget is in the
    episode's record)."""
    budget = record.transcript["scenario"]["budget"]
    m, turns = record.metrics, record.transcript["turns"]
    buyer_moves = [t["action"] or f"(unreadable: {t['error']})" for t in turns if t["role"] == "buyer"]
    asks = [t["action"] for t in turns if t["role"] == "seller" and t["action"] and t["action"].startswith("[SELL]")]
    b = format_price(budget)
    if m["format_errors"]:
        outcome = "your reply could not be read, which is the worst outcome (reward -1)"
        fix = "write exactly three lines, Thought:, Talk: and Action: with one action such as [BUY] $X"
    elif m["overshoot"]:
        outcome = f"you offered or accepted more than your budget {b} (reward -1)"
        fix = f"compare every price with your budget {b} before you offer or accept; never exceed it"
    elif m["deal"]:
        outcome = f"deal at {format_price(m['price'])} (reward {record.reward:+.2f})"
        fix = ("open lower and concede in smaller steps" if record.reward < 0.5
               else "keep anchoring low and conceding slowly")
    else:
        last = asks[-1] if asks else "none"
        outcome = f"no deal ({m['end_reason']}, reward 0); the seller's last ask was {last}"
        fix = f"concede toward the seller before the last round and accept an ask within your budget {b}"
    note = (f"Hindsight feedback on this game: {outcome}. Your moves: {', '.join(buyer_moves) or 'none'}. "
            f"To do better: {fix}.")
    better = [s for s in siblings if s is not record and s.reward > max(record.reward, 0.0)]
    if better:
        best = max(better, key=lambda s: s.reward)
        moves = [t["action"] for t in best.transcript["turns"] if t["role"] == "buyer" and t["action"]]
        note += f" A better game with the same seller: {', '.join(moves)} (reward {best.reward:+.2f})."
    return note


def mixed_advantages(episode_adv: torch.Tensor, teacher: torch.Tensor, student: torch.Tensor, mask: torch.Tensor,
                     lam: float, clamp: float, center: str = "batch") -> tuple[torch.Tensor, float]:
    """Per-token ``lam * A_grpo + (1 - lam) * A_sdpo`` with ``A_sdpo = clamp(teacher - student)`` on
    the buyer's tokens (``mask``), centred on its masked mean when ``center == "batch"``. Returns
    the advantages and the mean gap before centring."""
    gap = (teacher - student).clamp(-clamp, clamp) * mask
    bias = (gap.sum() / mask.sum().clamp(min=1)).item()
    if center == "batch":
        gap = (gap - bias) * mask
    return lam * episode_adv.unsqueeze(1) + (1 - lam) * gap, bias


class SDPOTrainer(TrimmedBatches, GRPOTrainer):
    """GRPO's machinery with per-token advantages from hindsight self-distillation."""

    def __init__(self, *args, rollouts=None, sdpo: SDPOScriptArguments | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.rollouts, self.sdpo = rollouts, sdpo

    def _teacher_prompt(self, record, note: str) -> list[int]:
        agent = self.rollouts.agent
        system, first = record.messages[0]["content"], record.messages[1]["content"]
        messages = [{"role": "system", "content": f"{system}\n{note}"},
                    {"role": "user", "content": first}]
        return list(agent.tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True,
                                                        return_dict=False, **agent.template_kwargs))

    def _logps(self, prompts: list[list[int]], completion_ids: torch.Tensor, completion_mask: torch.Tensor):
        width = max(len(p) for p in prompts)
        pad = self.rollouts.agent.tokenizer.pad_token_id
        device = completion_ids.device
        ids = torch.full((len(prompts), width), pad, dtype=torch.long, device=device)
        att = torch.zeros((len(prompts), width), dtype=torch.long, device=device)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p, device=device)
            att[i, width - len(p):] = 1
        with torch.no_grad():
            logps, *_ = self._get_per_token_logps_and_entropies(
                self.model, torch.cat([ids, completion_ids], 1), torch.cat([att, completion_mask], 1),
                completion_ids.size(1), batch_size=self.args.per_device_train_batch_size)
        return logps

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        records = self.rollouts.last_records
        g = self.args.num_generations
        groups = [records[i: i + g] for i in range(0, len(records), g)]
        notes = [hindsight(r, groups[i // g]) for i, r in enumerate(records)]
        teacher_prompts = [self._teacher_prompt(r, note) for r, note in zip(records, notes)]
        mask = out["completion_mask"] * out.get("tool_mask", torch.ones_like(out["completion_mask"]))
        teacher = self._logps(teacher_prompts, out["completion_ids"], out["completion_mask"])
        student = out.get("old_per_token_logps")
        if student is None:  # on-policy: the sampling log-probs the rollout recorded are the student's
            student = out.get("sampling_per_token_logps")
        if student is None:
            student = self._logps([r.prompt_ids for r in records], out["completion_ids"], out["completion_mask"])
        progress = min(1.0, self.state.global_step / max(1, self.args.max_steps - 1))
        lam = self.sdpo.lam_start + (self.sdpo.lam_end - self.sdpo.lam_start) * progress
        out["advantages"], bias = mixed_advantages(out["advantages"], teacher, student, mask, lam,
                                                   self.sdpo.gap_clamp, self.sdpo.gap_center)
        mode = "train" if self.model.training else "eval"
        self._metrics[mode]["sdpo/lambda"].append(lam)
        self._metrics[mode]["sdpo/gap_mean"].append(bias)  # before centering
        self._metrics[mode]["sdpo/demo_rate"].append(sum("A better game" in n for n in notes) / len(notes))
        return out
