"""The bilateral game's episodes played by model seats, in lockstep.

``play_episodes`` runs many negotiations at once through ``training.engine.rollout.play_turns``:
with one model agent, continuous batching (an episode whose reply is complete is stepped and asks for
its next reply while the others keep generating); otherwise in lockstep, one batched call per agent and
turn. Scripted players answer inline, finished episodes drop out. A model seat is a ``BargainSeat``: a
``Conversation`` that reads its own view of the negotiation (system prompt from the scenario and
its private value, the opponent's public messages as user turns), with every text a player or a
scenario file wrote guarded, and that can have a scripted teacher write its replies (expert data).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from env.bargain.env import DEFAULT_MAX_TURNS, BargainEnv, Observation
from env.bargain.play import Match
from env.bargain.players import make_player
from env.bargain.players.base import Player
from env.bargain.prompts import assert_no_leak, new_user_messages, system_prompt
from env.bargain.rules import BUYER, SELLER
from env.bargain.sources import Scenario
from training.engine.rollout import Conversation, EpisodeRecord, LLMAgent, Teacher, generate_replies, play_turns, \
    token_fields
from env.untrusted import TextGuard


@dataclass
class BargainSeat(Conversation):
    """One model seat in one negotiation."""

    def teach(self, obs: Observation) -> str:
        """Write the teacher's reply into the stream as if the model had generated it (mask 1; mask 0 in a
        demonstration's prefix, ``handover``, or a replayed one, ``untrained``). The teacher reads the model's guarded
        view: a title it quotes cannot put control tokens there."""
        replies = sum(m["role"] == "assistant" for m in self.messages)
        return self.write(self.teacher.act(guard_observation(obs, self.agent.guard)),
                          trained=self.handover is None and replies >= self.untrained)

    def observe(self, obs: Observation, opponent_thoughts: tuple[str, ...] = ()) -> None:
        """Take in what happened since this seat last spoke (the opponent's public messages), with
        every text a player or the scenario file wrote guarded (``env.untrusted``)."""
        obs = guard_observation(obs, self.agent.guard)
        first = not self.messages
        sys = None
        if first:
            sys = system_prompt(obs, self.agent.reasoning_mode)
            if self.scenario is not None:
                assert_no_leak(sys, self.scenario, self.role)
        new = new_user_messages(obs, self.seen)
        self.seen = len(obs.history)
        for text, talk in new:
            if self.scenario is not None:
                assert_no_leak(text.replace(talk, "") if talk else text, self.scenario, self.role,
                               opponent_thoughts, check_values=first and not obs.history)
        self.push([text for text, _ in new], sys)


PlayerSpec = LLMAgent | Teacher | str | Callable[[], Player]


def _seat(spec: PlayerSpec, role: str, scenario: Scenario, reasoning_mode: str = "option_a"):
    if isinstance(spec, LLMAgent):
        return BargainSeat(spec, role, scenario)
    if isinstance(spec, Teacher):  # the teacher writes in the format the model will be asked for
        teacher = _seat(spec.player, role, scenario, spec.agent.reasoning_mode)
        return BargainSeat(spec.agent, role, scenario, teacher=teacher, handover=spec.handover, untrained=spec.untrained)
    player = make_player(role, spec, reasoning_mode) if isinstance(spec, str) else spec()
    if player.role != role:
        raise ValueError(f"a {player.role} cannot play the {role}")
    return player


def play_episodes(episodes: Sequence[tuple[Scenario, int]], buyer: PlayerSpec | list[PlayerSpec],
                  seller: PlayerSpec | list[PlayerSpec],
                  max_turns: int = DEFAULT_MAX_TURNS, trained_role: str = BUYER,
                  on_done: Callable[[int], None] | None = None) -> list[EpisodeRecord]:
    """Play ``(scenario, seed)`` episodes in lockstep. Scripted players are given by name (or a
    factory); model players by an ``LLMAgent``; either side may be one spec for all episodes or a
    list with one per episode. Returns one record per episode, in order."""
    n = len(episodes)
    buyers = buyer if isinstance(buyer, list) else [buyer] * n
    sellers = seller if isinstance(seller, list) else [seller] * n
    if len(buyers) != n or len(sellers) != n:
        raise ValueError("per-episode buyer/seller lists must have one entry per episode")
    seats = [{BUYER: _seat(b, BUYER, sc), SELLER: _seat(s, SELLER, sc)}
             for (sc, _), b, s in zip(episodes, buyers, sellers)]
    # scripted seats move inside the driver; model seats (conversations) are moved from here, batched
    matches = [Match(sc, *(None if isinstance(seat[r], Conversation) else seat[r] for r in (BUYER, SELLER)), seed,
                     max_turns) for (sc, seed), seat in zip(episodes, seats)]
    for match, seat in zip(matches, seats):
        for role, conv in seat.items():
            if isinstance(conv, Conversation) and conv.teacher is not None:
                conv.teacher.reset(match.env.observe(role), match.rngs[role])
    def turn(i: int) -> Conversation | str | None:
        """Scripted seats move; then the model seat that is due reads what is new (a teacher writes its
        reply at once), or the episode is over."""
        match = matches[i]
        match.advance()
        if match.env.done:
            return None
        role = match.env.to_move
        seat, obs = seats[i][role], match.env.observe(role)
        seat.observe(obs, tuple(t["thought"] for t in match.env.log if t["role"] != seat.role))
        return seat.teach(obs) if seat.teacher_due() else seat

    play_turns({s.agent for seat in seats for s in seat.values() if isinstance(s, Conversation)}, n, turn,
               lambda i, text: matches[i].step(text), on_done)
    envs = [m.env for m in matches]
    return [_record(envs[i], seats[i], episodes[i], trained_role) for i in range(n)]


def _record(env: BargainEnv, seats: dict, episode: tuple[Scenario, int], trained_role: str) -> EpisodeRecord:
    return EpisodeRecord(scenario_id=episode[0].id, seed=episode[1], reward=env.reward_of(trained_role), metrics=env.metrics().to_dict(),
                         transcript=env.transcript(), trained_role=trained_role, **token_fields(seats.get(trained_role)))


class LLMPlayer:
    """The ``Player`` interface for one model seat (one episode at a time, e.g. in the Space)."""

    def __init__(self, agent: LLMAgent, role: str):
        self.agent, self.role, self.name = agent, role, agent.name
        self.conv: BargainSeat | None = None

    def reset(self, obs: Observation, rng=None) -> None:
        # Built from the seat's own observation only, so there is no other-side secret to guard.
        self.conv = BargainSeat(self.agent, self.role, None)

    def act(self, obs: Observation) -> str:
        self.conv.observe(obs)
        return generate_replies(self.agent, [self.conv])[0]


def guard_observation(obs: Observation, guard: TextGuard) -> Observation:
    """A bilateral ``Observation`` with every text a player or a scenario file wrote guarded: the
    product's title, description and category and each message's Talk. Prices, actions and notes
    are the environment's own and stay as they are."""
    return obs._replace(title=guard(obs.title), description=guard(obs.description), category=guard(obs.category),
                        history=tuple(m._replace(talk=guard(m.talk)) for m in obs.history))
