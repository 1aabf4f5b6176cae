"""The CPU inference engines (llama.cpp, CTranslate2) against the reference backend (transformers ``generate``):
the same greedy tokens on the games' real contexts, a re-export after a training step, the conversation's state
kept between turns, clear errors. Each engine's tests skip where its package is not installed."""

from __future__ import annotations

import pytest

from env.bargain.sources import get_split
from env.market import TASKS
from training.engine.backends import SamplingConfig, TransformersBackend
from training.engine.rollout import LLMAgent, Teacher

GREEDY = SamplingConfig(temperature=0.0)
ENGINES = ("llamacpp", "ctranslate2")


def make_engine(name: str, model, tok, cache=None, sampling=GREEDY):
    """The engine's backend (fp32), skipping the test where the engine is not installed."""
    if name == "llamacpp":
        pytest.importorskip("llama_cpp")
        from training.engine.llamacpp import LlamaCppBackend
        return LlamaCppBackend(model, tok, sampling, "float32", cache=cache)
    pytest.importorskip("ctranslate2")
    from training.engine.ct2 import CTranslate2Backend
    return CTranslate2Backend(model, tok, sampling, "float32", cache=cache)


def export_of(engine) -> object:
    return engine.path if engine.kind == "llamacpp" else engine.folder


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


def _same_tokens(engine, model, tok, contexts, new: int = 32) -> tuple[list, list]:
    stop = [tok.eos_token_id]
    ref = TransformersBackend(model, tok, GREEDY).generate_ids(contexts, new, stop)
    got = make_engine(engine, model, tok).generate_ids(contexts, new, stop)
    return [c.ids for c in ref], [c.ids for c in got]


@pytest.fixture(scope="module")
def tiny():
    from pathlib import Path

    from training.engine.models import load_model
    path = Path(__file__).resolve().parent.parent / "artifacts" / "checkpoints" / "grpo-tiny"
    return load_model(str(path), device="cpu", dtype="float32", merge=True)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("game", ["bargain", "market"])
def test_fp32_greedy_tokens_equal_transformers_on_the_tiny_model(tiny, game, engine):
    model, tok = tiny
    ref, got = _same_tokens(engine, model, tok, game_contexts(tok, game))
    assert got == ref
    assert any(len(r) > 4 for r in ref)  # real replies, not empty ones


@pytest.mark.slow
@pytest.mark.parametrize("name", ENGINES)
def test_fp32_greedy_tokens_equal_transformers_on_smollm2(name):
    """The shipped SmolLM2 buyer, adapter merged (one export), on 16 contexts of each game."""
    from training.engine.models import load_model
    model, tok = load_model("artifacts/checkpoints/grpo-smollm2", device="cpu", dtype="float32", merge=True)
    stop = [tok.eos_token_id]
    engine = make_engine(name, model, tok)
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
    rows.append({"engine": "llamacpp float32 batched", "batch1_reply_s_median": 3.0,
                 "batch32_tokens_per_s_median": 40.0})  # equal on the rows measured, but not batch-invariant
    rows.append({"engine": "llamacpp bfloat16 batched", "batch1_reply_s_median": 2.0,
                 "batch32_tokens_per_s_median": 50.0, "batch_invariant": False})
    for r in rows:
        r.update(rows_compared=16, greedy_rows_equal_to_transformers_fp32=0 if "int8" in r["engine"] else 16)
    path = tmp_path / "engines.json"
    path.write_text(json.dumps({"results": {"engines": rows}}))
    one, many = measured_engine(1, path), measured_engine(32, path)
    assert (one["engine"], one["compute_type"], one["threads"]) == ("ctranslate2", "float32", 2)
    assert many["engine"] == "transformers"  # int8 is faster at 32 rows but writes other tokens
    assert measured_engine(1, tmp_path / "missing.json")["engine"] == "transformers"


@pytest.mark.parametrize("name", ENGINES)
def test_after_a_training_step_the_reexported_engine_writes_the_new_policys_tokens(tmp_path, name):
    import torch

    from training.engine.models import load_model
    model, tok = load_model("tiny", device="cpu", dtype="float32")
    contexts = game_contexts(tok, "bargain", 8)
    engine = make_engine(name, model, tok, cache=tmp_path)
    before = [c.ids for c in engine.generate_ids(contexts, 16, [tok.eos_token_id])]
    assert not engine.refresh(), "unchanged weights: the same export"
    # one real optimizer step on a language-modelling loss
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    ids = torch.tensor([contexts[0][-64:]])
    model.train()
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    model.eval()
    old = export_of(engine)
    assert engine.refresh() and export_of(engine) != old
    after = [c.ids for c in engine.generate_ids(contexts, 16, [tok.eos_token_id])]
    reference = [c.ids for c in TransformersBackend(model, tok, GREEDY).generate_ids(contexts, 16, [tok.eos_token_id])]
    assert after == reference and after != before


def test_rl_rollouts_on_llamacpp_follow_the_lora_policy_step_by_step(tmp_path):
    """The RL rollout engine (training/rl/engine.py) samples from the trainer's LoRA policy as it is now: each sync
    exports the merged weights only when they changed (the last export deleted), each row writes the tokens
    transformers writes for the merged policy, and the trainer's own model keeps its adapter unmerged."""
    pytest.importorskip("llama_cpp")
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model

    from training.engine.models import load_model
    from training.rl.engine import LlamaCppPolicy, merged
    torch.manual_seed(0)  # the LoRA's random start (init_lora_weights=False): the same draw every run
    model, tok = load_model("tiny", device="cpu", dtype="float32")
    policy_model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    contexts = game_contexts(tok, "bargain", 4)
    stop = [tok.eos_token_id]

    def reference():
        return [c.ids for c in TransformersBackend(merged(policy_model), tok, GREEDY).generate_ids(contexts, 16, stop)]

    def sampled(policy):  # one row a call: llama.cpp's one-row kernels, exact in fp32
        return [policy.generate_ids([c], 16, stop)[0].ids for c in contexts]

    policy = LlamaCppPolicy(policy_model, tok, GREEDY, "float32", context=2048, cache=tmp_path)
    with pytest.raises(RuntimeError, match="sync"):
        policy.generate_ids(contexts[:1], 4, stop)
    probe = torch.tensor([contexts[0][-32:]])
    logits = policy_model(input_ids=probe).logits
    assert policy.sync(rows=4, step=0) and policy.engine.slots == 4
    first = policy.engine.path
    before = sampled(policy)
    assert before == reference()
    assert isinstance(policy_model, PeftModel) and torch.equal(policy_model(input_ids=probe).logits, logits)
    assert not policy.sync(rows=4, step=1) and policy.engine.path == first, "unchanged weights: no new export"
    optimizer = torch.optim.SGD([p for p in policy_model.parameters() if p.requires_grad], lr=0.5)
    ids = torch.tensor([contexts[0][-64:]])
    policy_model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    assert policy.sync(rows=4, step=2) and policy.engine.path != first and not first.exists()
    after = sampled(policy)
    assert after == reference() and after != before
    assert policy.exports == 2
    policy.close()
    assert not any(tmp_path.glob("*/*.gguf"))


def test_an_architecture_ctranslate2_cannot_convert_is_one_clear_error(tmp_path):
    pytest.importorskip("ctranslate2")
    from transformers import GPT2Config, GPT2LMHeadModel

    from training.engine.ct2 import EngineUnavailable, export
    from training.engine.models import load_model
    _, tok = load_model("tiny", device="cpu", dtype="float32")
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=len(tok)))
    model.config.__class__ = type("ToyConfig", (GPT2Config,), {})  # a config class no converter knows
    with pytest.raises(EngineUnavailable, match="cannot convert a ToyConfig"):
        export(model, tok, tmp_path)


def test_an_architecture_llamacpp_cannot_convert_is_one_clear_error(tmp_path):
    pytest.importorskip("llama_cpp")
    from transformers import GPT2Config, GPT2LMHeadModel

    from training.engine.export import EngineUnavailable
    from training.engine.llamacpp import export
    from training.engine.models import load_model
    _, tok = load_model("tiny", device="cpu", dtype="float32")
    toy = type("ToyForCausalLM", (GPT2LMHeadModel,), {})  # an architecture llama.cpp's converter does not know
    model = toy(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=len(tok)))
    with pytest.raises(EngineUnavailable, match="cannot export this GPT2Config model .*ToyForCausalLM"):
        export(model, tok, cache=tmp_path)
    assert not list(tmp_path.glob("*/*.gguf"))  # nothing half-written is left to be taken for an export


def test_a_missing_engine_is_one_clear_line(monkeypatch):
    import builtins

    from training.engine.export import EngineUnavailable
    from training.engine.llamacpp import _llama_cpp
    real = builtins.__import__
    monkeypatch.setattr(builtins, "__import__",
                        lambda name, *a, **kw: (_ for _ in ()).throw(ImportError(name)) if name == "llama_cpp"
                        else real(name, *a, **kw))
    with pytest.raises(EngineUnavailable, match="pip install llama-cpp-python==.*transformers backend works"):
        _llama_cpp()


def test_the_next_turn_feeds_only_its_new_tokens_and_writes_the_same_reply(tiny):
    """The engine keeps each reply's KV state: a game's next turn (context, reply, opponent's message) feeds only
    what is new, also after other visitors' games came in between, and writes transformers' tokens."""
    pytest.importorskip("llama_cpp")
    model, tok = tiny
    engine, reference = make_engine("llamacpp", model, tok), TransformersBackend(model, tok, GREEDY)
    stop = [tok.eos_token_id]
    first, other = game_contexts(tok, "bargain", 2)
    reply = engine.generate_ids([first], 48, stop)[0]
    engine.generate_ids([other], 16, stop)  # another game in between
    message = tok("<|im_start|>user\nseller: no lower than that<|im_end|>\n<|im_start|>assistant\n",
                  add_special_tokens=False)["input_ids"]
    following = first + reply.ids + message
    fed = engine.prefilled
    got = engine.generate_ids([following], 32, stop)[0].ids
    assert engine.prefilled - fed == len(following) - len(first) - len(reply.ids) + 1  # its last token: never fed
    assert got == reference.generate_ids([following], 32, stop)[0].ids


def test_sampling_is_seeded_and_stays_in_the_vocabulary(tiny):
    pytest.importorskip("llama_cpp")
    model, tok = tiny
    hot = SamplingConfig(temperature=1.0, top_p=0.9, top_k=50, seed=3)
    contexts = game_contexts(tok, "bargain", 3)
    a = make_engine("llamacpp", model, tok, sampling=hot).generate_ids(contexts, 24, [tok.eos_token_id])
    b = make_engine("llamacpp", model, tok, sampling=hot).generate_ids(contexts, 24, [tok.eos_token_id])
    assert [c.ids for c in a] == [c.ids for c in b]
    assert all(0 <= t < len(tok) for c in a for t in c.ids)


def test_batched_rows_are_written_together_and_each_keeps_its_conversation(tiny):
    """``batched``: several conversations decoded together; each next turn feeds only what is new, whatever order
    the rows come in, and a repeat of the same call writes the same tokens."""
    pytest.importorskip("llama_cpp")
    from training.engine.llamacpp import LlamaCppBackend
    model, tok = tiny
    stop = [tok.eos_token_id]
    contexts = game_contexts(tok, "bargain", 6)
    engine = LlamaCppBackend(model, tok, GREEDY, "float32", slots=8, batched=True)
    replies = engine.generate_ids(contexts, 24, stop)
    message = tok("<|im_start|>user\nseller: fine<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    following = [c + r.ids + message["input_ids"] for c, r in zip(contexts, replies)][::-1]  # another row order
    fed = engine.prefilled
    again = engine.generate_ids(following, 24, stop)
    assert engine.prefilled - fed == sum(len(message["input_ids"]) + 1 for _ in following)
    fresh = LlamaCppBackend(model, tok, GREEDY, "float32", slots=8, batched=True)
    assert [c.ids for c in fresh.generate_ids(contexts, 24, stop)] == [r.ids for r in replies]
    assert all(len(c.ids) for c in again)


def test_a_checkpoint_exported_once_opens_from_its_export_without_loading_it(tmp_path, monkeypatch):
    """checkpoint_backend (the Space's seat): the first open of a checkpoint loads it, exports it and records the
    export under a key of its files; the next open finds that export and never loads the weights into transformers,
    and writes the same greedy tokens. A changed weights file is another key: loaded and exported again."""
    pytest.importorskip("llama_cpp")
    import shutil
    from pathlib import Path

    from training.engine import choice, llamacpp, models
    src = Path(__file__).resolve().parent.parent / "artifacts" / "checkpoints" / "grpo-tiny"
    ckpt = tmp_path / "ckpt"
    shutil.copytree(src, ckpt)
    monkeypatch.setattr(llamacpp, "CACHE", tmp_path / "gguf")
    loads = []
    real_load = models.load_model
    monkeypatch.setattr(models, "load_model", lambda *a, **k: loads.append(a[0]) or real_load(*a, **k))
    first = choice.checkpoint_backend(str(ckpt), GREEDY, engine="llamacpp")
    assert loads == [str(ckpt)] and first.model is not None
    contexts = game_contexts(first.tokenizer, "bargain", 4)
    stop = [first.tokenizer.eos_token_id]
    want = [c.ids for c in first.generate_ids(contexts, 16, stop)]
    again = choice.checkpoint_backend(str(ckpt), GREEDY, engine="llamacpp")
    assert loads == [str(ckpt)], "opened from the recorded export"
    assert again.model is None and again.path == first.path
    assert [c.ids for c in again.generate_ids(contexts, 16, stop)] == want
    with pytest.raises(ValueError, match="no weights to re-export"):
        again.refresh()
    weights = ckpt / "model.safetensors"
    from safetensors.torch import load_file, save_file
    tensors = load_file(weights)
    name = sorted(tensors)[0]
    tensors[name] = tensors[name] + 1.0
    save_file(tensors, weights)
    changed = choice.checkpoint_backend(str(ckpt), GREEDY, engine="llamacpp")
    assert loads == [str(ckpt)] * 2 and changed.path != first.path


def test_an_adapter_in_bf16_keeps_its_weights_to_bf16_precision_and_its_other_files(tmp_path):
    """The lent machine's return path: the weights halve in size, round only as far as bf16, and the folder form
    carries the config beside them (the file form is the weights alone)."""
    import json

    import torch
    from safetensors.torch import load_file, save_file

    from training.engine.export import adapter_to_bf16

    src = tmp_path / "adapter"
    src.mkdir()
    weights = {"a.lora_A.weight": torch.randn(8, 64), "a.lora_B.weight": torch.randn(64, 8) * 1e-3}
    save_file(weights, src / "adapter_model.safetensors")
    (src / "adapter_config.json").write_text(json.dumps({"r": 8}))
    adapter_to_bf16(src, tmp_path / "folder")
    adapter_to_bf16(src, tmp_path / "alone.safetensors")
    assert json.loads((tmp_path / "folder" / "adapter_config.json").read_text()) == {"r": 8}
    for out in (load_file(tmp_path / "folder" / "adapter_model.safetensors"), load_file(tmp_path / "alone.safetensors")):
        assert out.keys() == weights.keys()
        for name, t in out.items():
            assert t.dtype == torch.bfloat16
            assert torch.allclose(t.float(), weights[name], rtol=1e-2, atol=0)
            assert not torch.equal(t.float(), weights[name])  # rounded, not copied
    assert (tmp_path / "alone.safetensors").stat().st_size < 0.6 * (src / "adapter_model.safetensors").stat().st_size
