"""The Space's functions, each also a named API endpoint (``gradio_client``) and an MCP tool: live
bilateral and market games in their own sessions, whole games, evaluations, the artifacts.
Bad input is a ``gr.Error`` with the reason, never a crash."""

import functools
import inspect
import json

import gradio as gr

from env.bargain.env import DEFAULT_MAX_TURNS
from env.bargain.evaluation import EVAL_SEED_BASE, SEEDS_PER_PRODUCT, mix_rows, play_cell, summarize_row
from env.bargain.players import ALL_SELLERS, BUYERS, SELLERS, make_player
from env.bargain.protocol import REASONING_MODES
from env.bargain.rules import BUYER, SELLER
from env.bargain.sources import get_split
from env.market import ACTION_SCHEMA, POLICIES, make_policy, play_market
from env.market import TASKS as MARKET_TASKS
from env.market.actions import ACTION_DOCS
from env.market.evaluation import MARKET_EVAL_SEED_BASE
from env.market.evaluation import summarize as summarize_market
from space import figures as F
from space import market as M
from space.bargain import HUMAN, MODEL, BargainSessions, GameError, available_sources, check_seed, view
from space.challenge import NOTICE, ROLES, Challenges
from space.model import load_seat, model_label, model_roles
from space.sessions import client_of

GAMES = BargainSessions(model_loader=load_seat, model_roles=model_roles)
MARKETS = M.MarketSessions()
CHALLENGES = Challenges(GAMES)
MAX_EVAL_EPISODES = {"scripted": 14000, MODEL: 28}  # episodes in all (a mix plays every seller)
MAX_MARKET_EPISODES = 2000
SELLER_MIX = "mix"


def gradio_errors(fn):
    """Bad input becomes a ``gr.Error`` with the reason; the app keeps serving, and its log stays free of
    tracebacks for what was only a visitor's bad input (a hostile client once left 291 there)."""

    errors = (GameError, ValueError, TypeError, KeyError)
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def stream(*args, **kwargs):
            try:
                yield from fn(*args, **kwargs)
            except errors as exc:
                raise gr.Error(str(exc), print_exception=False) from None
        return stream

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except errors as exc:
            raise gr.Error(str(exc), print_exception=False) from None

    return wrapper


def product_arg(product):
    """API callers pass -1 (or nothing) for a product drawn from the seed."""
    if product is None or (isinstance(product, (int, float)) and not isinstance(product, bool) and product == -1):
        return None
    if isinstance(product, float) and product.is_integer():
        return int(product)
    return product


# ---------------------------------------------------------------------- API
@gradio_errors
def list_scenarios(source: str = "builtin", split: str = "test") -> list[dict]:
    """The scenarios of a source and split: index, title, category, list price and interest (mutual when
    the budget is above the cost). Budgets and costs are private to the players and are not listed.

    Args:
        source: 'builtin' (the catalog written for this project), or 'amazon' where its data is present.
        split: 'test' (held out from training, what games and evaluations use), 'train' or 'all'."""
    if source not in available_sources():
        raise GameError(f"unknown or unavailable source {source!r}; choose from {', '.join(available_sources())}")
    return [{"index": i, "id": s.id, "title": s.title, "category": s.category, "list_price": s.list_price,
             "interest": s.interest} for i, s in enumerate(get_split(source, split))]


@gradio_errors
def start_game(buyer: str = HUMAN, seller: str = "neutral", source: str = "builtin", product: int = -1,
               seed: int = 0, reasoning_mode: str = "option_a", request: gr.Request = None) -> dict:
    """Start a game in its own session on a held-out test product. Agents move until it is your turn.
    Returns the state with its session_id; while you play you see only your own side (your budget or
    your cost), and the whole game once it ends.

    Args:
        buyer: a scripted buyer (expert, always_accept, split_difference, lowballer, offer_budget, random_valid), 'model' (the trained checkpoint, a buyer) or 'human' (you move with send_reply).
        seller: a scripted seller persona (neutral, boulware, conceder, tit_for_tat, begging, insulting, unyielding, or liar, which lies about your budget) or 'human'; 'model' only when the checkpoint was trained as a seller.
        source: scenario source, 'builtin' or 'amazon' (where its data is present).
        product: index in the test split (see list_scenarios); -1 draws one from the seed.
        seed: the game's seed (a whole number from 0): the same seed replays the same game.
        reasoning_mode: 'option_a' (a Thought field) or 'option_b' (reasoning in <think> tags)."""
    return GAMES.start(client_of(request), source=source, buyer=buyer, seller=seller, product=product_arg(product),
                       seed=seed, reasoning_mode=reasoning_mode)


@gradio_errors
def send_reply(session_id: str, action: str, price: float = 0.0, talk: str = "") -> dict:
    """Your move in your game, then the agents' answers. Returns the new state.

    Args:
        session_id: the session_id start_game returned.
        action: 'offer' (at price), 'accept' (take the other side's standing offer), 'reject' or 'quit'.
        price: your offer in dollars (used only with action 'offer').
        talk: what you say to the other side (one line, at most 1,500 characters)."""
    return GAMES.reply(session_id, action, price if action == "offer" else None, talk)


@gradio_errors
def game_state(session_id: str) -> dict:
    """The current state of a game, as its player may see it (the whole game once it ends).

    Args:
        session_id: the session_id start_game returned."""
    return GAMES.state(session_id)


@gradio_errors
def play_episode(buyer: str = "expert", seller: str = "neutral", source: str = "builtin", product: int = -1,
                 seed: int = 0, reasoning_mode: str = "option_a") -> dict:
    """Play a whole game between two agents and return its transcript, both sides' private reasoning,
    the outcome and the reward explained. The same arguments replay the same game.

    Args:
        buyer: a scripted buyer (expert, always_accept, split_difference, lowballer, offer_budget, random_valid) or 'model' (the trained checkpoint, which plays greedily).
        seller: a scripted seller persona (neutral, boulware, conceder, tit_for_tat, begging, insulting, unyielding, or liar, which lies about your budget); 'model' only when the checkpoint was trained as a seller.
        source: scenario source, 'builtin' or 'amazon' (where its data is present).
        product: index in the test split (see list_scenarios); -1 draws one from the seed.
        seed: the game's seed (a whole number from 0).
        reasoning_mode: 'option_a' (a Thought field) or 'option_b' (reasoning in <think> tags)."""
    if HUMAN in (buyer, seller):
        raise GameError("play_episode is agents only; use start_game and send_reply to play yourself")
    return view(GAMES.new_game(source=source, buyer=buyer, seller=seller, product=product_arg(product), seed=seed,
                               reasoning_mode=reasoning_mode))


@gradio_errors
def evaluate_policy(buyer: str = "expert", seller: str = SELLER_MIX, episodes: int = 200, source: str = "builtin",
                    seed: int = EVAL_SEED_BASE, reasoning_mode: str = "option_a") -> dict:
    """Evaluate a buyer on the held-out test products, exactly as training/evaluate.py does, and return
    the evaluation artifact's row: mean reward, std, 95% CI, deal rate, bargained ratio, overshoot and
    format-error rates. Products are taken from the start of the test split, 4 seeds each (episode k
    of product i has seed seed + 4 * i + k), about `episodes` per seller rounded up to whole products.

    Args:
        buyer: a scripted buyer (expert, always_accept, split_difference, lowballer, offer_budget, random_valid) or 'model' (the trained checkpoint).
        seller: one seller persona (or 'liar', the adversarial probe outside the mix), or 'mix' for the seven of the mix pooled (the headline setting).
        episodes: episodes per seller: up to 2,000 for a scripted buyer against the mix, 4 for the model.
        source: scenario source, 'builtin' or 'amazon' (where its data is present).
        seed: the first evaluation seed (1,000,000 by default; training uses lower ones).
        reasoning_mode: 'option_a' (a Thought field) or 'option_b' (reasoning in <think> tags)."""
    seed = check_seed(seed)
    if buyer != MODEL and buyer not in BUYERS:
        raise GameError(f"unknown buyer {buyer!r}; choose from {', '.join([*BUYERS, MODEL])}")
    sellers = list(SELLERS) if seller == SELLER_MIX else [seller]
    if sellers[0] not in ALL_SELLERS:
        raise GameError(f"unknown seller {seller!r}; choose from {', '.join([*ALL_SELLERS, SELLER_MIX])}")
    if reasoning_mode not in REASONING_MODES:
        raise GameError(f"reasoning_mode must be one of {', '.join(REASONING_MODES)}")
    if source not in available_sources():
        raise GameError(f"unknown or unavailable source {source!r}; choose from {', '.join(available_sources())}")
    scenarios = get_split(source, "test")
    cap = MAX_EVAL_EPISODES[MODEL if buyer == MODEL else "scripted"]
    if isinstance(episodes, bool) or not isinstance(episodes, int) or not 1 <= episodes * len(sellers) <= cap:
        raise GameError(f"episodes must be a whole number from 1 to {cap // len(sellers)} per seller for this buyer "
                        f"(at most {cap} in all); got {episodes!r}")
    products = min(len(scenarios), -(-episodes // SEEDS_PER_PRODUCT))
    # players are reset at the start of every episode, so one of each serves a whole cell
    b = load_seat(BUYER, reasoning_mode) if buyer == MODEL else make_player(BUYER, buyer, reasoning_mode)
    name = model_label() if buyer == MODEL else buyer
    cells = {(name, s): play_cell(scenarios[:products], lambda: b, lambda s=s: make_player(SELLER, s, reasoning_mode),
                                  SEEDS_PER_PRODUCT, DEFAULT_MAX_TURNS, seed)[0] for s in sellers}
    row = (mix_rows(cells, "test", source)[0] if seller == SELLER_MIX
           else summarize_row(cells[(name, seller)], buyer=name, seller=seller, split="test", dataset=source))
    return {**row, "reasoning_mode": reasoning_mode, "products": products, "seeds_per_product": SEEDS_PER_PRODUCT,
            "seeds": f"{seed}..{seed + products * SEEDS_PER_PRODUCT - 1}"}


@gradio_errors
def read_artifact(name: str) -> dict:
    """One artifact by its path under artifacts/: JSON files come back parsed, JSONL as a list of
    records, anything else as its size.

    Args:
        name: the path under artifacts/, e.g. 'eval_results.json' or 'transcripts/eval_results.jsonl' (see list_artifacts)."""
    path = F.artifact_path(name)
    if not path.is_file():
        raise GameError(f"no artifact {name!r}; list_artifacts names them all")
    if path.suffix == ".json":
        return F.read_artifact(name)
    if path.suffix == ".jsonl":
        return {"records": F.transcripts(name)}
    return {"file": name, "bytes": path.stat().st_size}


def list_artifacts() -> list[dict]:
    """Every file in artifacts/ with its size and provenance (command, commit, date, machine). Takes no
    arguments."""
    return F.list_artifacts()


# ---------------------------------------------------------------------- API: can you out-haggle it?
@gradio_errors
def challenge_start(role: str = "buyer", product: int = -1, name: str = "", source: str = "builtin",
                    request: gr.Request = None) -> dict:
    """Can you out-haggle the trained model? Start a challenge game on a held-out test product. As the buyer you
    face a scripted seller persona, and your score is compared with the trained model's and the rule-based
    expert's on the same game; as the seller you face the trained model (a buyer). The game's seed is drawn by the
    server and shown when the game is over. When the game ends (through challenge_reply) the state carries a
    'challenge' object with the three scores, your place and the leaderboard. Only the game record is stored (no
    address or identity).

    Args:
        role: 'buyer' or 'seller': the seat you take.
        product: index in the test split (see list_scenarios); -1 draws one from the hidden seed.
        name: the name shown on the leaderboard (optional, at most 24 characters).
        source: scenario source, 'builtin' or 'amazon' (where its data is present)."""
    return CHALLENGES.start(role=role, source=source, product=product_arg(product), name=name,
                            owner=client_of(request))


@gradio_errors
def challenge_reply(session_id: str, action: str, price: float = 0.0, talk: str = "") -> dict:
    """Your move in a challenge game (as send_reply); once the game ends, the state carries the 'challenge' result.

    Args:
        session_id: the session_id challenge_start returned.
        action: 'offer' (at price), 'accept' (take the other side's standing offer), 'reject' or 'quit'.
        price: your offer in dollars (used only with action 'offer').
        talk: what you say to the other side (one line, at most 1,500 characters)."""
    return CHALLENGES.reply(session_id, action, price if action == "offer" else None, talk)


@gradio_errors
def leaderboard(role: str = "buyer", n: int = 10) -> dict:
    """The challenge leaderboard of one role: the best visitors' games (widest margin over the trained model on the
    same game first, then the highest reward), each with the
    trained model's and the reference player's reward on the same game, and how many games were played.

    Args:
        role: 'buyer' or 'seller'.
        n: how many games to list (1 to 100)."""
    if role not in ROLES:
        raise GameError(f"role must be {' or '.join(ROLES)}; got {role!r}")
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 100:
        raise GameError(f"n must be a whole number from 1 to 100; got {n!r}")
    board = CHALLENGES.board
    return {"role": role, "games": board.count(role), "top": board.top(role, n), "notice": NOTICE}


# ---------------------------------------------------------------------- API: the GPU market
@gradio_errors
def market_start(task: str = "single_trade", policy: str = "human", seed: int = 0,
                 counterparts: str = M.WORLD, request: gr.Request = None) -> dict:
    """Start a GPU-market game in its own session. Returns the state with its session_id; while you play
    you see lab 0's view only. Rounds, job deadlines and block starts count from 1, as on the page.

    Args:
        task: 'single_trade', 'market_round' or 'coalition_market'.
        policy: who plays lab 0: 'expert' (the rule), a baseline policy, 'model' (the shipped trained lab) or 'human'.
        seed: the game's seed (a whole number from 0).
        counterparts: 'world' (the other labs' archetypes drawn from the seed) or one archetype for every other lab."""
    return MARKETS.start(client_of(request), task=task, policy=policy, seed=seed, counterparts=counterparts)


@gradio_errors
def market_act(session_id: str, action: str) -> dict:
    """Your action as lab 0 in your market game; the other labs then act until it is your turn again.
    Returns the new state.

    Args:
        session_id: the session_id market_start returned.
        action: one JSON object of the action schema (see market_schema), e.g. {"action": "buy_spot", "hours": 20}."""
    return MARKETS.act(session_id, action)


@gradio_errors
def market_state(session_id: str) -> dict:
    """The current state of a market game, as its player may see it.

    Args:
        session_id: the session_id market_start returned."""
    return MARKETS.state(session_id)


@gradio_errors
def market_play(task: str = "coalition_market", policy: str = "expert", seed: int = 0,
                counterparts: str = M.WORLD) -> dict:
    """Play a whole market game with a scripted policy (or the trained lab) in lab 0 and return every
    round's actions, the shocks, the judged pitches with the judge's reasons,
    the coalitions and every lab's reward terms. Rounds, deadlines and block starts count from 1, as on the page.

    Args:
        task: 'single_trade', 'market_round' or 'coalition_market'.
        policy: the policy in lab 0: the rule 'expert', a baseline, or 'model' (the trained lab, where one is shipped).
        seed: the game's seed (a whole number from 0).
        counterparts: 'world' (archetypes drawn from the seed) or one archetype for every other lab."""
    if policy == M.HUMAN:
        raise GameError("market_play is agents only; use market_start and market_act to play yourself")
    return M.view(MARKETS.new_game(task=task, policy=policy, seed=seed, counterparts=counterparts))


@gradio_errors
def market_evaluate(policy: str = "expert", task: str = "single_trade", episodes: int = 200,
                    seed: int = MARKET_EVAL_SEED_BASE, counterparts: str = M.WORLD) -> dict:
    """Evaluate a scripted policy in lab 0 over games of one task with seeds seed, seed + 1, ...: the
    market evaluation artifact's row (mean reward, std, 95% CI, deals, job completion, coalitions,
    pitches, behaviour under shocks).

    Args:
        policy: the scripted policy in lab 0 (the rule 'expert' or a baseline).
        task: 'single_trade', 'market_round' or 'coalition_market'.
        episodes: games to play (at most 2,000).
        seed: the first seed (1,000,000 by default; held out from training).
        counterparts: 'world' (archetypes drawn from the seed) or one archetype for every other lab."""
    seed = check_seed(seed)
    M.check_choice(policy, POLICIES, "policy")
    M.check_choice(task, MARKET_TASKS, "task")
    M.check_choice(counterparts, M.COUNTERPARTS, "counterparts")
    if isinstance(episodes, bool) or not isinstance(episodes, int) or not 1 <= episodes <= MAX_MARKET_EPISODES:
        raise GameError(f"episodes must be a whole number from 1 to {MAX_MARKET_EPISODES}; got {episodes!r}")
    other = None if counterparts == M.WORLD else counterparts
    envs = [play_market(task, seed + k, make_policy(policy), counterparts=other) for k in range(episodes)]
    return {**summarize_market(task, policy, envs), "seeds": f"{seed}..{seed + episodes - 1}",
            "counterparts": counterparts}


def market_schema() -> dict:
    """The market's action language (the JSON schema and what each action does), the reward terms and
    the tasks. Takes no arguments."""
    return {"schema": ACTION_SCHEMA, "actions": ACTION_DOCS, "reward_terms": M.REWARD_TEXT,
            "tasks": {name: M.task_line(name) for name in MARKET_TASKS}}


QUEUED = (evaluate_policy, market_evaluate)  # long runs wait in the queue; game moves answer directly
API = (list_scenarios, start_game, send_reply, game_state, play_episode, evaluate_policy, challenge_start,
       challenge_reply, leaderboard, market_start, market_act, market_state, market_play, market_evaluate,
       market_schema, read_artifact, list_artifacts)


def mcp_results_as_json() -> None:
    """MCP tools answer in JSON, not Python's repr: Gradio's MCP server writes a non-file output with
    ``str()``, so dicts and lists would come back with single quotes and ``None``. Wraps its output
    step once to serialise them first (files and images keep Gradio's own handling)."""
    from gradio import mcp as gradio_mcp  # noqa: PLC0415

    server = gradio_mcp.GradioMCPServer
    if getattr(server.postprocess_output_data, "haggle_json", False):
        return
    original = server.postprocess_output_data

    def postprocess_output_data(self, data, root_url):
        data = [json.dumps(d) if isinstance(d, (dict, list)) and not (isinstance(d, dict) and "path" in d
                                                                      and "meta" in d) else d for d in data]
        return original(self, data, root_url)
    postprocess_output_data.haggle_json = True
    server.postprocess_output_data = postprocess_output_data


