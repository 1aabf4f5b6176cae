"""Shared fixtures: scenarios and a helper to play a fixed list of replies."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

# the Space's challenge leaderboard: never the user's own file (~/.cache/haggle) in tests
os.environ["HAGGLE_LEADERBOARD_DB"] = str(Path(tempfile.mkdtemp(prefix="haggle-board-")) / "leaderboard.sqlite")
os.environ.pop("HAGGLE_LEADERBOARD_REPO", None)
# the tiny buyer stays the tests' model seat (fast on a CPU) whichever shipped buyer the numbers seat by default;
# the tests of that choice and of a SmolLM2 seat set or clear this themselves
os.environ["HAGGLE_MODEL"] = str(Path(__file__).resolve().parent.parent / "artifacts" / "checkpoints" / "grpo-tiny")

from env.bargain.env import BargainEnv
from env.bargain.sources import Scenario, make_scenario


@pytest.fixture
def scenario() -> Scenario:
    # list $200, budget $160, cost $100: mutual interest, gap $60.
    return make_scenario("Test Kettle", "A kettle.", "home-kitchen", 200.0, 100.0, "test")


@pytest.fixture
def conflicting() -> Scenario:
    # list $100, budget $80, cost $90: no deal can pay the buyer.
    return make_scenario("Rare Lamp", "A lamp.", "home-kitchen", 100.0, 90.0, "test")


def reply(action: str, talk: str = "ok", thought: str = "hmm") -> str:
    return f"Thought: {thought}\nTalk: {talk}\nAction: {action}"


def run_replies(scenario: Scenario, replies: list[str], max_turns: int = 6):
    """Feed replies alternately (buyer first) until the episode ends; return (env, results)."""
    env = BargainEnv(max_turns)
    env.reset(0, {"scenario": scenario})
    results = []
    for r in replies:
        res = env.step(r)
        results.append(res)
        if res.done:
            break
    return env, results


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """The tiny offline model, built once per test session (tokenizer trained, model untrained)."""
    from training.engine.models import build_tiny
    path = tmp_path_factory.mktemp("tiny")
    build_tiny(path)
    return path


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory, tiny_dir):
    """A small LlamaForCausalLM (SmolLM2's architecture, random weights) with the tiny tokenizer and
    no Haggle lineage, so the training scripts treat it as a pretrained model and train LoRA on it."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tie_word_embeddings=True)
    path = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny(tiny_dir):
    from training.engine.models import load_model
    return load_model(str(tiny_dir), device="cpu")


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def space_url():
    """The Space, served in-process on a free loopback port for the whole test session."""
    import app
    demo = app.build()
    app.warm_up()  # as launch() does: the slow fixed views are built in the background
    demo.queue(default_concurrency_limit=None)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, mcp_server=True,
                css=app.CSS)
    yield f"http://127.0.0.1:{port}/"
    demo.close()
