"""The CPU inference engine (CTranslate2) against the reference backend (transformers ``generate``): the
same greedy tokens on the games' real contexts, a re-export after a training step, clear errors."""

from __future__ import annotations

import pytest

from env.bargain.sources import get_split
from env.market import TASKS
from training.engine.backends import SamplingConfig, TransformersBackend
from training.engine.rollout import LLMAgent, Teacher

ctranslate2 = pytest.importorskip("ctranslate2")
from training.engine.ct2 import CTranslate2Backend, EngineUnavailable, export  # noqa: E402

GREEDY = SamplingConfig(temperature=0.0)


class _Stub:
    """A backend stand-in: writing a seat's stream needs the tokenizer only."""

    def __init__(self, tok):
        self.tokenizer, self.sampling = tok, GREEDY


def game_contexts(tok, game: str, n: int = 16) -> list[list[int]]:
    """The model seat's token stream before each of its replies in expert-played games (the rule expert
    writing through the model's own chat template): the ``n`` shortest, from several episodes."""
    from training.games.bargain.rollout import play_episodes
    from training.games.market.rollout import play_market_episodes
    agent = LLMAgent(_Stub(tok), "option_a")
    if game == "bargain":
        scenarios = get_split("builtin", "test")[:6]
        records = play_episodes([(s, 1_000_000 + i) for i, s in enumerate(scenarios)], Teacher("expert", agent),
                                ["neutral", "boulware", "conceder", "begging", "insulting", "unyielding"])
    else:
        records = play_market_episodes([(t, 1_000_000 + k) for t in TASKS for k in range(2)], Teacher("expert", agent))
    contexts = [t.prompt_ids for r in records for t in r.turns]
    assert len(contexts) >= n, (game, len(contexts))
    return sorted(contexts, key=len)[:n]


def _same_tokens(model, tok, contexts, new: int = 32) -> tuple[list, list]:
    stop = [tok.eos_token_id]
    ref = TransformersBackend(model, tok, GREEDY).generate_ids(contexts, new, stop)
    got = CTranslate2Backend(model, tok, GREEDY, "float32").generate_ids(contexts, new, stop)
    return [c.ids for c in ref], [c.ids for c in got]


@pytest.fixture(scope="module")
def tiny():
    from pathlib import Path

    from training.engine.models import load_model
    path = Path(__file__).resolve().parent.parent / "artifacts" / "checkpoints" / "grpo-tiny"
    return load_model(str(path), device="cpu", dtype="float32", merge=True)


@pytest.mark.parametrize("game", ["bargain", "market"])
def test_fp32_greedy_tokens_equal_transformers_on_the_tiny_model(tiny, game):
    model, tok = tiny
    ref, got = _same_tokens(model, tok, game_contexts(tok, game))
    assert got == ref
    assert any(len(r) > 4 for r in ref)  # real replies, not empty ones


@pytest.mark.slow
def test_fp32_greedy_tokens_equal_transformers_on_smollm2():
    """The shipped SmolLM2 buyer, adapter merged (one export), on 16 contexts of each game."""
    from training.engine.models import load_model
    model, tok = load_model("artifacts/checkpoints/grpo-smollm2", device="cpu", dtype="float32", merge=True)
    stop = [tok.eos_token_id]
    engine = CTranslate2Backend(model, tok, GREEDY, "float32")
    reference = TransformersBackend(model, tok, GREEDY)
    for game in ("bargain", "market"):
        contexts = game_contexts(tok, game)
        assert [c.ids for c in engine.generate_ids(contexts, 16, stop)] == \
            [c.ids for c in reference.generate_ids(contexts, 16, stop)], game


def test_the_measured_choice_is_the_fastest_engine_whose_tokens_are_exact(tmp_path):
    import json

    from training.engine.choice import measured_engine
    rows = [{"engine": "transformers fp32", "batch1_reply_s_median": 8.0, "batch32_tokens_per_s_median": 18.0},
            {"engine": "ctranslate2 float32 threads=2", "batch1_reply_s_median": 5.0,
             "batch32_tokens_per_s_median": 7.0},
            {"engine": "ctranslate2 int8 threads=2 chunks of 8", "batch1_reply_s_median": 3.5,
             "batch32_tokens_per_s_median": 20.0}]
    for r in rows:
        r.update(rows_compared=16, greedy_rows_equal_to_transformers_fp32=0 if "int8" in r["engine"] else 16)
    path = tmp_path / "engines.json"
    path.write_text(json.dumps({"results": {"engines": rows}}))
    one, many = measured_engine(1, path), measured_engine(32, path)
    assert (one["engine"], one["compute_type"], one["threads"]) == ("ctranslate2", "float32", 2)
    assert many["engine"] == "transformers"  # int8 is faster at 32 rows but writes other tokens
    assert measured_engine(1, tmp_path / "missing.json")["engine"] == "transformers"


def test_after_a_training_step_the_reexported_engine_writes_the_new_policys_tokens(tmp_path):
    import torch

    from training.engine.models import load_model
    model, tok = load_model("tiny", device="cpu", dtype="float32")
    contexts = game_contexts(tok, "bargain", 8)
    engine = CTranslate2Backend(model, tok, GREEDY, cache=tmp_path)
    before = [c.ids for c in engine.generate_ids(contexts, 16, [tok.eos_token_id])]
    assert not engine.refresh(), "unchanged weights: the same export"
    # one real optimizer step on a language-modelling loss
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    ids = torch.tensor([contexts[0][-64:]])
    model.train()
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    model.eval()
    old = engine.folder
    assert engine.refresh() and engine.folder != old
    after = [c.ids for c in engine.generate_ids(contexts, 16, [tok.eos_token_id])]
    reference = [c.ids for c in TransformersBackend(model, tok, GREEDY).generate_ids(contexts, 16, [tok.eos_token_id])]
    assert after == reference and after != before


def test_an_architecture_the_engine_cannot_convert_is_one_clear_error(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    from training.engine.models import load_model
    _, tok = load_model("tiny", device="cpu", dtype="float32")
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=len(tok)))
    model.config.__class__ = type("ToyConfig", (GPT2Config,), {})  # a config class no converter knows
    with pytest.raises(EngineUnavailable, match="cannot convert a ToyConfig"):
        export(model, tok, tmp_path)
