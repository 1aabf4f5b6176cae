"""One SFT training sample exactly as the trainer saw it, rebuilt with the trainer's own code."""

from __future__ import annotations

from types import SimpleNamespace

from env.bargain.players import SELLERS
from space.model import SHIPPED


def sft_sample(mode: str = "option_a", model: str | None = None) -> list[tuple[str, str | None]]:
    """Game 0 of ``training/sft.py`` (train product 0, seed 0, the first seller) as
    ``(text, label)`` spans: label ``trained`` where ``completion_mask`` is 1, else None."""
    from training.engine.backends import TransformersBackend  # noqa: PLC0415
    from training.engine.models import load_model  # noqa: PLC0415
    from training.games.bargain import BargainGame  # noqa: PLC0415
    from training.engine.rollout import LLMAgent  # noqa: PLC0415

    net, tok = load_model(model or str(SHIPPED), device="cpu", dtype="float32")
    game = BargainGame(SimpleNamespace(scenarios="builtin", budget_factor=0.8, seller_names=[next(iter(SELLERS))],
                                       max_turns=6))
    dataset, _ = game.expert_games([LLMAgent(TransformersBackend(net, tok), mode)], 1)
    ids, mask = dataset[0]["input_ids"], dataset[0]["completion_mask"]
    spans, start = [], 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or mask[i] != mask[start]:
            spans.append((tok.decode(ids[start:i]), "trained" if mask[start] else None))
            start = i
    return spans
