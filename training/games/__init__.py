"""One small adapter per game for the training scripts: which episodes a run plays (typed
records), how an episode is played by a policy, what a step's statistics are, the expert games
SFT clones, how the game is evaluated, and the game's defaults. ``sft.py``, ``grpo.py``,
``sdpo.py`` and ``evaluate.py`` pick the adapter by ``--env`` from ``GAMES`` and never branch on
the game.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from env.bargain.env import DEFAULT_MAX_TURNS
from env.bargain.players import SELLERS
from env.market.world import TASKS
from training.games.bargain import BargainGame
from training.games.market import MarketGame

GAMES = {game.name: game for game in (BargainGame, MarketGame)}


@dataclass
class GameArguments:
    """Which game a training script plays and its episodes' settings (one definition for sft.py,
    grpo.py and sdpo.py; the game's adapter checks and reads what is its own)."""

    env: str = field(default="bargain", metadata={"help": "bargain (the bilateral game: the policy is the buyer) or "
                                                          "market (the GPU market: the policy is lab 0)"})
    tasks: str = field(default="all", metadata={"help": f"market tasks, comma list or all: {', '.join(TASKS)}"})
    scenarios: str = field(default="builtin", metadata={"help": "builtin, amazon, synthetic, a JSON path, or a union such as builtin+synthetic (sources take turns); train split used"})
    budget_factor: float = field(default=0.8, metadata={"help": "buyer budget as a share of the list price (products "
                                                                "that give their own budget keep it)"})
    sellers: str = field(default="all", metadata={"help": f"comma list or all: {', '.join(SELLERS)}"})
    max_turns: int = field(default=DEFAULT_MAX_TURNS, metadata={"help": "exchanges per episode"})

    def __post_init__(self):
        if self.max_turns < 1:
            raise ValueError(f"--max_turns must be at least 1, got {self.max_turns}")
        GAMES[check_env(self.env)].check_script(self)


def game_for(script):
    """The adapter for ``script.env`` (already checked against ``GAMES`` by the script's config)."""
    return GAMES[script.env](script)


def check_env(env: str) -> str:
    if env not in GAMES:
        raise ValueError(f"--env must be one of {', '.join(GAMES)}, got {env!r}")
    return env
