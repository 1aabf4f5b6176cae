"""The bilateral price negotiation of the RLVR negotiation paper.

``protocol`` (reply parsing), ``rules`` (legality and reward, pure), ``scenario`` (one
negotiation's facts, in cents) and ``scenarios`` / ``catalog`` (products and splits), ``env``
(``BargainEnv``: turn sequencing, per-role projections), ``players`` (scripted buyers and
sellers), ``play`` (the driver: settings, seats, advancing to a seat, whole episodes) and
``evaluation`` (cells, rows, confidence intervals).
"""

from env.bargain.env import BargainEnv, EpisodeMetrics, Message, Observation, StepResult
from env.bargain.play import Match, play_episode
from env.bargain.protocol import Action, ParsedReply, compose_reply, format_price, parse_reply
from env.bargain.rules import BUYER, SELLER, deal_reward, end_reward
from env.bargain.scenario import Scenario, ScenarioDataError
from env.bargain.sources import get_split, load_scenarios, split_scenarios

__all__ = ["BargainEnv", "EpisodeMetrics", "Message", "Observation", "StepResult", "Match", "play_episode", "Action",
           "ParsedReply", "compose_reply", "format_price", "parse_reply", "BUYER", "SELLER", "deal_reward",
           "end_reward", "Scenario", "ScenarioDataError", "get_split", "load_scenarios", "split_scenarios"]
