"""``sft.py --teach verdicts --verdict_weight W``: TRL's SFTTrainer with the loss of each labelled verdict token
counted ``W`` times.

The verdict words are about one token in sixty of the buyer's own text. With the loss on them alone the replies broke
(nothing held the words around them); with the loss on all the buyer's tokens at equal weight, 24 steps did not move
them. Between the two, each verdict token's log-probability enters the sum ``W`` times and every other own token
once, over the same count of tokens as TRL's own loss (so ``W`` = 1 is TRL's loss exactly). The dataset carries the
verdict positions of each stream (``verdicts``, from ``verdict_example``); the collator TRL chose pads the batch and
a weight row is laid beside it.

``balance``: the policy's own verdicts are mostly "over" (asks start above a budget and a buyer that always writes
"over budget" is right about three times in four), so a uniform weight mostly teaches the word it already writes.
Balanced, each class ("over", "within") carries half the verdicts' weight (``W * n / (2 * n_class)`` a token; the
mean over the verdicts stays ``W``).
"""

from __future__ import annotations

import torch
from trl import SFTTrainer


class VerdictWeightedSFTTrainer(SFTTrainer):
    """SFTTrainer whose loss counts the tokens at each example's ``verdicts`` positions ``verdict_weight`` times.
    The logged ``verdict_accuracy`` is the share of those tokens the model ranks first, before the step's update
    (``verdict_accuracy_within``: of those whose true word is "within"). ``balance`` weighs the two words' classes
    alike (the module docstring)."""

    def __init__(self, *args, verdict_weight: float, balance: bool = False, **kwargs):
        if not verdict_weight >= 1:
            raise ValueError(f"the verdict weight must be at least 1, got {verdict_weight}")
        data = kwargs.get("train_dataset")
        per_class = {True: float(verdict_weight), False: float(verdict_weight)}  # true word "over": weight
        if balance:
            words = [o for row in data["verdict_over"] for o in row]
            n_over = sum(words)
            if not 0 < n_over < len(words):
                raise ValueError(f"balancing needs both verdict words among the labels: {n_over} 'over' of "
                                 f"{len(words)}")
            per_class = {True: verdict_weight * len(words) / (2 * n_over),
                         False: verdict_weight * len(words) / (2 * (len(words) - n_over))}
        args_ = kwargs.get("args")
        if args_ is not None:
            if args_.padding_free or args_.packing:
                raise ValueError("weighted verdicts need one example a row (no packing, no padding-free batches)")
            args_.remove_unused_columns = False  # the verdict positions travel with each example to the collator
        super().__init__(*args, **kwargs)
        self.class_weights = per_class
        collate = self.data_collator
        extra = ("verdicts", "verdict_over")

        def with_weights(examples):
            batch = collate([{k: v for k, v in ex.items() if k not in extra} for ex in examples])
            kind = torch.zeros(batch["labels"].shape, dtype=torch.long)  # 0 not a verdict, 1 "over", 2 "within"
            for row, ex in enumerate(examples):
                for p, over in zip(ex["verdicts"], ex["verdict_over"], strict=True):
                    if p < kind.size(1):  # a verdict past --max_length was truncated away
                        kind[row, p] = 1 if over else 2
            batch["verdict_kind"] = kind
            return batch

        self.data_collator = with_weights

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        kind = inputs.pop("verdict_kind", None)
        if kind is None or return_outputs or not model.training:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        inputs["use_cache"] = False
        outputs = model(**inputs, fused_lm_head=True)  # log_probs[:, t] scores token t + 1, zero where unlabelled
        kind = kind[:, 1:].to(outputs.log_probs.device)
        table = torch.tensor([1.0, self.class_weights[True], self.class_weights[False]])
        w = table.to(outputs.log_probs.device, outputs.log_probs.dtype)[kind]
        tokens = outputs.label_mask.sum() if num_items_in_batch is None else num_items_in_batch
        loss = -(outputs.log_probs * w).sum() / torch.as_tensor(tokens).clamp(min=1)
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * self.accelerator.num_processes
        labelled = outputs.label_mask.bool()
        gather = self.accelerator.gather_for_metrics
        valid = gather(outputs.label_mask.sum()).sum()
        metrics = self._metrics["train"]
        metrics["mean_token_accuracy"].append((gather(outputs.is_top1.sum()).sum() / valid.clamp(min=1)).item())
        metrics["entropy"].append((gather(outputs.entropy.detach().sum()).sum() / valid.clamp(min=1)).item())
        self._total_train_tokens += gather(inputs["attention_mask"].sum()).sum().item()
        metrics["num_tokens"] = [self._total_train_tokens]
        for name, marked in (("verdict_accuracy", (kind > 0) & labelled),
                             ("verdict_accuracy_within", (kind == 2) & labelled)):
            n = gather(marked.sum()).sum()
            if n > 0:  # the share of the step's verdict tokens (of those whose true word is "within") ranked first
                metrics[name].append((gather(outputs.is_top1[marked].sum()).sum() / n).item())
        return loss
