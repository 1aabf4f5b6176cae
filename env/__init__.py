"""Haggle environments: pure Python, no torch, fast to import.

The bilateral price negotiation of the RLVR negotiation paper lives in ``env.bargain``
(turn sequencing), ``env.rules`` (legality and reward), ``env.protocol`` (reply parsing),
``env.scenarios`` / ``env.catalog`` (products) and ``env.players`` (scripted players).
"""

from env.bargain import BargainEnv, EpisodeMetrics, Message, Observation, StepResult
from env.play import play_episode
from env.protocol import Action, ParsedReply, compose_reply, format_price, parse_reply
from env.rules import BUYER, SELLER, deal_reward, end_reward
from env.scenarios import Scenario, ScenarioDataError, get_split, load_scenarios, split_scenarios

__all__ = ["BargainEnv", "EpisodeMetrics", "Message", "Observation", "StepResult", "play_episode", "Action",
           "ParsedReply", "compose_reply", "format_price", "parse_reply", "BUYER", "SELLER", "deal_reward",
           "end_reward", "Scenario", "ScenarioDataError", "get_split", "load_scenarios", "split_scenarios"]
