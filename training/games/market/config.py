"""The GPU market's evaluation options (``python training/evaluate.py --env market``): which
policies in lab 0, on which tasks, over how many held-out seeds."""

from __future__ import annotations

from dataclasses import dataclass, field

from env.bargain.players import parse_names
from env.market import POLICIES
from env.market.world import TASKS
from training.games.base import EvalArgs, name_path

SHIPPED = ("artifacts/eval_market.json", "artifacts/transcripts/eval_market.jsonl")


@dataclass
class MarketEvalArgs(EvalArgs):
    """Every policy in lab 0 of every task over held-out seeds, the world's archetypes in the other
    labs, model labs (``--models``) beside the scripted policies."""

    env: str = field(default="market", metadata={"help": "market (policies x tasks)"})
    tasks: str = field(default="all", metadata={"help": "market tasks, comma list or all: " + ", ".join(TASKS)})
    policies: str = field(default="all", metadata={"help": "market policies in lab 0, comma list or all (the expert, "
                                                           "the baselines, idle)"})
    episodes: int = field(default=500, metadata={"help": "market: held-out seeds per task x policy"})
    models: str = field(default="", metadata={"help": "market: model labs added to --policies: name=path,... (tiny, "
                                                      "a checkpoint folder or a Hub id), through the rollout engine"})
    model_tasks: str = field(default="", metadata={
        "help": "market: name=task+task,... plays a --models lab on those tasks only (the others get no row for it: "
                "e.g. an untrained model whose every reply is refused, where each game costs minutes); '' = every "
                "task"})
    cell_cache: str = field(default="", metadata={
        "help": "market: a JSONL file keeping every finished batch of model episodes (lab 0's actions, replayed on "
                "read-back): a rerun with the same settings and weights reads them back, so an evaluation longer "
                "than a session resumes ('' = none; the key holds no prompt text: after a prompt change, a new "
                "file)"})
    transcript_seeds: int = field(default=0, metadata={
        "help": "market: also write to --transcripts every model lab's games and the expert's on each task's first N "
                "held-out seeds, so one seed can be read side by side (the Space's before/after game); 0 = only one "
                "judged game per task"})
    include_rows: str = field(default="", metadata={
        "help": "market: comma list of earlier market artifacts whose model rows join this one (same seed base; a "
                "row on fewer seeds says so, and that artifact's scripted rows on the same seeds come along under "
                "'same_seeds')"})

    def __post_init__(self):
        super().__post_init__()
        if self.env != "market":
            raise ValueError(f"these are the market's options; --env is {self.env!r}")
        self.out = SHIPPED[0] if self.out is None else self.out
        self.transcripts = SHIPPED[1] if self.transcripts is None else self.transcripts
        self.task_names = parse_names(self.tasks, TASKS, "task")
        self.policy_names = [] if self.policies == "none" else parse_names(self.policies, POLICIES, "policy")
        self.model_paths = dict(name_path(x.strip(), "--models", POLICIES) for x in self.models.split(",") if x.strip())
        self.model_task_names = {}  # a model lab's own tasks (--model_tasks); the others play every task
        for item in (x.strip() for x in self.model_tasks.split(",") if x.strip()):
            name, sep, tasks = (part.strip() for part in item.partition("="))
            if not sep or not name or not tasks:
                raise ValueError(f"--model_tasks takes name=task+task pairs, got {item!r}")
            if name not in self.model_paths:
                raise ValueError(f"--model_tasks names {name!r}, which is not in --models")
            if name in self.model_task_names:
                raise ValueError(f"--model_tasks names {name!r} twice")
            picked = parse_names(tasks.replace("+", ","), TASKS, "task")
            if missing := [t for t in picked if t not in self.task_names]:
                raise ValueError(f"--model_tasks gives {name!r} task {missing[0]!r}, which is not in --tasks")
            self.model_task_names[name] = picked
        if not self.policy_names and not self.model_paths and not self.include_rows:
            raise ValueError("nothing to evaluate: give --policies or --models")
        if self.transcript_seeds < 0 or self.transcript_seeds > self.episodes:
            raise ValueError(f"--transcript_seeds must be from 0 to --episodes ({self.episodes}), "
                             f"got {self.transcript_seeds}")
        if self.episodes < 2:
            raise ValueError(f"--episodes must be at least 2 (a spread needs two), got {self.episodes}")
