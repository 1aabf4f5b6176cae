"""Haggle's Space: the bilateral negotiation environment, scripted games and evaluation results.

Wiring only: pure functions build each table and transcript; the UI connects them. Every
number shown comes from the environment itself or from a file in ``artifacts/``.

    python app.py            # serves on http://127.0.0.1:7860 (offline, CPU)
"""

from __future__ import annotations

import json
from pathlib import Path

import gradio as gr

from env.evaluation import format_table
from env.play import play_episode
from env.players import BUYERS, SELLERS, make_player
from env.protocol import format_price
from env.scenarios import get_split, load_scenarios, resolve_source

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
SOURCES = ("builtin", "amazon")


def available_sources() -> list[str]:
    return [s for s in SOURCES if s == "builtin" or resolve_source("auto") == "amazon"]


def scenario_stats() -> list[list]:
    """Rows: source, products, mutual, conflicting, categories, test products."""
    rows = []
    for source in available_sources():
        scenarios = load_scenarios(source)
        mutual = sum(s.mutual_interest for s in scenarios)
        rows.append([source, len(scenarios), mutual, len(scenarios) - mutual, len({s.category for s in scenarios}),
                     len(get_split(source, "test"))])
    return rows


def play(source: str, buyer: str, seller: str, product: int, seed: int, reasoning_mode: str):
    """Play one scripted episode on a test product; returns chat messages and a summary."""
    if buyer not in BUYERS or seller not in SELLERS:
        raise gr.Error(f"unknown player: buyer {buyer!r}, seller {seller!r}")
    if source not in available_sources():
        raise gr.Error(f"unknown or unavailable scenario source {source!r}")
    scenarios = get_split(source, "test")
    if product is None or seed is None or not 0 <= int(product) < len(scenarios) or int(seed) < 0:
        raise gr.Error(f"product must be 0..{len(scenarios) - 1} and seed must be non-negative")
    scenario = scenarios[int(product)]
    env = play_episode(scenario, make_player("buyer", buyer, reasoning_mode),
                       make_player("seller", seller, reasoning_mode), int(seed))
    messages = []
    for turn in env.log:
        role = "user" if turn["role"] == "buyer" else "assistant"
        if turn["thought"]:
            messages.append({"role": role, "content": turn["thought"],
                             "metadata": {"title": f"{turn['role']}'s private reasoning (never shown to the other side)"}})
        action = turn["action"].render() if turn["action"] else f"format error: {turn['error']}"
        messages.append({"role": role, "content": f"**{turn['role']}**: {turn['talk']}\n\n`{action}`"})
    m = env.metrics()
    summary = (f"**{scenario.title}** ({scenario.category}), list {format_price(scenario.list_price)}; "
               f"buyer budget {format_price(scenario.budget)}, seller cost {format_price(scenario.cost)} "
               f"({scenario.interest} interest).\n\nEnd: **{m.end_reason}**"
               + (f" at {format_price(m.price)}" if m.deal else "")
               + f". Buyer reward **{m.reward:+.3f}** = clip((budget − price) / |budget − cost|, −1, 1) for a deal; "
               "0 without one; −1 for a format error or going over budget.")
    return messages, summary


def eval_table() -> str:
    path = ARTIFACTS / "eval_scripted.json"
    if not path.exists():
        return "No evaluation artifact yet: run `python training/evaluate.py`."
    data = json.loads(path.read_text())
    prov = data["provenance"]
    return (f"From `{path.name}` — `{prov['command']}` at commit `{prov['commit'][:12]}` on {prov['date']} "
            f"({prov['config'].get('dataset')}, {prov['config'].get('split')} split):\n\n```\n"
            f"{format_table(data['rows'])}\n```")


def build() -> gr.Blocks:
    with gr.Blocks(title="Haggle") as demo:
        gr.Markdown("# Haggle\nLanguage models that learn to negotiate from verifiable rewards. "
                    "A buyer with a private budget bargains with a regulated seller who has a private cost.")
        gr.Dataframe(scenario_stats(), headers=["source", "products", "mutual", "conflicting", "categories", "test"],
                     label="Scenarios", interactive=False)
        with gr.Row():
            source = gr.Dropdown(available_sources(), value="builtin", label="Scenarios")
            buyer = gr.Dropdown(list(BUYERS), value="expert", label="Buyer")
            seller = gr.Dropdown(list(SELLERS), value="neutral", label="Seller")
            mode = gr.Dropdown(["option_a", "option_b"], value="option_a", label="Reasoning format")
            product = gr.Number(0, precision=0, label="Test product #")
            seed = gr.Number(0, precision=0, label="Seed")
        go = gr.Button("Play", variant="primary")
        chat = gr.Chatbot(label="Negotiation", height=480)
        summary = gr.Markdown()
        go.click(play, [source, buyer, seller, product, seed, mode], [chat, summary], api_name="play_scripted")
        gr.Markdown(eval_table())
    return demo


if __name__ == "__main__":
    build().launch()
