"""The Space's page: one function per tab, the helpers that turn a game's state or an artifact into
what a tab shows, and ``build`` (the page, with every API function as a named endpoint)."""

import functools
import html
import json
import random
import re
import time
from pathlib import Path

import gradio as gr

from env.bargain.players import ALL_SELLERS, BUYERS
from env.bargain.protocol import REASONING_MODES
from env.bargain.rules import BUYER, SELLER
from env.bargain.sources import get_split, load_scenarios
from env.market import ACTION_SCHEMA
from env.market import TASKS as MARKET_TASKS
from space import figures as F
from space import market as M
from space import story
from space.api import API, CHALLENGES, GAMES, MARKETS, QUEUED, SELLER_MIX, gradio_errors, product_arg
from space.bargain import (HUMAN, HUMAN_ACTIONS, MODEL, GameError, MoveRefused, agent_replies,
                           available_sources, choices, page_messages, view)
from space.card import card_facts, model_card
from space.challenge import NOTICE, REFERENCE
from space.model import ENV_VAR, market_model_path, model_label, model_path, model_roles
from space.sessions import client_of

PACE_S = 0.15  # pause between agents' replies in the page, so a game can be watched turn by turn


# ---------------------------------------------------------------------- UI helpers
def scenario_stats() -> list[list]:
    """Rows: source, products, mutual, conflicting, categories, test products."""
    rows = []
    for source in available_sources():
        scenarios = load_scenarios(source)
        mutual = sum(s.mutual_interest for s in scenarios)
        rows.append([source, len(scenarios), mutual, len(scenarios) - mutual, len({s.category for s in scenarios}),
                     len(get_split(source, "test"))])
    return rows


def product_choices(source: str) -> list[tuple[str, int]]:
    return [("drawn from the seed", -1)] + [(f"#{i} {s.title} ({s.category}, ${s.list_price:,.2f})", i)
                                            for i, s in enumerate(get_split(source, "test"))]


def _market(folder: Path) -> bool:
    """A market lab's checkpoint (its card names a market policy row)."""
    return bool(card_facts(folder).get("eval_policy"))


def models_overview() -> str:
    """A card for the model in the model seat and for every other shipped checkpoint."""
    seat = Path(model_path())
    cards = [model_card(seat, "In the model seat") if seat.is_dir() else
             f"**In the model seat: `{seat}`** (from ${ENV_VAR}; no local folder to describe)."]
    shipped = sorted(p for p in (F.ARTIFACTS / "checkpoints").iterdir() if p.is_dir()) \
        if (F.ARTIFACTS / "checkpoints").is_dir() else []
    cards += [model_card(p, f"Also shipped ({'the market tab trained lab 0, HAGGLE_MARKET_MODEL' if _market(p) else 'HAGGLE_MODEL'}"
                            f"={p.relative_to(F.ARTIFACTS.parent)})") for p in shipped if p.resolve() != seat.resolve()]
    return "\n\n".join(cards)


def players_table() -> list[list]:
    rows = [["buyer", n, (c.__doc__ or "").strip().splitlines()[0]] for n, c in BUYERS.items()]
    rows += [["seller", n, (c.__doc__ or "").strip().splitlines()[0]] for n, c in ALL_SELLERS.items()]
    rows.append([" and ".join(model_roles()), MODEL, f"the trained checkpoint ({model_label()}; ${ENV_VAR} for "
                                                     "another), seated only in the roles it was trained for"])
    rows.append(["either", HUMAN, "you, typing offers in the Play tab"])
    return rows


def _game_outputs(state: dict):
    """State -> (chat, scenario card, outcome, controls visible)."""
    you = state.get("you")
    secret = ""
    if "budget" in state and "cost" in state:
        secret = f" Budget ${state['budget']:,.2f}, cost ${state['cost']:,.2f} ({state['interest']} interest)."
    elif you:
        key = "budget" if you == BUYER else "cost"
        secret = f" **Your {key} (private): ${state[key]:,.2f}.**"
    card = (f"### {state['title']} ({state['category']})\n{state['description']}\n\nList price "
            f"${state['list_price']:,.2f}.{secret} Round {state['turn']} of {state['max_turns']}. "
            f"Buyer: **{state['buyer']}**, seller: **{state['seller']}**, "
            + (f"product #{state['product']}, " if "product" in state else "")
            + (f"seed {state['seed']}." if "seed" in state else "seed drawn for you, shown when the game is over."))
    if you and not state["done"]:
        offer = state.get("their_offer")
        card += f"\n\nYou are the **{you}**. " + (f"Their standing offer: ${offer:,.2f}." if offer else
                                                  "No offer from them yet.")
        if offer and you == BUYER and offer > state["budget"]:
            card += (f" **Careful: that ask is above your budget (${state['budget']:,.2f}). Accepting it ends the "
                     "game with reward −1 (going over budget); offer lower or walk away.**")
        elif offer and you == SELLER and offer < state["cost"]:
            card += (f" **Their offer is below your cost (${state['cost']:,.2f}): you cannot accept it (a regulated "
                     "seller never sells below cost).**")
    if MODEL in (state["buyer"], state["seller"]) and Path(model_path()).is_dir():
        card += ("\n\n<details><summary>What plays as <code>model</code></summary>\n\n"
                 + model_card(model_path(), "The model") + "\n\n</details>")
    outcome = state["outcome"]["explanation"] if state.get("outcome") else ""
    messages = state["messages"]
    if state.get("writing"):  # a model's reply while it is written (only what this viewer may see of it)
        w = state["writing"]
        messages = [*messages, {"role": "user" if w["role"] == BUYER else "assistant",
                                "content": f"**{w['role']}** (writing…): {w['text']}"}]
    messages = page_messages(messages)  # the players' words as text, never as markup
    return messages, card, outcome, gr.update(visible=bool(you) and not state["done"])


def seed_arg(seed):
    """The Play tab's seed: empty draws one at random; otherwise a whole number from 0 (typed as text)."""
    if seed is None or (isinstance(seed, str) and not seed.strip()):
        return random.randrange(10**6)
    if isinstance(seed, str):
        whole = re.fullmatch(r"\s*([0-9]{1,18})(?:\.0*)?\s*", seed)  # ASCII digits, "3.0" taken as 3
        if whole is None:
            raise GameError(f"the seed must be a whole number from 0, or empty for a random game; got {seed[:20]!r}")
        return int(whole.group(1))
    return int(seed) if isinstance(seed, float) and seed.is_integer() else seed


@gradio_errors
def ui_start(source, buyer, seller, mode, product, seed, old_session, request: gr.Request = None):
    """Start a game and show it reply by reply (agents' replies paced so a person can follow)."""
    if old_session:
        GAMES.end(old_session)
    seed = seed_arg(seed)
    game = GAMES.add(GAMES.new_game(source=source, buyer=buyer, seller=seller, product=product_arg(product),
                                    seed=seed, reasoning_mode=mode, advance=False), client_of(request))
    with game.lock:
        yield (game.id, *_game_outputs(view(game)))
        for state in agent_replies(game, previews=True):  # a model's reply shown while it is written
            if "writing" not in state:
                time.sleep(PACE_S)
            *outs, controls = _game_outputs(state)
            yield (game.id, *outs, controls if game.env.done or game.human == game.env.to_move else gr.skip())


def refused_as_warning(steps, outputs: int):
    """The states of a person's move; a move that cannot be played as given (``MoveRefused``) becomes a warning in
    the page and changes nothing shown (the person's words stay in the box to fix), instead of an error."""
    try:
        yield from steps
    except MoveRefused as exc:
        gr.Warning(str(exc))
        yield (gr.skip(),) * outputs


@gradio_errors
def ui_send(session, action, price, talk):
    if not session:
        raise GameError("start a game first")
    steps = GAMES.reply_steps(session, action, price if action == "offer" else None, talk, previews=True)
    for k, state in enumerate(refused_as_warning(steps, 5)):
        if isinstance(state, tuple):
            yield state
            return
        if k and "writing" not in state:
            time.sleep(PACE_S)
        *outs, controls = _game_outputs(state)
        # the controls change only when the person may move again or the game is over
        yield (*outs, controls if state["done"] or state["to_move"] == state["you"] else gr.skip(), "")


LEADERBOARD_HEADERS = ["place", "name", "margin over the model", "your reward", "model's", "reference's", "product",
                       "seed", "deal", "ended"]


def leaderboard_rows(role: str) -> list[list]:
    return [[k, r["name"] or "anonymous", f"{r['reward'] - r['model_reward']:+.3f}", f"{r['reward']:+.3f}",
             f"{r['model_reward']:+.3f}",
             f"{r['reference']} {r['reference_reward']:+.3f}", r["title"], r["seed"], "yes" if r["deal"] else "no",
             r["ended_at"][:16].replace("T", " ")] for k, r in enumerate(CHALLENGES.board.top(role), start=1)]


EMPTY_BOARD = "*No games on this leaderboard yet: finish a challenge to be the first.*"


def board_outputs(role: str):
    """The leaderboard for ``role``, or a line saying it is empty (never a bare header row)."""
    rows = leaderboard_rows(role)
    return (gr.update(value=rows, visible=bool(rows)), gr.update(value=narrow_rows(rows, BOARD_NARROW),
                                                                 visible=bool(rows)), gr.update(visible=not rows))


def challenge_result(state: dict) -> str:
    """The end of a challenge game in words: the three scores on the same game, and the visitor's place."""
    c = state.get("challenge")
    if not c:
        return ""
    you, model, ref = c["reward"], c["model_reward"], c["reference_reward"]
    if c["role"] == BUYER:
        verdict = "You out-haggled the model" if you > model else "The model did as well" if you == model else \
            "The model out-haggled you"
        lines = [f"**{verdict}.** On this very game (same product, seller and seed {c['seed']}): **you {you:+.3f}**, the "
                 f"trained model in your seat {model:+.3f}, the rule-based expert {ref:+.3f} (buyer reward)."]
    else:
        verdict = "You out-haggled the model" if you > model else "The model held its own" if you == model else \
            "The model out-haggled you"
        lines = [f"**{verdict}.** Your seller reward **{you:+.3f}** against the model buyer's {model:+.3f} in this "
                 "game (each side's share of the gap between budget and cost: the leaderboard's margin is yours minus "
                 f"the model's). Like for like: the {REFERENCE[SELLER]} scripted seller, selling to the same model on "
                 f"the same product and seed, got seller reward {ref:+.3f}"
                 + (f", so you did {'better' if you > ref else 'worse'} than it by {abs(you - ref):.3f}." if you != ref
                    else ", as you did.")]
    lines.append(f"Your game is #{c['place']} of {c['games']} {c['role']} games on the leaderboard.")
    return "\n\n".join(lines)


def _challenge_outputs(state: dict):
    chat, card, outcome, controls = _game_outputs(state)
    done = state["done"]
    return (chat, card, outcome, controls, challenge_result(state),
            leaderboard_rows(state["challenge"]["role"]) if done and state.get("challenge") else gr.skip())


@gradio_errors
def ui_challenge_start(role, name, product, old_session, request: gr.Request = None):
    if old_session:
        GAMES.end(old_session)
    state = CHALLENGES.start(role=role, product=product_arg(product), name=name or "",  # the seed: drawn, unseen
                             owner=client_of(request))
    return (state["session_id"], *_challenge_outputs(state))


@gradio_errors
def ui_challenge_send(session, action, price, talk):
    if not session:
        raise GameError("start a challenge first")
    steps = CHALLENGES.reply_steps(session, action, price if action == "offer" else None, talk, previews=True)
    for state in refused_as_warning(steps, 7):
        yield state if isinstance(state, tuple) else (*_challenge_outputs(state), "")


def _market_outputs(state: dict, chart: bool = True, series: dict | None = None):
    """State -> (card, rounds, outcome, per-round chart, person's controls visible). The chart is
    drawn once the game is over, from the holdings recorded as it played (``series``)."""
    outcome = state["outcome"]["explanation"] if state.get("outcome") else ""
    if not chart:
        plot = gr.skip()
    elif state["done"] and series:
        plot = gr.update(value=F.market_rounds_chart(series), visible=True)
    else:  # drawn once the game is over: no empty frame before
        plot = gr.update(value=None, visible=False)
    return M.card_markdown(state), M.rounds_markdown(state), outcome, plot, gr.update(visible=bool(state["you"])
                                                                                     and not state["done"])


@gradio_errors
def ui_market_start(task, policy, counterparts, seed, old_session, request: gr.Request = None):
    """Start a market game and show it round by round (paced so it can be followed)."""
    if old_session:
        MARKETS.end(old_session)
    seed = random.randrange(10**6) if seed is None else seed
    game = MARKETS.add(MARKETS.new_game(task=task, policy=policy, counterparts=counterparts, advance=False,
                                        seed=int(seed) if isinstance(seed, float) and seed.is_integer() else seed),
                       client_of(request))
    with game.lock:
        yield (game.id, *_market_outputs(M.view(game)))
        for _ in M.rounds(game):
            time.sleep(PACE_S)
            state = M.view(game)
            yield (game.id, *_market_outputs(state, chart=state["done"], series=game.series))


@gradio_errors
def ui_market_send(session, action):
    if not session:
        raise GameError("start a market game first")
    series = MARKETS.get(session).series
    for k, state in enumerate(MARKETS.act_steps(session, action)):
        if k:
            time.sleep(PACE_S)
        yield _market_outputs(state, series=series)


def ui_market_template(name: str) -> str:
    return json.dumps(M.TEMPLATES.get(name, {"action": "wait"}))


def ui_market_eval():
    return F.market_bars(), F.market_shocks(), F.market_table(), F.provenance_line(F.read_artifact(F.MARKET_EVAL),
                                                                                  F.MARKET_EVAL)


def before_after_file() -> str:
    """The before-vs-after artifact of the model seat's family (its card's ``before_after``: the SmolLM2 buyers'
    games when a SmolLM2 adapter is seated, the tiny model's stages otherwise)."""
    name = card_facts(model_path()).get("before_after") or F.BEFORE_AFTER
    return name if F.read_artifact(name) else F.BEFORE_AFTER


def before_after_buyers() -> list[str]:
    return (F.read_artifact(before_after_file()) or {}).get("buyers", [])


def ui_before_after(index):
    """Every buyer's game on the chosen held-out scenario, and the summary table."""
    name = before_after_file()
    games, buyers = F.before_after_games(name), before_after_buyers()
    if not games:
        outs = (*([[]] * len(buyers)), f"No `artifacts/{name}` yet: run `python training/before_after.py`.")
    else:
        g = games[min(int(index or 0), len(games) - 1)]
        outs = (*(F.transcript_messages(g["games"][b]) for b in buyers),
                F.before_after_product(g, name) + "\n\n" + F.before_after_summary(g, buyers, name))
    return outs if len(outs) > 1 else outs[0]  # one output component takes the value itself


def ui_eval(name: str, seller: str):
    rows = F.eval_table(name, seller)
    return (F.reward_bars(name, seller), F.heatmap(name), F.interest_bars(name), rows,
            F.provenance_line(F.read_artifact(name), name), narrow_rows(rows, EVAL_NARROW))


@functools.lru_cache(maxsize=2)
def sft_sample(mode: str = "option_a") -> list[tuple[str, str | None]]:
    """The first expert game exactly as ``training/sft.py`` hands it to TRL's SFTTrainer: the
    token stream, with the tokens that carry the loss (the buyer's) marked."""
    from space.sample import sft_sample as build  # noqa: PLC0415
    return build(mode)


def ui_artifact(name: str):
    if not name:
        return None, {}
    path = F.artifact_path(name)
    meta = F.read_artifact(name).get("provenance", {}) if path.suffix == ".json" else {"bytes": path.stat().st_size}
    return str(path), F.relative(meta)  # as displayed; the file (the download) keeps the full record


ENV_TEXT = """
**The game** (the RLVR negotiation paper's protocol). A buyer with a private budget *B* and a regulated seller with a
private cost *C* bargain over one product for at most 6 rounds; the buyer speaks first in each round. Each reply has a
private part (a `Thought:` line in *option_a*, a `<think>` block in *option_b*) that the opponent never sees, then
`Talk:` and exactly one `Action:`.

| action | who | meaning |
|---|---|---|
| `[BUY] $X` | buyer | offer $X (never above the budget) |
| `[SELL] $X` | seller | ask $X (the regulated seller can never go below cost: such moves are blocked and count as `[REJECT]`) |
| `[DEAL] $X` | either | accept the other side's standing offer $X |
| `[REJECT]` | either | refuse without a counter-offer |
| `[QUIT]` | either | walk away: no deal |

**Reward** (verifiable, from the outcome alone): a deal at price *P* pays the buyer `clip((B − P) / |B − C|, −1, 1)`
(|B − C| floored at $1); no deal pays 0; an unreadable reply, an illegal move or an offer above the budget pays −1 and
ends the game. *Mutual interest*: B ≥ C, a deal both can accept exists; *conflicting*: B < C, the right move is to walk
away.
"""


def api_example(url: str = "http://127.0.0.1:7860/") -> str:
    return f"""```python
from gradio_client import Client

client = Client("{url}")
state = client.predict(buyer="human", seller="boulware", product=-1, seed=7, api_name="/start_game")
sid = state["session_id"]
print(state["title"], "budget", state["budget"])
while not state["done"]:
    state = client.predict(session_id=sid, action="offer", price=round(state["budget"] * 0.7, 2),
                           talk="Would this work?", api_name="/send_reply")
print(state["outcome"]["explanation"])
print(client.predict(buyer="expert", seller="mix", episodes=100, api_name="/evaluate_policy")["reward_mean"])

# the GPU market: you play lab 0 with JSON actions (client.predict(api_name="/market_schema") lists them)
game = client.predict(task="market_round", policy="human", seed=3, api_name="/market_start")
game = client.predict(session_id=game["session_id"], action='{{"action": "buy_spot", "hours": 20}}',
                      api_name="/market_act")
print(game["your_steps"][-1]["detail"], "| money left:", game["observation"]["money"])
```"""


# ---------------------------------------------------------------------- layout
def _glance_tab() -> None:
    """The "At a glance" tab: did it learn? (a sentence and a chart), then the tables, folded."""
    gr.Markdown(story.sentence(model_path()), elem_id="story")
    with gr.Row(equal_height=True):
        gr.Plot(story.chart(model_path(), "builtin"), show_label=False, elem_id="story-chart")
        gr.Plot(story.chart(model_path(), "amazon"), show_label=False, elem_id="story-chart-amazon")
    gr.Markdown(story.details(model_path()) + " Buyer reward `clip((budget − price) / |budget − cost|, −1, 1)` for a deal, 0 without "
                "one, −1 for an unreadable reply or going over budget. Red: the model in the model seat; blue: the "
                "best scripted baseline. Scenarios are products with a list price; *mutual interest* means budget > "
                "cost.")
    with gr.Accordion("Headline results, the models and the players (tables)", open=False):
        gr.Markdown("### Headline results (held-out test split, whole seller mix)\n" + F.headline())
        gr.Dataframe(scenario_stats(), headers=["source", "products", "mutual interest",
                                                "conflicting interest", "categories", "test products"],
                     label="Scenarios (task: bilateral price negotiation)", interactive=False)
        gr.Markdown("### The models\n" + models_overview(), elem_id="model-cards")
        gr.Dataframe(players_table(), headers=["role", "name", "how it plays"], label="Players",
                     interactive=False, wrap=True, max_height=2000, column_widths=["15%", "20%", "65%"],
                     elem_id="players-table")


PLAY_HELP = ("**How to play.** Pick who plays each side: `human` is you, `model` the trained checkpoint, the other "
             "names scripted players (the Environment tab lists them). Press *Start game*. When it is your turn, "
             "choose an action (offer a price, accept their standing offer, reject, or walk away), type what you "
             "want to say if you like, and press *Send*. Your budget (as the buyer) or cost (as the seller) is "
             "private: the other side never sees it. Two agents can also play each other while you watch.")
REASONING_LABELS = {"option_a": "Thought: line (what the models learned)", "option_b": "<think> block"}
TALK_HINT = {BUYER: "e.g. That's more than I hoped to pay.", SELLER: "e.g. I can't go that low, it cost me more."}


def talk_hint(buyer: str, seller: str):
    """The talk box's example line, in the voice of the side the person plays."""
    return gr.update(placeholder=TALK_HINT[SELLER if seller == HUMAN and buyer != HUMAN else BUYER])


def _play_tab() -> None:
    """The "Play" tab."""
    gr.Markdown(PLAY_HELP, elem_id="play-help")
    session = gr.State("")
    with gr.Row():
        buyer = gr.Dropdown(choices(BUYER, model_roles()), value=HUMAN, label="Buyer", elem_id="play-buyer")
        seller = gr.Dropdown(choices(SELLER, model_roles()), value="neutral", label="Seller", elem_id="play-seller")
        mode = gr.Dropdown([(REASONING_LABELS.get(m, m), m) for m in REASONING_MODES], value="option_a",
                           label="How agents write their private reasoning", elem_id="play-mode",
                           info="Only agents reason in private; the trained models learned the Thought line.")
        source = gr.Dropdown(available_sources(), value="builtin", label="Scenarios")
        product = gr.Dropdown(product_choices("builtin"), value=-1, label="Held-out test product")
        seed = gr.Textbox("", label="Seed (empty: random)", elem_id="seed", placeholder="random",
                         info="A game replays exactly from its seed: the same product draw, the same scripted "
                              "moves and the same model replies (the model plays greedily).")
    start = gr.Button("Start game", variant="primary", elem_id="start-game")
    card = gr.Markdown(elem_id="game-card")
    chat = gr.Chatbot(label="Negotiation (private reasoning in the collapsible panels)", height=460,
                      elem_id="game-chat")
    with gr.Group(visible=False) as controls:
        with gr.Row():
            action = gr.Radio(list(HUMAN_ACTIONS), value="offer", label="Your action",
                              elem_id="human-action")
            price = gr.Number(None, label="Price ($)", elem_id="human-price")
        talk = gr.Textbox(label="What you say (optional)", placeholder=TALK_HINT[BUYER], elem_id="human-talk")
        send = gr.Button("Send", variant="primary", elem_id="human-send")
    outcome = gr.Markdown(elem_id="game-outcome")
    source.change(lambda src: gr.update(choices=product_choices(src), value=-1), source, product,
                  api_visibility="private")
    # the hint in the talk box speaks as the side the person plays
    for side in (buyer, seller):
        side.change(talk_hint, [buyer, seller], talk, api_visibility="private")
    start.click(ui_start, [source, buyer, seller, mode, product, seed, session],
                [session, chat, card, outcome, controls], api_visibility="private", show_progress="minimal")
    send.click(ui_send, [session, action, price, talk], [chat, card, outcome, controls, talk],
               api_visibility="private", show_progress="minimal")
    talk.submit(ui_send, [session, action, price, talk], [chat, card, outcome, controls, talk],
                api_visibility="private", show_progress="minimal")


def _challenge_tab(tab: gr.Tab) -> None:
    """The "Out-haggle it" tab: a visitor against the trained model, scored on the same game, with a leaderboard."""
    gr.Markdown("### Can you out-haggle it?\nPlay the **buyer** against a scripted seller on a product the model "
                "never trained on, then see what the trained model and the rule-based expert scored on the very same "
                "game. Or play the **seller** against the trained model itself. The game's seed is drawn for you and "
                "shown at the end; the leaderboard ranks by how far you beat the model on your game. The catalog is "
                "public, so this is a game, not a benchmark. " + NOTICE)
    session = gr.State("")
    with gr.Row():
        role = gr.Radio([BUYER, SELLER], value=BUYER, label="You play", elem_id="ch-role")
        name = gr.Textbox(label="Name on the leaderboard (optional)", max_length=24, elem_id="ch-name")
        product = gr.Dropdown(product_choices("builtin"), value=-1, label="Held-out test product")
    start = gr.Button("Start the challenge", variant="primary", elem_id="ch-start")
    card = gr.Markdown(elem_id="ch-card")
    chat = gr.Chatbot(label="Negotiation", height=380, elem_id="ch-chat")
    with gr.Group(visible=False) as controls:
        with gr.Row():
            action = gr.Radio(list(HUMAN_ACTIONS), value="offer", label="Your action", elem_id="ch-action")
            price = gr.Number(None, label="Price ($)", elem_id="ch-price")
        talk = gr.Textbox(label="What you say", elem_id="ch-talk")
        send = gr.Button("Send", variant="primary", elem_id="ch-send")
    outcome = gr.Markdown(elem_id="ch-outcome")
    result = gr.Markdown(elem_id="ch-result")
    board = gr.Dataframe(headers=LEADERBOARD_HEADERS, label="Leaderboard (widest margin over the model first)",
                         interactive=False, wrap=True, elem_id="ch-leaderboard", visible=False, elem_classes=["wide-only"],
                         column_widths=["7%", "15%", "10%", "9%", "9%", "12%", "18%", "7%", "6%", "7%"])
    small = gr.Dataframe(headers=["#", "name", "margin over the model", "your reward"], interactive=False, wrap=True,
                         column_widths=["10%", "40%", "26%", "24%"], elem_id="ch-leaderboard-narrow", visible=False,
                         elem_classes=["narrow-only"], label="Leaderboard (widest margin over the model first)")
    empty = gr.Markdown(EMPTY_BOARD, elem_id="ch-leaderboard-empty")
    boards = [board, small, empty]
    role.change(board_outputs, role, boards, api_visibility="private")
    tab.select(board_outputs, role, boards, api_visibility="private")  # the board is read when the tab opens
    outs = [chat, card, outcome, controls, result, board]
    start.click(ui_challenge_start, [role, name, product, session], [session, *outs], api_visibility="private",
                show_progress="minimal")
    send.click(ui_challenge_send, [session, action, price, talk], [*outs, talk], api_visibility="private",
               show_progress="minimal").then(board_outputs, role, boards, api_visibility="private")
    talk.submit(ui_challenge_send, [session, action, price, talk], [*outs, talk], api_visibility="private",
                show_progress="minimal").then(board_outputs, role, boards, api_visibility="private")


def _market_tab(demo: gr.Blocks) -> None:
    """The "GPU market" tab."""
    gr.Markdown("AI labs with private budgets and jobs trade scarce GPU capacity in rounds: offers, "
                "pitches scored by a judge, spot purchases, coalitions that buy a volume lot together, "
                "and market shocks. Lab 0 is played by the policy you choose (or by you); the other labs "
                "are scripted counterparts that only trade when it pays them.\n\n"
                + "\n".join(f"- `{n}`: {M.task_line(n)}" for n in MARKET_TASKS))
    m_session = gr.State("")
    with gr.Row():
        m_task = gr.Dropdown(list(MARKET_TASKS), value="coalition_market", label="Task", elem_id="market-task")
        m_policy = gr.Dropdown(M.policy_choices(), value="expert", label="Lab 0 (policy)",
                               elem_id="market-policy")
        m_counter = gr.Dropdown(list(M.COUNTERPARTS), value=M.WORLD, label="Other labs")
        m_seed = gr.Number(M.showcase_seed(), precision=0, minimum=0, label="Seed (empty: random)",
                           elem_id="market-seed", info="Default: the first seed whose expert game forms a "
                                                      "coalition and has a pitch judged.")
    m_start = gr.Button("Start market game", variant="primary", elem_id="market-start")
    m_card = gr.Markdown(elem_id="market-card")
    with gr.Group(visible=False) as m_controls:
        with gr.Row():
            m_template = gr.Dropdown(list(M.TEMPLATES), value="wait", label="Start from an example",
                                     elem_id="market-template")
            m_action = gr.Textbox(ui_market_template("wait"), lines=2, label="Your action (one JSON object "
                                  "of the schema below; ids from your view)", elem_id="market-action")
        m_send = gr.Button("Act", variant="primary", elem_id="market-send")
    m_rounds = gr.Markdown(elem_id="market-rounds")
    m_outcome = gr.Markdown(elem_id="market-outcome")
    m_chart = gr.Plot(label="money and GPU-hours per round", elem_id="market-chart", visible=False)
    with gr.Accordion("Reward terms and the action schema", open=False):
        gr.Markdown(M.REWARD_MD + "\n\n**Actions** (one JSON object per step; a reply that is not "
                    "one gets a reason code and the penalty):\n\n" + M.ACTIONS_TABLE)
        gr.JSON(ACTION_SCHEMA, label="ACTION_SCHEMA (env/market/actions.py)")
    gr.Markdown("### Evaluation (`artifacts/eval_market.json`, held-out seeds)")
    m_prov = gr.Markdown()
    gr.Markdown(NARROW_NOTE, elem_classes=["narrow-only"])
    m_bars = gr.Plot(label="reward per policy and task", elem_classes=["wide-only"])
    with gr.Accordion("Under shocks, and every row", open=False, elem_classes=["wide-only"]):
        m_shock = gr.Plot(label="under shocks")
        m_table = gr.Dataframe(headers=F.MARKET_COLUMNS, interactive=False, label="Rows", wrap=True,
                               max_height=100_000, elem_id="market-table")
    m_template.change(ui_market_template, m_template, m_action, api_visibility="private")
    m_start.click(ui_market_start, [m_task, m_policy, m_counter, m_seed, m_session],
                  [m_session, m_card, m_rounds, m_outcome, m_chart, m_controls], api_visibility="private",
                  show_progress="minimal")
    m_send.click(ui_market_send, [m_session, m_action], [m_card, m_rounds, m_outcome, m_chart, m_controls],
                 api_visibility="private", show_progress="minimal")
    demo.load(ui_market_eval, None, [m_bars, m_shock, m_table, m_prov], api_visibility="private")
    gr.Markdown("### The trained lab beside the scripted policies, on the same held-out seeds")
    lab = market_model_path()
    policy = card_facts(lab).get("eval_policy") if lab and Path(lab).is_dir() else None
    if policy:
        gr.Markdown(F.market_lab_sentence(policy), elem_id="market-lab-sentence")
    m_trained = gr.Plot(label="trained vs scripted, per task", elem_id="market-trained", elem_classes=["wide-only"])
    m_trained_table = gr.Dataframe(headers=F.MARKET_COLUMNS, interactive=False, label="Rows on the same seeds",
                                   wrap=True, max_height=100_000, elem_id="market-trained-table",
                                   elem_classes=["wide-only"])
    demo.load(lambda: (F.market_trained_bars(), F.market_trained_table()), None, [m_trained, m_trained_table],
              api_visibility="private")
    _market_before_after(demo)


def market_before_after_file() -> str | None:
    """The stored games of the market lab in the seat (its card's ``market_before_after``: the model labs' and the
    expert's games on the first held-out seeds of each task), or None when no market lab is shipped."""
    path = market_model_path()
    return card_facts(path).get("market_before_after") if path and Path(path).is_dir() else None


def _seed_choices(seeds: dict) -> list[tuple[str, int]]:
    out = []
    for seed, g in seeds.items():
        before, after = M.before_after_pair(g)
        change = g[after]["outcomes"][0]["reward"] - g[before]["outcomes"][0]["reward"]
        out.append((f"seed {seed} · {F.display_name(after)} − {F.display_name(before)}: {change:+.3f}", seed))
    return out


def ui_market_before_after(task: str, seed, slots: list[str]):
    """Every lab-0 policy's game on one held-out seed of ``task``: a summary table, then one column per policy."""
    name = market_before_after_file()
    games = M.side_by_side(name).get(task, {})
    g = games.get(int(seed)) if seed is not None and str(seed) != "" else None
    if not g:
        return ("No stored game for this task and seed.", *[""] * len(slots))
    rows = "\n".join(f"| {F.display_name(p)} | {t['outcomes'][0]['reward']:+.3f} | {t['outcomes'][0]['deals']} | "
                     f"{t['outcomes'][0]['jobs_completed']}/{t['outcomes'][0]['jobs']} | {t['outcomes'][0]['invalid']} |"
                     for p, t in g.items())
    summary = (f"**{task}, held-out seed {seed}**: lab 0's reward under each policy (greedy), the other labs the "
               f"world's scripted archetypes.\n\n| lab 0 | reward | deals | jobs done | refused actions |\n"
               f"|---|---|---|---|---|\n{rows}\n\nFrom `artifacts/{name}`.")
    return (summary, *[M.stored_game_markdown(g[p]) if p in g else f"*{F.display_name(p)} did not play this seed.*"
                      for p in slots])


def _market_before_after(demo: gr.Blocks) -> None:
    """Before vs after in the market: the untrained, SFT and RL labs and the expert on the same held-out seed."""
    gr.Markdown("### Before vs after: lab 0 on one held-out seed")
    name = market_before_after_file()
    games = M.side_by_side(name)
    if not games:
        gr.Markdown("No trained market lab's games are shipped yet: `python training/pipeline.py --env market --model "
                    "smollm2-135m --preset full` stores them (`--transcript_seeds`) and ships the adapter.")
        return
    gr.Markdown("The same task and seed (jobs, budgets, counterparts and shocks all drawn from the seed) played with "
                "each lab-0 policy in turn. " + M.BEFORE_AFTER_RULE)
    slots = list(dict.fromkeys(p for seeds in games.values() for g in seeds.values() for p in g))
    first = next(iter(games))
    with gr.Row():
        task = gr.Dropdown(list(games), value=first, label="Task", elem_id="market-ba-task")
        seed = gr.Dropdown(_seed_choices(games[first]), value=M.before_after_seed(games[first]),
                           label="Held-out seed", elem_id="market-ba-seed")
    summary = gr.Markdown(elem_id="market-ba-summary")
    with gr.Tabs(elem_id="market-ba-tabs"):  # one policy's game at a time, at the page's full width
        cols = []
        for k, policy in enumerate(slots):
            with gr.Tab(F.display_name(policy), id=f"market-ba-tab-{k}"):
                cols.append(gr.Markdown(elem_id=f"market-ba-{k}"))
    show = functools.partial(ui_market_before_after, slots=slots)

    def pick_task(t):
        seeds = M.side_by_side(market_before_after_file()).get(t, {})
        best = M.before_after_seed(seeds) if seeds else None
        return gr.update(choices=_seed_choices(seeds), value=best)
    # a new task may keep the same seed (a dropdown fires no change then): redraw after the seed list is set
    task.change(pick_task, task, seed, api_visibility="private").then(show, [task, seed], [summary, *cols],
                                                                      api_visibility="private")
    seed.change(show, [task, seed], [summary, *cols], api_visibility="private")
    demo.load(show, [task, seed], [summary, *cols], api_visibility="private")


def _evaluation_tab(demo: gr.Blocks) -> None:
    """The "Evaluation" tab."""
    evals = [n for n in F.EVAL_FILES if F.read_artifact(n)]
    with gr.Row():
        eval_file = gr.Dropdown(evals, value=evals[0] if evals else None, label="Artifact")
        eval_seller = gr.Dropdown([SELLER_MIX, *ALL_SELLERS], value=SELLER_MIX, label="Seller")
    eval_prov = gr.Markdown()
    bars = gr.Plot(label="reward per buyer", elem_id="eval-bars")
    gr.Markdown(NARROW_NOTE, elem_classes=["narrow-only"])
    heat = gr.Plot(label="buyer x seller", elem_id="eval-heat", elem_classes=["wide-only"])
    interest = gr.Plot(label="mutual vs conflicting interest", elem_id="eval-interest", elem_classes=["wide-only"])
    table = gr.Dataframe(headers=F.TABLE_COLUMNS, interactive=False, label="Rows", wrap=True, max_height=100_000,
                         column_widths=["19%", "5%", "7%", "7%", "12%", "6%", "7%", "8%", "9%", "10%", "10%"],
                         elem_id="eval-table", elem_classes=["wide-only"])
    small = narrow_table(None, F.TABLE_COLUMNS, EVAL_NARROW, ["40%", "17%", "28%", "15%"], "eval-table-narrow",
                         label="Rows (key columns)")
    outs = [bars, heat, interest, table, eval_prov, small]
    gen = F.read_artifact("eval_generalisation.json")
    if gen:
        gr.Markdown("### Generalisation (`artifacts/eval_generalisation.json`, greedy)\n\nThe trained buyers beside "
                    "the expert and the oracle ceiling where the study has a scripted floor: (a) the other product "
                    "source, (b) the seller persona no training stage saw, (c) the adversarial personas pooled, (d) a "
                    "frozen LLM seller (SmolLM2 taught the seller's side).\n\n" + F.provenance_line(gen, "eval_generalisation.json"))
        studies = F.generalisation_table()
        gr.Dataframe(studies, headers=F.GENERALISATION_COLUMNS, interactive=False, wrap=True,
                     max_height=100_000, column_widths=["34%", "14%", "10%", "7%", "7%", "12%", "6%", "5%", "5%"],
                     elem_id="generalisation-table", label="Rows", elem_classes=["wide-only"])
        narrow_table(studies, F.GENERALISATION_COLUMNS, (0, 1, 4, 5), ["38%", "24%", "15%", "23%"],
                     "generalisation-table-narrow", label="Rows (key columns)")
    for comp in (eval_file, eval_seller):
        comp.change(ui_eval, [eval_file, eval_seller], outs, api_visibility="private")
    demo.load(ui_eval, [eval_file, eval_seller], outs, api_visibility="private")


def _training_tab() -> None:
    """The "Training" tab."""
    gr.Markdown(NARROW_NOTE, elem_classes=["narrow-only"])
    gr.Plot(F.rl_reward_compact(), label="RL reward of the model seat", elem_id="training-compact",
            elem_classes=["narrow-only"])
    gr.Plot(F.dashboard(), label="SFT then RL, six panels", elem_id="training-dashboard", elem_classes=["wide-only"])
    gr.Plot(F.sft_loss(), label="SFT", elem_id="training-sft", elem_classes=["wide-only"])
    gr.Plot(F.rl_rewards(), label="RL reward", elem_id="training-rl", elem_classes=["wide-only"])
    gr.Plot(F.rl_phases(), label="behaviour per RL step", elem_id="training-phases", elem_classes=["wide-only"])
    stages = F.pipeline_table()
    gr.Dataframe(stages, headers=["stage", "wall time (s)", "command"], max_height=6000,
                 column_widths=["12%", "10%", "78%"], elem_id="pipeline-table", elem_classes=["wide-only"],
                 label="python training/pipeline.py: stages", interactive=False, wrap=True)
    narrow_table(stages, ["stage", "wall time (s)", "command"], (0, 2), ["26%", "74%"],
                 "pipeline-table-narrow", label="python training/pipeline.py: stages")
    gr.Markdown("\n\n".join(F.provenance_line(F.read_artifact(n), n) for n in
                            [*F.SFT_CURVES.values(), *F.RL_CURVES.values(), "pipeline.json"] if F.read_artifact(n)))


def _before_after_tab(demo: gr.Blocks) -> None:
    """The "Before vs after" tab: the same held-out games played by each stage of training."""
    games, buyers = F.before_after_games(before_after_file()), before_after_buyers()
    gr.Markdown("The same held-out games (scenario, seller and seed) played by the buyer after each stage of "
                "training, greedily: the untrained model, after SFT on expert games, after RL against the live "
                "environment. Most are mutual-interest games (a deal is possible); the one labelled conflicting has "
                "the budget below the cost, where walking away (reward 0) is the best any buyer can do. "
                + F.BEFORE_AFTER_RULE)
    first = F.before_after_default(games, buyers, card_facts(model_path())["eval_buyer"])
    pick = gr.Dropdown([(F.before_after_label(g), i) for i, g in enumerate(games)], value=first if games else None,
                       label="Held-out game", elem_id="ba-game")
    summary = gr.Markdown(elem_id="ba-summary")
    with gr.Row():
        chats = [gr.Chatbot(label=F.display_name(b), height=460, autoscroll=False, elem_id=f"ba-chat-{b}",
                            elem_classes=["read-only-chat"]) for b in buyers]
    pick.change(ui_before_after, pick, [*chats, summary], api_visibility="private")
    demo.load(ui_before_after, pick, [*chats, summary], api_visibility="private")


def _environment_tab(env_tab: gr.Tab) -> None:
    """The "Environment" tab."""
    gr.Markdown(ENV_TEXT)
    gr.Markdown("**One SFT training sample, exactly as the trainer saw it**: the first expert game of "
                "`training/sft.py` (train product 0, seed 0, neutral seller) as the token stream handed "
                "to TRL's `SFTTrainer`, with the tokens that carry the loss (the buyer's own) marked.")
    sample = gr.HighlightedText(label="token stream (loss on 'trained' spans only)",
                                color_map={"trained": "green"}, elem_id="sft-sample")
    env_tab.select(sft_sample, None, sample, api_visibility="private")


def _artifacts_tab() -> None:
    """The "Artifacts" tab."""
    # files a run produced (with a provenance record) first, so the file shown first is the table's first row
    rows = sorted(F.list_artifacts(), key=lambda r: not r["command"])
    first = rows[0]["file"] if rows else None
    gr.Markdown(f"Every file in `artifacts/` ({len(rows)}): pick one to see how it was made and download it.")
    pick = gr.Dropdown([r["file"] for r in rows], value=first, label="File", elem_id="artifact-pick")
    path, info = ui_artifact(first) if first else (None, None)
    download = gr.File(value=path, label="Download", elem_id="artifact-download")
    meta = gr.JSON(value=info, label="provenance", elem_id="artifact-provenance")
    pick.change(ui_artifact, pick, [download, meta], api_visibility="private")
    with gr.Accordion(f"All {len(rows)} files (size, commit, date, command)", open=False):
        gr.Dataframe([[r["file"], r["bytes"], (r["commit"] or "")[:12], r["date"], r["command"]] for r in rows],
                     headers=["file", "bytes", "commit", "date", "command"], interactive=False, wrap=True,
                     max_height=100_000, column_widths=["22%", "8%", "12%", "14%", "44%"], label="artifacts/",
                     elem_id="artifacts-table")


def api_entry(fn) -> str:
    """One endpoint for the API tab: its whole description, then each parameter's (Gradio's own
    docstring reading, the one its MCP tools use)."""
    description, params, _ = gr.utils.get_function_description(fn)
    inputs = {name for name, *_ in gr.utils.get_function_params(fn)}  # not Gradio's injected request
    lines = [f"- **`/{fn.__name__}`**: {html.escape(description, quote=False)}"]  # `<think>` is text, not a tag
    lines += [f"    - `{name}`: {html.escape(text, quote=False)}" for name, text in params.items() if name in inputs]
    return "\n".join(lines)


def _api_tab() -> None:
    """The "API" tab."""
    gr.Markdown("Every function below is a named endpoint (and an MCP tool, answering in JSON); game endpoints "
                "take and return a `session_id`, so API clients are isolated from each other and from the page."
                "\n\n" + "\n".join(api_entry(fn) for fn in API) + "\n\n" + api_example(), elem_id="api-docs")


NARROW = "600px"  # below this width (a phone) the page shows simpler views instead of squeezed ones

CSS = f"""
/* plotly's toolbar would sit over the charts' titles; its actions (zoom, save) are not needed to read them */
.js-plotly-plot .modebar-container {{ display: none !important; }}
/* transcripts are read-only: no trash button that would wipe one from the page */
.gradio-container button[aria-label="Clear"] {{ display: none !important; }}
.narrow-only {{ display: none !important; }}
@media (max-width: {NARROW}) {{
  .wide-only {{ display: none !important; }}
  .narrow-only {{ display: block !important; }}
}}
"""
def narrow_rows(rows: list[list], keep: tuple[int, ...]) -> list[list]:
    """The columns ``keep`` (0-based) of a table's rows: what a phone shows of it."""
    return [[r[k] for k in keep] for r in rows]


def narrow_table(rows, headers: list[str], keep: tuple[int, ...], widths: list[str], elem_id: str, **kw):
    """A phone's view of a table: its key columns at the full width (the whole table is shown on wider screens)."""
    return gr.Dataframe(narrow_rows(rows, keep) if rows is not None else None, headers=[headers[k] for k in keep],
                        interactive=False, wrap=True, max_height=100_000, column_widths=widths, elem_id=elem_id,
                        elem_classes=["narrow-only"], **kw)


EVAL_NARROW = (0, 3, 4, 6)  # buyer, reward, 95% CI, deal rate
BOARD_NARROW = (0, 1, 2, 3)  # place, name, margin, your reward
NARROW_NOTE = ("*On a narrow screen the many-panel charts are left out; open the page on a wider screen (or rotate the "
               "phone) to see them.*")


def build() -> gr.Blocks:
    """The whole page: one function per tab, and every API function as a named endpoint."""
    with gr.Blocks(title="Haggle") as demo:
        gr.Markdown("# Haggle\nLanguage models that learn to negotiate from verifiable rewards: a buyer with a "
                    "private budget bargains with a regulated seller who has a private cost.")
        with gr.Tabs(overflow_behavior="wrap"):  # every tab on screen at any width, none hidden in a menu
            with gr.Tab("At a glance", id="glance"):
                _glance_tab()
            with gr.Tab("Out-haggle it", id="challenge") as challenge_tab:
                _challenge_tab(challenge_tab)
            with gr.Tab("Play", id="play"):
                _play_tab()
            with gr.Tab("GPU market", id="market"):
                _market_tab(demo)
            with gr.Tab("Evaluation", id="evaluation"):
                _evaluation_tab(demo)
            with gr.Tab("Training", id="training"):
                _training_tab()
            with gr.Tab("Before vs after", id="before-after"):
                _before_after_tab(demo)
            with gr.Tab("Environment", id="environment") as env_tab:
                _environment_tab(env_tab)
            with gr.Tab("Artifacts", id="artifacts"):
                _artifacts_tab()
            with gr.Tab("API", id="api"):
                _api_tab()
        for fn in API:
            gr.api(fn, api_name=fn.__name__, concurrency_limit=None, queue=fn not in QUEUED)
    return demo


