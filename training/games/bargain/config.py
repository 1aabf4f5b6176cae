"""The bilateral game's evaluation options (``python training/evaluate.py``): which buyers and
sellers, on which products and seeds, and where the artifact goes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from env.bargain.env import DEFAULT_MAX_TURNS
from env.bargain.evaluation import SEEDS_PER_PRODUCT
from env.bargain.players import BUYERS, NAMED_BUYERS, PROBES, SELLERS, TEACHERS, parse_names
from env.bargain.protocol import REASONING_MODES
from env.bargain.sources import GENERATED, SOURCES, check_budget_factor, is_union
from training.games.base import EvalArgs, label, name_path

SHIPPED = ("artifacts/eval_scripted.json", "artifacts/transcripts/eval_scripted.jsonl")


@dataclass
class BargainEvalArgs(EvalArgs):
    """Every buyer x seller cell on a split's products x seeds (scripted players by name, model players
    by path), plus a ``mix`` row per buyer over the sellers."""

    scenarios: str = field(default="auto", metadata={"help": "builtin, amazon, auto (amazon if present) or a JSON path"})
    split: str = field(default="test", metadata={"help": "test (held out), train or all"})
    budget_factor: float = field(default=0.8, metadata={"help": "buyer budget as a share of the list price (products "
                                                                "that give their own budget keep it)"})
    buyers: str = field(default="all", metadata={
        "help": f"scripted buyers, comma list, all ({', '.join(BUYERS)}) or none; by name also "
                f"{', '.join(n for n in NAMED_BUYERS if n not in BUYERS)}"})
    sellers: str = field(default="all", metadata={"help": f"comma list or all (the mix: {', '.join(SELLERS)}); "
                                                                 f"adversarial probes by name: {', '.join(PROBES)}"})
    seeds: int = field(default=SEEDS_PER_PRODUCT, metadata={"help": "episodes per product per cell (the paper: 4)"})
    limit: int = field(default=0, metadata={"help": "use only the first N products of the split (0 = all)"})
    max_turns: int = field(default=DEFAULT_MAX_TURNS, metadata={"help": "exchanges (buyer reply + seller reply) per "
                                                                        "episode"})
    transcripts_per_cell: int = field(default=2, metadata={"help": "transcripts kept per buyer x seller cell"})
    buyer_model: str = field(default="", metadata={"help": "model buyer: tiny, a path or a Hub id (replaces --buyers)"})
    buyer_name: str = field(default="", metadata={"help": "row label of the model buyer (base, sft, grpo, sdpo...)"})
    buyer_models: str = field(default="", metadata={"help": "model buyers added to --buyers: name=path,name=path "
                                                            "(e.g. base=tiny,sft=runs/sft/final)"})
    buyer_modes: str = field(default="", metadata={"help": "per-model reasoning modes overriding --reasoning_mode: "
                                                           "name=option_b,... (the option_a/option_b ablation)"})
    temperatures: str = field(default="", metadata={"help": "model players: comma list of sampling temperatures, "
                                                             "0 = greedy, e.g. '0,0.7'; the first gives the headline "
                                                             "rows, the others go to rows_other_sampling (default: "
                                                             "--temperature alone)"})
    include_rows: str = field(default="", metadata={
        "help": "comma list of earlier evaluation artifacts whose model buyers' rows join this one (played on "
                "the same products, or the first of them, with the same seeds, sellers and turns, which is checked; "
                "each row names its artifact and any subset; the artifact's provenance is kept): a slow model "
                "evaluated once, beside a fresh table"})
    greedy_only: str = field(default="", metadata={"help": "model buyers (comma list of names) evaluated at the "
                                                           "first --temperatures value only (e.g. a model too slow on "
                                                           "this machine for both)"})
    oracle: bool = field(default=True, metadata={"help": "add the oracle's rows: a buyer told each scripted seller's "
                                                         "private floor, the ceiling of each game (an upper bound, "
                                                         "not a baseline; rows carry upper_bound: true)"})
    cell_cache: str = field(default="", metadata={
        "help": "a JSONL file keeping every finished model cell (one buyer at one temperature against one seller): "
                "a rerun with the same settings and the same weights reads finished cells back instead of playing "
                "them, so an evaluation longer than a session resumes ('' = none)"})
    seller_model: str = field(default="", metadata={"help": "model seller (replaces --sellers)"})
    seller_name: str = field(default="", metadata={"help": "row label of the model seller"})

    def __post_init__(self):
        super().__post_init__()
        if self.env != "bargain":
            raise ValueError(f"these are the bilateral game's options; --env is {self.env!r}")
        out, transcripts = outputs(self.scenarios)
        self.out = out if self.out is None else self.out
        self.transcripts = transcripts if self.transcripts is None else self.transcripts
        check_budget_factor(self.budget_factor)
        self.temperature_list = parse_temperatures(self.temperatures)
        self.greedy_names = [x.strip() for x in self.greedy_only.split(",") if x.strip()]
        self._players()

    def _players(self) -> None:
        """The buyers and sellers to play, by name (scripted) or ``name=path`` (models)."""
        if self.split not in ("test", "train", "all"):
            raise ValueError(f"--split must be test, train or all, got {self.split!r}")
        if self.seeds < 1:
            raise ValueError(f"--seeds must be at least 1, got {self.seeds}")
        if self.limit < 0:
            raise ValueError(f"--limit must be 0 (all) or positive, got {self.limit}")
        if self.max_turns < 1:
            raise ValueError(f"--max_turns must be at least 1, got {self.max_turns}")
        self.model_buyers = {}
        for item in (x.strip() for x in self.buyer_models.split(",") if x.strip()):
            name, path = name_path(item, "--buyer_models", NAMED_BUYERS)
            self.model_buyers[name] = path
        if self.buyer_model:
            self.model_buyers = {self.buyer_name or label(self.buyer_model): self.buyer_model}
            scripted = []
        else:
            scripted = [] if self.buyers == "none" else parse_names(self.buyers, BUYERS, "buyer", TEACHERS)
        self.model_modes = {}
        for item in (x.strip() for x in self.buyer_modes.split(",") if x.strip()):
            name, _, mode = (x.strip() for x in item.partition("="))
            if name not in self.model_buyers:
                raise ValueError(f"--buyer_modes names a buyer that is not a model buyer: {name!r}")
            if mode not in REASONING_MODES:
                raise ValueError(f"--buyer_modes: {name} must be one of {REASONING_MODES}, got {mode!r}")
            self.model_modes[name] = mode
        self.buyer_names = scripted + list(self.model_buyers)
        if not self.buyer_names:
            raise ValueError("no buyers to evaluate")
        self.seller_names = ([self.seller_name or label(self.seller_model)] if self.seller_model
                               else parse_names(self.sellers, SELLERS, "seller", PROBES))


def outputs(scenarios: str) -> tuple[str, str]:
    """Where an evaluation writes by default: the shipped artifact (which the Space reads) for the
    shipped sources, ``runs/eval/<name>.json`` for a user's own products, so evaluating them never
    overwrites what the Space shows."""
    parts = scenarios.split("+") if is_union(scenarios) else [scenarios]
    if all(p in ("auto", *SOURCES, *GENERATED) for p in parts):
        return SHIPPED
    name = "+".join(Path(p).stem or "products" for p in parts)
    return f"runs/eval/{name}.json", f"runs/eval/{name}.jsonl"


def parse_temperatures(value: str) -> list[float]:
    """``'0,0.7'`` -> ``[0.0, 0.7]`` (empty: none); each a finite number from 0 to 2, no repeats."""
    temps = []
    for item in (x.strip() for x in value.split(",") if x.strip()):
        try:
            t = float(item)
        except ValueError:
            raise ValueError(f"--temperatures: {item!r} is not a number") from None
        if not 0 <= t <= 2 or t in temps:
            raise ValueError(f"--temperatures: each must be from 0 (greedy) to 2 and listed once, got {item!r}")
        temps.append(t)
    return temps
