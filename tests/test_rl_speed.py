"""What makes RL steps faster must not change what they compute: GRPO's forward without padding."""

from __future__ import annotations

import copy

import pytest
import torch
from accelerate import Accelerator
from trl import GRPOTrainer
from trl.trainer import add_fused_lm_head

from training.rl.trim import TrimmedBatches, by_length


class _Base:
    """TRL's own per-token log-prob code, without building a trainer around it."""

    _get_per_token_logps_and_entropies = GRPOTrainer._get_per_token_logps_and_entropies

    def __init__(self, model):
        self.model, self.temperature = model, 1.0
        self.accelerator = Accelerator(cpu=True)
        self.model_kwarg_keys = set()


class _Trimmed(TrimmedBatches, _Base):
    pass


def _padded_batch(tok, rng, rows=5, prompt_w=30, completion_w=40):
    """Left-padded prompts and right-padded completions of uneven lengths, as TRL builds them."""
    ids = torch.full((rows, prompt_w + completion_w), tok.pad_token_id)
    mask = torch.zeros_like(ids)
    for r in range(rows):
        p, c = int(rng.integers(3, prompt_w - 8)), int(rng.integers(2, completion_w - 15))
        ids[r, prompt_w - p: prompt_w] = torch.tensor(rng.integers(5, len(tok), p))
        ids[r, prompt_w: prompt_w + c] = torch.tensor(rng.integers(5, len(tok), c))
        mask[r, prompt_w - p: prompt_w + c] = 1
    return ids, mask


def test_trimmed_forward_gives_trl_log_probs_on_every_real_token(tiny):
    import numpy as np

    model, tok = copy.deepcopy(tiny[0]), tiny[1]
    add_fused_lm_head(model, temperature=1.0, outputs=("log_probs", "entropy"))  # what GRPOTrainer does to its policy
    rng = np.random.default_rng(0)
    ids, mask = _padded_batch(tok, rng)
    with torch.no_grad():
        full, full_ent, _ = _Base(model)._get_per_token_logps_and_entropies(model, ids, mask, 40, 2, True)
        trim, trim_ent, _ = _Trimmed(model)._get_per_token_logps_and_entropies(model, ids, mask, 40, 2, True)
    real = mask[:, 30:].bool()
    assert trim.shape == full.shape and trim_ent.shape == full_ent.shape
    assert torch.allclose(trim[real], full[real], atol=1e-4) and torch.allclose(trim_ent[real], full_ent[real], atol=1e-4)
    assert (trim[~real] == 0).all()  # dropped padding columns come back as masked zeros


def test_micro_batches_are_cut_from_the_batch_ordered_by_length():
    batch = {"prompt_mask": torch.tensor([[1, 1], [0, 1], [1, 1]]),
             "completion_mask": torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0]]),
             "advantages": torch.tensor([0.1, 0.2, 0.3]), "names": ["a", "b", "c"], "num_items_in_batch": torch.tensor(7)}
    out = by_length(batch)
    assert out["names"] == ["b", "c", "a"] and out["advantages"].tolist() == pytest.approx([0.2, 0.3, 0.1])
    assert out["num_items_in_batch"].item() == 7 and out["prompt_mask"].tolist() == [[0, 1], [1, 1], [1, 1]]
