"""The scarce-GPU market: labs with private budgets and jobs trade GPU capacity, pitch to a
judge, form coalitions to buy volume lots, and adapt to market shocks.

``world`` (labs, jobs, blocks, tasks), ``actions`` (the JSON action language), ``rules`` (pure
valuation), ``judge`` (pitch judging), ``env`` (``MarketEnv``: rounds, turns, dense rewards,
projections), ``players`` (archetypes, the rule expert, baselines, exploits), ``play``.
"""

from env.market.actions import ACTION_SCHEMA, Invalid, parse_action, validate
from env.market.env import MarketEnv, MarketStep
from env.market.judge import LLMJudge, PitchFacts, RubricJudge, Verdict
from env.market.play import play_market
from env.market.players import BASELINES, EXPLOITS, POLICIES, make_policy
from env.market.world import TASKS, make_world

__all__ = ["ACTION_SCHEMA", "Invalid", "parse_action", "validate", "MarketEnv", "MarketStep", "LLMJudge",
           "PitchFacts", "RubricJudge", "Verdict", "play_market", "BASELINES", "EXPLOITS", "POLICIES",
           "make_policy", "TASKS", "make_world"]
