"""GRPO's forward passes without the batch's padding.

TRL pads every episode of a generation batch to the batch's longest prompt (on the left) and longest
completion (on the right), and both the reference forward (``--beta``) and each micro-batch of the
policy's forward and backward run at that full width. Whole negotiations vary from one reply to six
(about 150 to 1,100 completion tokens), so most of those columns are padding. ``TrimmedBatches``
(mixed into the GRPO-family trainers) makes two changes that leave the loss as it is:

* each chunk of a forward drops the columns that are padding in every one of its rows (the
  log-probs and entropies of dropped completion columns come back as 0, as the masked positions they
  are); with rotary positions only relative positions matter, so dropping leading pad columns
  changes no score beyond float rounding;
* with ``loss_type="dapo"`` (TRL's default, normalised by the generation batch's token count, not per
  micro-batch), the micro-batches of a step are cut from the batch ordered by length instead of a
  random order, so each holds episodes of similar length. The optimizer still steps once on the
  gradient of the whole batch, whatever the order;
* the LM head (49,152 columns for SmolLM2, a fifth of its forward) scores only the completion positions that carry
  the loss: the trained player's own tokens (``env_mask`` 1), not the opponent's messages and the chat template
  between them, in the policy's forward and backward and in the reference forward. TRL's fused head already scores
  only the labelled positions on a GPU (its Triton path); on a CPU it scores every position, so the same head is
  asked for the compact form there too. The skipped positions' log-probs and entropies come back as 0: they are
  masked out of the loss, the KL and the logged entropy, so the loss is the same.
* with no KL term (``--beta 0``), the same loss and advantages centred on each group's mean (TRL's
  ``sum_then_normalize``), a group whose episodes all scored the same (every advantage equal: zero up to rounding)
  moves nothing: its rows are left out of the policy's forward and backward, except as
  many of the shortest as keep every micro-batch filled (a step cuts its batch into equal micro-batches). The
  normaliser stays the generation batch's token count, so the gradient is the same; the logged entropy and clip
  ratios are then those of the rows trained. A third to a half of SmolLM2's groups were flat.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
import trl.trainer.utils as trl_utils
from trl import GRPOTrainer
from trl.trainer.utils import split_tensor_dict

_ORDER_FREE_LOSSES = ("dapo",)  # losses whose value does not depend on how the batch is split


@contextmanager
def compact_head():
    """TRL's fused LM head in its compact form (only the labelled positions projected) on any device: TRL takes it on
    Triton devices only, to keep tile shapes fixed for compilers (Neuron); eager CPU code has no such need."""
    before = trl_utils._use_triton
    trl_utils._use_triton = lambda device: True
    try:
        yield
    finally:
        trl_utils._use_triton = before


class TrimmedBatches:
    """A mixin for ``GRPOTrainer`` subclasses (put it first among the bases). ``score_trained_only`` (default on)
    scores the LM head at the trained positions only, ``skip_flat_groups`` (default on) leaves flat groups out when
    there is no KL term (the module docstring)."""

    score_trained_only = True
    skip_flat_groups = True  # with --beta 0, flat groups' rows left out of the forward and backward (same gradient)
    _scored = None  # the completion positions that carry the loss, for the forward under way (rows x columns)
    _rollout_scored = None  # the same for the generation batch just played (its env_mask rows), reference forward

    def _compute_loss(self, model, inputs):
        mask = inputs["completion_mask"]
        self._scored = (mask * inputs["tool_mask"] if "tool_mask" in inputs else mask).bool()
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self._scored = None

    def _generate_and_score_completions(self, inputs):
        try:
            return super()._generate_and_score_completions(inputs)
        finally:
            self._rollout_scored = None

    def _scored_columns(self, rows: int, keep: int) -> torch.Tensor | None:
        """The trained positions of a forward of ``rows`` x ``keep`` completion columns, where known: the loss's mask
        (policy), or the rollouts' env_mask rows when the forward is of the generation batch (reference)."""
        if not self.score_trained_only:
            return None
        if self._scored is not None and self._scored.shape == (rows, keep):
            return self._scored
        env = self._rollout_scored
        if env is not None and len(env) == rows and max((len(m) for m in env), default=0) <= keep:
            return torch.tensor([list(m) + [0] * (keep - len(m)) for m in env], dtype=torch.bool)
        return None

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                                           compute_entropy=False, compute_aux_loss=False, **extra):
        parent = super()._get_per_token_logps_and_entropies
        if compute_aux_loss or any(v is not None for v in extra.values()):  # multimodal or MoE: as TRL does it
            return parent(model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy,
                          compute_aux_loss, **extra)
        batch_size = batch_size or input_ids.size(0)
        width = input_ids.size(1)
        scored = self._scored_columns(input_ids.size(0), logits_to_keep)
        logps, entropies = [], []
        for start in range(0, input_ids.size(0), batch_size):
            ids, mask = input_ids[start: start + batch_size], attention_mask[start: start + batch_size]
            real = mask.bool().any(0)
            lead = int(real[: width - logits_to_keep].int().argmax()) if real[: width - logits_to_keep].any() else 0
            tail = int(real.flip(0).int().argmax()) if real.any() else 0
            tail = min(tail, logits_to_keep - 1)  # keep at least one completion column
            ids, mask, keep = ids[:, lead: width - tail], mask[:, lead: width - tail], logits_to_keep - tail
            if scored is None:
                lp, ent, _ = parent(model, ids, mask, keep, None, compute_entropy, False)
            else:
                lp, ent = self._scored_forward(model, ids, mask, keep,
                                               scored[start: start + batch_size, :keep].to(ids.device), compute_entropy)
            logps.append(torch.nn.functional.pad(lp, (0, tail)))
            if ent is not None:
                entropies.append(torch.nn.functional.pad(ent, (0, tail)))
        return torch.cat(logps), (torch.cat(entropies) if entropies else None), None

    def _scored_forward(self, model, ids, mask, keep, scored, compute_entropy):
        """TRL's text-only forward (its fused LM head, labels on the completion), the labels kept at the trained
        positions only and the head asked for its compact form."""
        labels = ids.masked_fill(mask == 0, -100)
        labels[:, :-keep] = -100
        labels[:, -keep:] = labels[:, -keep:].masked_fill(~scored, -100)
        with self.accelerator.autocast(), compact_head():
            out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
        return out.log_probs[:, -keep:], (out.entropy[:, -keep:] if compute_entropy else None)

    def _prepare_inputs(self, generation_batch):
        if not self.model.training or self.args.loss_type not in _ORDER_FREE_LOSSES:
            return super()._prepare_inputs(generation_batch)
        generate_every = self.args.steps_per_generation * self.num_iterations
        if self._step % generate_every == 0 or self._buffered_inputs is None:
            batch = self._generate_and_score_completions(generation_batch)  # text episodes: no image fields
            # advantages centred on each group's mean (not the batch's, as normalize_then_sum does), one process
            # holding whole groups in order
            if (self.skip_flat_groups and self.beta == 0.0 and self.accelerator.num_processes == 1
                    and self.multi_objective_aggregation == "sum_then_normalize"):
                batch = with_signal(batch, self.num_generations, self.args.steps_per_generation)
            self._buffered_inputs = split_tensor_dict(by_length(batch), self.args.steps_per_generation)
        return self._buffered_inputs[self._step % self.args.steps_per_generation]


class TrimmedGRPOTrainer(TrimmedBatches, GRPOTrainer):
    """TRL's ``GRPOTrainer`` without the batch's padding in its forward passes."""


def _lengths(batch: dict) -> torch.Tensor:
    return batch["prompt_mask"].sum(1) + batch["completion_mask"].sum(1)


def _rows(batch: dict, index: torch.Tensor) -> dict:
    """The batch's rows ``index`` (in that order), every per-row field alike; scalars as they are."""
    n = len(batch["prompt_mask"])

    def pick(v):
        if isinstance(v, torch.Tensor) and v.ndim >= 1 and v.size(0) == n:
            return v[index]
        if isinstance(v, list) and len(v) == n:
            return [v[i] for i in index.tolist()]
        return v

    return {k: pick(v) for k, v in batch.items()}


def by_length(batch: dict) -> dict:
    """The batch's rows ordered by length (prompt plus completion tokens), every per-row field alike."""
    return _rows(batch, torch.argsort(_lengths(batch), stable=True))


def with_signal(batch: dict, group: int, chunks: int) -> dict:
    """The rows of a generation batch (groups of ``group`` consecutive rows) whose group's advantages differ, plus
    the shortest rows of flat groups as needed to make a multiple of ``chunks`` rows (at least ``chunks``), in their
    order. With no KL term, a flat group's rows add nothing to the gradient (module docstring). Per-token advantages
    (SDPO's, a teacher's term mixed in) leave every row as it is: there a flat group's rows still carry that term."""
    adv = batch["advantages"]
    if adv.ndim != 1:
        return batch
    if len(adv) % group:
        raise ValueError(f"a generation batch of {len(adv)} rows is not made of groups of {group}")
    groups = adv.view(-1, group)
    flat = (groups.amax(1) == groups.amin(1)).repeat_interleave(group)
    keep = (~flat).nonzero().flatten()
    want = min(len(adv), max(chunks, -(-len(keep) // chunks) * chunks))
    spare = flat.nonzero().flatten()
    spare = spare[torch.argsort(_lengths(batch)[spare], stable=True)][: want - len(keep)]
    return _rows(batch, torch.sort(torch.cat([keep, spare])).values)
