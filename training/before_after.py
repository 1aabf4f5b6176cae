"""Before vs after: the same held-out games played by each stage of training, side by side.

Which games (a fixed rule, not a pick): the first ``--mutual`` mutual-interest products of the
test split, each against the next seller persona in turn and with its first evaluation seed,
plus the first conflicting-interest product (budget below cost: the best possible reward is 0,
by walking away), labelled as such. Every model plays every game greedily (the headline
sampling), so the games differ only by the buyer; the oracle (told the seller's floor) plays
each one too, to show the ceiling.

    python training/before_after.py --models base=tiny,sft=runs/sft/final,grpo=runs/grpo/final
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

from transformers import HfArgumentParser

from env.bargain.env import DEFAULT_MAX_TURNS, BargainEnv
from env.bargain.evaluation import EVAL_SEED_BASE, SEEDS_PER_PRODUCT, episode_seed
from env.bargain.play import play_episode
from env.bargain.players import SELLERS, make_player
from env.bargain.players.oracle import OracleBuyer
from env.bargain.sources import get_split
from training.common.cli import parse
from training.common.provenance import provenance, write_json
from training.engine.backends import SamplingConfig
from training.games.bargain.rollout import play_episodes
from training.games.base import build_agent, name_path


@dataclass
class BeforeAfterConfig:
    models: str = field(default="", metadata={"help": "the buyers in training order: name=path,... (e.g. "
                                                      "base=tiny,sft=runs/sft/final,grpo=runs/grpo/final)"})
    scenarios: str = field(default="builtin", metadata={"help": "scenario source (its test split)"})
    mutual: int = field(default=5, metadata={"help": "mutual-interest games (plus one conflicting)"})
    max_turns: int = field(default=DEFAULT_MAX_TURNS, metadata={"help": "exchanges per game"})
    out: str = field(default="artifacts/before_after.json", metadata={"help": "artifact path"})
    # the build_agent options (local transformers models)
    base_url: str = ""
    backend: str = "transformers"
    device: str = ""
    reasoning_mode: str = "option_a"

    def __post_init__(self):
        self.model_paths = {}
        for item in (x.strip() for x in self.models.split(",") if x.strip()):
            name, path = name_path(item, "--models", ())
            self.model_paths[name] = path
        if len(self.model_paths) < 2:
            raise ValueError("--models needs at least two buyers (before and after), name=path,...")
        if self.mutual < 1:
            raise ValueError(f"--mutual must be at least 1, got {self.mutual}")


def chosen_games(source: str, mutual: int) -> list[dict]:
    """The rule above: (product index, scenario, seller, seed, kind) for each game."""
    test = get_split(source, "test")
    sellers = list(SELLERS)
    games = []
    for i, sc in enumerate(test):
        kind = "mutual" if sc.budget > sc.cost else "conflicting"
        if (kind == "mutual" and sum(g["kind"] == "mutual" for g in games) < mutual) or \
                (kind == "conflicting" and not any(g["kind"] == "conflicting" for g in games)):
            games.append({"product": i, "scenario": sc, "seller": sellers[len(games) % len(sellers)],
                          "seed": episode_seed(i, 0, SEEDS_PER_PRODUCT, EVAL_SEED_BASE), "kind": kind})
        if len(games) == mutual + 1:
            break
    return games


def main(argv: list[str] | None = None) -> dict:
    (cfg,), _ = parse(HfArgumentParser((BeforeAfterConfig,)), list(sys.argv[1:] if argv is None else argv))
    start = time.perf_counter()
    games = chosen_games(cfg.scenarios, cfg.mutual)
    sampling = SamplingConfig(temperature=0.0)
    played = {}
    for name, path in cfg.model_paths.items():
        print(f"[before_after] {name}: {path}", file=sys.stderr, flush=True)
        agent = build_agent(path, cfg, sampling)
        records = play_episodes([(g["scenario"], g["seed"]) for g in games], agent, [g["seller"] for g in games],
                                cfg.max_turns)
        played[name] = [r.transcript for r in records]
    out = []
    for k, g in enumerate(games):
        env = BargainEnv(cfg.max_turns)
        seller = make_player("seller", g["seller"])
        oracle = OracleBuyer()
        oracle.watch(seller)
        play_episode(g["scenario"], oracle, seller, g["seed"], cfg.max_turns, env)
        sc = g["scenario"]
        out.append({"product": g["product"], "title": sc.title, "seller": g["seller"], "seed": g["seed"],
                    "interest": g["kind"], "budget": sc.budget, "cost": sc.cost, "list_price": sc.list_price,
                    "oracle_reward": env.reward,
                    "games": {name: played[name][k] for name in cfg.model_paths},
                    "rewards": {name: played[name][k]["metrics"]["reward"] for name in cfg.model_paths}})
    config = {k: v for k, v in vars(cfg).items() if k != "model_paths"}
    artifact = {"provenance": provenance({**config, "sampling": "greedy"},
                                         {"rule": "first N mutual-interest test products and the first conflicting "
                                                  "one; seller persona k mod 7 for game k; each product's first "
                                                  "evaluation seed"}, time.perf_counter() - start),
                "buyers": list(cfg.model_paths), "games": out}
    write_json(cfg.out, artifact)
    for g in out:
        print(f"{g['title'][:40]:40} {g['seller']:12} {g['interest']:11} "
              + " ".join(f"{n} {r:+.3f}" for n, r in g["rewards"].items()) + f"  oracle {g['oracle_reward']:+.3f}")
    print(f"wrote {cfg.out}")
    return artifact


if __name__ == "__main__":
    main()
