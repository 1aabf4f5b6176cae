"""Haggle's games: pure Python, no torch, no web framework, fast to import.

Each game is a package of the same shape: ``env.bargain`` (the bilateral price negotiation of
the RLVR negotiation paper) and ``env.market`` (the scarce-GPU market). In each, ``rules`` holds
the pure rules, ``env`` sequences turns and projects each player's view, ``players`` the
scripted players, ``play`` the driver every caller uses (the Space, the server, the evaluation
harness, the rollout engines) and ``evaluation`` the rows of the artifacts.
"""

from env.bargain import (Action, BargainEnv, EpisodeMetrics, Match, Message, Observation, ParsedReply, Scenario,
                         ScenarioDataError, StepResult, compose_reply, deal_reward, end_reward, format_price,
                         get_split, load_scenarios, parse_reply, play_episode, split_scenarios)
from env.bargain.rules import BUYER, SELLER

__all__ = ["BargainEnv", "EpisodeMetrics", "Message", "Observation", "StepResult", "Match", "play_episode", "Action",
           "ParsedReply", "compose_reply", "format_price", "parse_reply", "BUYER", "SELLER", "deal_reward",
           "end_reward", "Scenario", "ScenarioDataError", "get_split", "load_scenarios", "split_scenarios"]
