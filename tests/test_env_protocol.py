"""Both games have one outside shape (``env.core.GameEnv``): ``reset(seed, options)`` returns the first
mover's view, ``step(action)`` a result with observation, reward, terminated, truncated and info.
One loop that knows nothing of either game plays both to the end."""

from __future__ import annotations

from env.bargain.play import player_rngs
from env.bargain.players import make_player
from env.bargain.sources import get_split
from env.core import GameEnv, StepOutcome, make_env
from env.market import make_policy
from env.market.play import seat_rng


def play(env: GameEnv, seed: int, options: dict, seat, act) -> tuple[list[StepOutcome], object]:
    """The game-agnostic loop: ``seat()`` once the episode started, then ``act(observation) -> action``
    until the episode ends."""
    observation, results = env.reset(seed=seed, options=options), []
    seat()
    for _ in range(10_000):
        result = env.step(act(observation))
        assert isinstance(result, StepOutcome) and isinstance(result.info, dict)
        assert isinstance(result.reward, float) and isinstance(result.terminated, bool)
        results.append(result)
        if result.terminated or result.truncated:
            return results, result.observation
        observation = result.observation
    raise AssertionError("the episode did not end")


def test_the_bilateral_game_plays_through_the_protocol():
    env = make_env("bargain", max_turns=6)
    assert isinstance(env, GameEnv)
    scenario = get_split("builtin", "test")[0]
    players = {"buyer": make_player("buyer", "expert"), "seller": make_player("seller", "neutral")}
    rngs = dict(zip(players, player_rngs(3)))

    def seat():
        for role, p in players.items():
            p.reset(env.observe(role), rngs[role])

    results, last = play(env, 3, {"scenario": scenario}, seat, lambda obs: players[obs.role].act(obs))
    assert results[-1].reward == env.reward and -1 <= env.reward <= 1
    assert all(r.reward == 0.0 for r in results[:-1]) and last.role == "buyer"


def test_the_market_plays_through_the_protocol():
    env = make_env("market")
    assert isinstance(env, GameEnv)
    first = env.reset(seed=7, options={"task": "market_round"})
    assert first["you"] == f"lab{env.to_move}"
    labs = [make_policy("expert") for _ in env.world.labs]

    def seat():
        for i, p in enumerate(labs):
            p.reset(env.observe(i), seat_rng("market_round", 7, i))

    results, _ = play(env, 7, {"task": "market_round"}, seat, lambda view: labs[int(view["you"][3:])].act(view))
    total = [sum(r.rewards.get(i, 0.0) for r in results) for i in range(len(labs))]
    for i in range(len(labs)):  # the dense rewards add up to each lab's outcome
        assert abs(total[i] - env.outcome(i)["reward"]) < 1e-6


def test_an_unknown_game_is_refused_by_name():
    import pytest
    with pytest.raises(ValueError, match="bargain, market"):
        make_env("chess")
