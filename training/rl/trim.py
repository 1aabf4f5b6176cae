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
  gradient of the whole batch, whatever the order.
"""

from __future__ import annotations

import torch
from trl import GRPOTrainer
from trl.trainer.utils import split_tensor_dict

_ORDER_FREE_LOSSES = ("dapo",)  # losses whose value does not depend on how the batch is split


class TrimmedBatches:
    """A mixin for ``GRPOTrainer`` subclasses (put it first among the bases)."""

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                                           compute_entropy=False, compute_aux_loss=False, **extra):
        parent = super()._get_per_token_logps_and_entropies
        if compute_aux_loss or any(v is not None for v in extra.values()):  # multimodal or MoE: as TRL does it
            return parent(model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy,
                          compute_aux_loss, **extra)
        batch_size = batch_size or input_ids.size(0)
        width = input_ids.size(1)
        logps, entropies = [], []
        for start in range(0, input_ids.size(0), batch_size):
            ids, mask = input_ids[start: start + batch_size], attention_mask[start: start + batch_size]
            real = mask.bool().any(0)
            lead = int(real[: width - logits_to_keep].int().argmax()) if real[: width - logits_to_keep].any() else 0
            tail = int(real.flip(0).int().argmax()) if real.any() else 0
            tail = min(tail, logits_to_keep - 1)  # keep at least one completion column
            lp, ent, _ = parent(model, ids[:, lead: width - tail], mask[:, lead: width - tail], logits_to_keep - tail,
                                None, compute_entropy, False)
            logps.append(torch.nn.functional.pad(lp, (0, tail)))
            if ent is not None:
                entropies.append(torch.nn.functional.pad(ent, (0, tail)))
        return torch.cat(logps), (torch.cat(entropies) if entropies else None), None

    def _prepare_inputs(self, generation_batch):
        if not self.model.training or self.args.loss_type not in _ORDER_FREE_LOSSES:
            return super()._prepare_inputs(generation_batch)
        generate_every = self.args.steps_per_generation * self.num_iterations
        if self._step % generate_every == 0 or self._buffered_inputs is None:
            batch = self._generate_and_score_completions(generation_batch)  # text episodes: no image fields
            self._buffered_inputs = split_tensor_dict(by_length(batch), self.args.steps_per_generation)
        return self._buffered_inputs[self._step % self.args.steps_per_generation]


class TrimmedGRPOTrainer(TrimmedBatches, GRPOTrainer):
    """TRL's ``GRPOTrainer`` without the batch's padding in its forward passes."""


def by_length(batch: dict) -> dict:
    """The batch's rows ordered by length (prompt plus completion tokens), every per-row field alike."""
    lengths = batch["prompt_mask"].sum(1) + batch["completion_mask"].sum(1)
    order = torch.argsort(lengths, stable=True)
    n = len(lengths)

    def permute(v):
        if isinstance(v, torch.Tensor) and v.ndim >= 1 and v.size(0) == n:
            return v[order]
        if isinstance(v, list) and len(v) == n:
            return [v[i] for i in order.tolist()]
        return v

    return {k: permute(v) for k, v in batch.items()}
