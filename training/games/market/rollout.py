"""Language-model labs in the GPU market: the batched rollout engine.

The model plays lab 0 through the same ``LLMAgent`` and ``Conversation`` as in the bilateral
game: a system prompt (the rules, every action as a JSON example, the task), then at each of
its moves one user turn rendering its own view (``MarketEnv.observe(0)``: its money, jobs and
blocks, the public market, the offers and coalitions that involve it, the events delivered to
it, and the result of its previous action), and its reply: one JSON action, handed to the
environment as written. A reply that is not an action is refused by the environment with a
reason code and the invalid-action penalty; the next user turn tells the model why.

``play_market_episodes`` runs many market episodes in lockstep: scripted labs act inline, every
pending lab-0 reply is generated in one batched call, finished episodes drop out. Each record
holds lab 0's token stream with the mask (1 exactly on the tokens the model generated), sampling
log-probs, the reward (lab 0's outcome over its total job value) and the finished environment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from env.market.env import MarketEnv, MarketStep
from env.market.evaluation import lab_actions, transcript
from env.market.moves import action_text
from env.market.play import MarketMatch, seat_rng
from env.market.players import MarketPlayer, make_policy
from env.market.prompts import LAB, assert_market_no_leak, market_system_prompt, market_user_message
from training.engine.rollout import (Conversation, EpisodeRecord, LLMAgent, Teacher, generate_replies, play_turns,
                                     token_fields)


@dataclass
class MarketRecord(EpisodeRecord):
    env: MarketEnv | None = None  # the finished environment (outcomes, offers, coalitions)
    actions: list | None = None  # lab 0's actions as handed to the environment (``replay_market`` replays them)


PolicySpec = LLMAgent | Teacher | str | Callable[[], MarketPlayer]


def _lab0(spec: PolicySpec) -> tuple[MarketPlayer | None, Conversation | None]:
    """Lab 0's seated player (scripted policy or a teacher's player) and, for a model or a teacher
    writing into one, its ``Conversation``."""
    if isinstance(spec, LLMAgent):
        return None, Conversation(spec, LAB, None)
    scripted = spec.player if isinstance(spec, Teacher) else spec
    player = make_policy(scripted) if isinstance(scripted, str) else scripted()
    return (None, Conversation(spec.agent, LAB, None, teacher=player)) if isinstance(spec, Teacher) else (player, None)


def play_market_episodes(episodes: Sequence[tuple[str, int]], policy: PolicySpec | list[PolicySpec],
                         counterparts: str | None = None, name: str = "model",
                         on_done: Callable[[int], None] | None = None) -> list[MarketRecord]:
    """Play ``(task, seed)`` market episodes in lockstep with ``policy`` in lab 0 (an ``LLMAgent``, a
    ``Teacher``, or a scripted policy by name or factory; one for all or one per episode) and the
    world's archetypes (or ``counterparts``) in the other labs. One record per episode, in order."""
    n = len(episodes)
    policies = policy if isinstance(policy, list) else [policy] * n
    if len(policies) != n:
        raise ValueError("a per-episode policy list must have one entry per episode")
    lab0 = [_lab0(p) for p in policies]
    matches = [MarketMatch(task, seed, player, counterparts) for (task, seed), (player, _) in zip(episodes, lab0)]
    seats = [conv if conv is not None else player for player, conv in lab0]
    for match, seat in zip(matches, seats):
        if isinstance(seat, Conversation) and seat.teacher is not None:  # seeded like a seated lab 0
            seat.teacher.reset(match.env.observe(0), seat_rng(match.task, match.seed, 0))
    last: dict[int, MarketStep] = {}  # each episode's latest lab-0 step (what the next user turn reports)
    acted: list[list] = [[] for _ in range(n)]  # lab 0's actions handed to each episode's environment
    def turn(i: int) -> Conversation | str | None:
        """Scripted labs (and a scripted lab 0) act inline; then lab 0's seat reads what is new (a
        teacher writes its reply at once), or the episode is over."""
        match = matches[i]
        match.advance()
        if match.env.done:
            return None
        seat, env = seats[i], match.env
        obs = env.observe(0)
        push_lab_turn(seat, obs, last.get(i), env)
        if seat.teacher is not None:  # in option_b an empty think block first, as Qwen3 writes when not thinking
            think = "<think>\n\n</think>\n\n" if seat.agent.reasoning_mode == "option_b" else ""
            return seat.write(think + action_text(seat.teacher.act(obs)))
        return seat

    def answer(i: int, text: str) -> None:
        acted[i].append(text)
        last[i] = matches[i].step(text)

    play_turns({seat.agent for seat in seats if isinstance(seat, Conversation)}, n, turn, answer, on_done)
    return [_record(m.env, seat, ep, name, acts) for m, seat, ep, acts in zip(matches, seats, episodes, acted)]


def push_lab_turn(seat: Conversation, obs: dict, last: MarketStep | None, env: MarketEnv | None = None) -> None:
    """Lab 0's next user turn into its conversation (the system prompt first, on its first move): its
    view, and the result of its previous action. With ``env``, the text is checked to hold nothing of
    another lab's private state."""
    system = None if seat.messages else market_system_prompt(obs, seat.agent.reasoning_mode)
    user = market_user_message(obs, last)
    if env is not None:
        assert_market_no_leak((system or "") + user, env)
    # the market's text holds no intended control token; a lab's echoed words or ids could
    guard = seat.agent.guard
    seat.push([guard(user)], None if system is None else guard(system))


class LLMLab(MarketPlayer):
    """A model as a seated market lab (one episode at a time, e.g. in the Space): each move is one
    reply generated from the lab's own view, as in ``play_market_episodes``, handed to the
    environment as written. ``MarketMatch`` tells it the result of each of its actions (``after``)."""

    def __init__(self, agent: LLMAgent):
        self.agent, self.name = agent, agent.name
        self.conv: Conversation | None = None
        self.last: MarketStep | None = None

    def reset(self, obs, rng) -> None:
        super().reset(obs, rng)
        self.conv, self.last = Conversation(self.agent, LAB, None), None

    def after(self, step: MarketStep) -> None:
        self.last = step

    def act(self, obs) -> str:
        push_lab_turn(self.conv, obs, self.last)
        return generate_replies(self.agent, [self.conv])[0]


def _record(env: MarketEnv, seat, episode: tuple[str, int], name: str, actions: list) -> MarketRecord:
    out = env.outcome(0)
    own = lab_actions(env)
    metrics = {**out, "acts": own["acts"], "refused_by_code": own["refused"]}
    return MarketRecord(scenario_id=f"{episode[0]}/{episode[1]}", seed=episode[1], reward=out["reward"], metrics=metrics,
                        transcript=transcript(env, name), trained_role=LAB, **token_fields(seat), env=env,
                        actions=actions)
