"""``sft.py --teach verdicts --verdict_weight W``: TRL's SFTTrainer with the loss of each labelled verdict token
counted ``W`` times.

The verdict words are about one token in sixty of the buyer's own text. With the loss on them alone the replies broke
(nothing held the words around them); with the loss on all the buyer's tokens at equal weight, 24 steps did not move
them. Between the two, each verdict token's log-probability enters the sum ``W`` times and every other own token
once, over the same count of tokens as TRL's own loss (so ``W`` = 1 is TRL's loss exactly). The dataset carries the
verdict positions of each stream (``verdicts``, from ``verdict_example``); the collator TRL chose pads the batch and
a weight row is laid beside it.
"""

from __future__ import annotations

import torch
from trl import SFTTrainer


class VerdictWeightedSFTTrainer(SFTTrainer):
    """SFTTrainer whose loss counts the tokens at each example's ``verdicts`` positions ``verdict_weight`` times.
    The logged ``verdict_accuracy`` is the share of those tokens the model ranks first, before the step's update."""

    def __init__(self, *args, verdict_weight: float, **kwargs):
        if not verdict_weight >= 1:
            raise ValueError(f"the verdict weight must be at least 1, got {verdict_weight}")
        args_ = kwargs.get("args")
        if args_ is not None:
            if args_.padding_free or args_.packing:
                raise ValueError("weighted verdicts need one example a row (no packing, no padding-free batches)")
            args_.remove_unused_columns = False  # the verdict positions travel with each example to the collator
        super().__init__(*args, **kwargs)
        self.verdict_weight = float(verdict_weight)
        collate = self.data_collator

        def with_weights(examples):
            positions = [ex["verdicts"] for ex in examples]
            batch = collate([{k: v for k, v in ex.items() if k != "verdicts"} for ex in examples])
            weights = torch.ones(batch["labels"].shape, dtype=torch.float32)
            for row, at in enumerate(positions):
                at = [p for p in at if p < weights.size(1)]  # a verdict past --max_length was truncated away
                weights[row, at] = self.verdict_weight
            batch["verdict_weights"] = weights
            return batch

        self.data_collator = with_weights

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        weights = inputs.pop("verdict_weights", None)
        if weights is None or return_outputs or not model.training:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        inputs["use_cache"] = False
        outputs = model(**inputs, fused_lm_head=True)  # log_probs[:, t] scores token t + 1, zero where unlabelled
        w = weights[:, 1:].to(outputs.log_probs.device, outputs.log_probs.dtype)
        tokens = outputs.label_mask.sum() if num_items_in_batch is None else num_items_in_batch
        loss = -(outputs.log_probs * w).sum() / torch.as_tensor(tokens).clamp(min=1)
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * self.accelerator.num_processes
        marked = (w > 1) & outputs.label_mask.bool()
        gather = self.accelerator.gather_for_metrics
        valid, verdicts = gather(outputs.label_mask.sum()).sum(), gather(marked.sum()).sum()
        metrics = self._metrics["train"]
        metrics["mean_token_accuracy"].append((gather(outputs.is_top1.sum()).sum() / valid.clamp(min=1)).item())
        metrics["entropy"].append((gather(outputs.entropy.detach().sum()).sum() / valid.clamp(min=1)).item())
        self._total_train_tokens += gather(inputs["attention_mask"].sum()).sum().item()
        metrics["num_tokens"] = [self._total_train_tokens]
        if verdicts > 0:
            metrics["verdict_accuracy"].append((gather(outputs.is_top1[marked].sum()).sum() / verdicts).item())
        return loss
