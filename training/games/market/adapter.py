"""The GPU market for the training scripts: the policy in lab 0 of ``(task, seed)`` episodes below
the held-out seeds, the market expert's games for SFT, per-step statistics, and the policy x task
evaluation over held-out seeds."""

from __future__ import annotations

import statistics
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from env.bargain.players import parse_names
from env.market.evaluation import MARKET_EVAL_SEED_BASE, format_market_table
from env.market.world import TASKS
from training.common.cells import model_fingerprint
from training.common.provenance import provenance, write_json, write_jsonl
from training.engine.backends import SamplingConfig
from training.games.base import build_agent
from training.games.market.config import MarketEvalArgs


@dataclass(frozen=True)
class MarketEpisode:
    """One training episode: ``task`` with ``seed`` (below ``MARKET_EVAL_SEED_BASE``)."""

    task: str
    seed: int


class MarketGame:
    """The policy plays lab 0; the other labs are the world's scripted archetypes."""

    name = "market"
    role = "lab0"
    hindsight = False
    publishable = False
    refuses_actions = True  # a refused action costs a little and the game goes on (--refusal_weight shapes it)
    checks_thoughts = False  # no Thought is scored in the market
    EvalArgs = MarketEvalArgs  # what training/evaluate.py parses for this game


    def __init__(self, script):
        self.script = script
        self.train = []  # no products: a market episode is a task and a seed

    @staticmethod
    def check_script(script) -> None:
        script.task_names = parse_names(script.tasks, TASKS, "task")
        if getattr(script, "seller_model", ""):
            raise ValueError("--seller_model is for the bilateral game; market counterparts are scripted")

    def defaults(self, cfg, default_curve: str, default_dir: str) -> None:
        """A market run writes its own curve and checkpoints unless told otherwise (a bilateral run's
        checkpoints in the default folder must never be resumed as a market run's)."""
        script = self.script
        stem = Path(default_curve).stem.replace("_training_curve", "")
        if script.curve == default_curve:
            script.curve = str(Path(default_curve).with_name(f"{stem}_market_training_curve.json"))
        if cfg.output_dir == default_dir:
            cfg.output_dir = f"{default_dir}-market"

    # ------------------------------------------------------------------ training
    def rows(self, n: int) -> list[MarketEpisode]:
        """Row i plays task ``i mod len(tasks)`` with seed i, always below the evaluation seeds."""
        if n > MARKET_EVAL_SEED_BASE:
            raise ValueError(f"{n} training rows would reach the held-out evaluation seeds ({MARKET_EVAL_SEED_BASE}+)")
        tasks = self.script.task_names
        return [MarketEpisode(tasks[i % len(tasks)], i) for i in range(n)]

    def seed_rule(self, what: str = "rows") -> str:
        tasks = self.script.task_names
        return f"{what[:-1]} i: task i mod {len(tasks)} of {tasks}, seed i (below the held-out evaluation seeds)"

    def play(self, agent, episodes: list[MarketEpisode], opponent=None) -> list:
        from training.games.market.rollout import play_market_episodes  # noqa: PLC0415

        return play_market_episodes([(e.task, e.seed) for e in episodes], agent, name="policy")

    @staticmethod
    def step_stats(records) -> dict:
        """What a GRPO step logs beyond the reward spread: deals, jobs done, refusals (all, and by reason), and how
        much the lab acts (a lab drifting to waiting shows in ``acts_mean`` first)."""
        outs = [r.metrics for r in records]
        actions = max(1, sum(o["actions"] for o in outs))
        refused = sum((Counter(o.get("refused_by_code", {})) for o in outs), Counter())
        return {"deal_rate": statistics.fmean(o["deals"] > 0 for o in outs),
                "job_completion_rate": sum(o["jobs_completed"] for o in outs) / max(1, sum(o["jobs"] for o in outs)),
                "invalid_rate": sum(o["invalid"] for o in outs) / actions,
                "refused_by_code": {code: k / actions for code, k in refused.most_common()},
                "actions_mean": statistics.fmean(o["actions"] for o in outs),
                "acts_mean": statistics.fmean(o.get("acts", o["actions"]) for o in outs)}

    def expert_games(self, agents, games: int, role: str = "buyer"):
        """Market expert games (lab 0) as token streams, exactly as the market rollout engine builds
        them when the model plays. Game ``i`` is task ``i mod len(tasks)`` with seed ``i``; with
        several agents (reasoning formats) games alternate formats."""
        from datasets import Dataset  # noqa: PLC0415

        from training.engine.rollout import Teacher  # noqa: PLC0415
        from training.games.market.rollout import play_market_episodes  # noqa: PLC0415

        episodes = [(e.task, e.seed) for e in self.rows(games)]
        records = play_market_episodes(episodes, [Teacher("expert", agents[i % len(agents)]) for i in range(games)])
        return (Dataset.from_dict({"input_ids": [r.prompt_ids + r.completion_ids for r in records],
                                   "completion_mask": [[0] * len(r.prompt_ids) + r.env_mask for r in records]}),
                [r.reward for r in records])

    def expert_seed_rule(self, agents: int) -> str:
        return self.seed_rule("games") + (f", format i mod {agents}" if agents > 1 else "")

    # ------------------------------------------------------------------ evaluation
    @staticmethod
    def evaluate(config, sampling: SamplingConfig, command: str | None = None) -> dict:
        """Every task x policy over held-out seeds (+ one judged game per task)."""
        from tqdm.auto import tqdm  # noqa: PLC0415

        from env.market.evaluation import evaluate, summarize, transcript  # noqa: PLC0415
        from env.market.play import play_market  # noqa: PLC0415
        from env.market.players import make_policy  # noqa: PLC0415
        from training.games.market.rollout import play_market_episodes  # noqa: PLC0415

        start = time.perf_counter()
        labs = {name: config.model_task_names.get(name, config.task_names) for name in config.model_paths}
        total = (len(config.task_names) * len(config.policy_names) + sum(map(len, labs.values()))) * config.episodes
        with tqdm(total=total, desc="market", unit="episode", disable=not config.progress, file=sys.stderr) as bar:
            rows, judged = evaluate(config.task_names, {p: (lambda p=p: make_policy(p)) for p in config.policy_names},
                                    config.episodes, config.seed_base, on_episode=lambda: bar.update(1))
            cache = _cell_cache(config, sampling)
            side_by_side = []  # (policy, env): the first --transcript_seeds games of every model lab, and the expert's
            for name, path in config.model_paths.items():
                agent = None  # loaded when a batch is not in the cache
                for task in labs[name]:
                    envs = []
                    for lo in range(0, config.episodes, config.batch_size):
                        batch = [(task, config.seed_base + k) for k in range(lo, min(lo + config.batch_size,
                                                                                      config.episodes))]
                        cell = {"policy": name, "model": model_fingerprint(path), "task": task,
                                "seeds": [batch[0][1], batch[-1][1]]}
                        if cache is not None and (hit := cache.get(cell)) is not None:
                            envs += _replayed(task, hit["episodes"])
                            bar.update(len(batch))
                            continue
                        if agent is None:
                            agent = build_agent(path, config, sampling)
                            agent.name = name
                        records = play_market_episodes(batch, agent, name=name, on_done=lambda _i: bar.update(1))
                        envs += [r.env for r in records]
                        if cache is not None:
                            cache.put(cell, {"episodes": [{"seed": r.seed, "actions": r.actions, "reward": r.reward}
                                                          for r in records]})
                    rows.append(summarize(task, name, envs))
                    judged.setdefault(task, (name, envs[0]))
                    side_by_side += [(name, env) for env in envs[:config.transcript_seeds]]
            if config.model_paths and config.transcript_seeds:
                side_by_side += [("expert", play_market(task, config.seed_base + k, make_policy("expert")))
                                 for task in config.task_names for k in range(config.transcript_seeds)]
        cfg = {k: v for k, v in asdict(config).items() if k != "progress"}
        if config.model_paths:
            cfg["sampling"] = asdict(sampling)
        seeds = {"base": config.seed_base, "episodes": config.episodes, "rule": "episode k of every cell: seed base + k"}
        artifact = {"provenance": provenance(cfg, seeds, time.perf_counter() - start, command), "rows": rows}
        if cache is not None and cache.resumed:  # played by an earlier, interrupted run of this evaluation
            artifact["cells_resumed"] = cache.resumed
        included = [x.strip() for x in config.include_rows.split(",") if x.strip()]
        if included and not sum(_include(artifact, other, config) for other in included):
            raise ValueError(f"--include_rows: {', '.join(included)} hold no model rows for policies not already in "
                             "this evaluation")
        if config.out:
            write_json(config.out, artifact)
        if config.transcripts and (judged or side_by_side):
            games = {(env.world.task.name, env.world.seed, policy): env for policy, env in [*judged.values(), *side_by_side]}
            write_jsonl(config.transcripts, [transcript(env, policy) for (_t, _s, policy), env in games.items()])
        return artifact

    @staticmethod
    def table(artifact: dict) -> str:
        return format_market_table(artifact["rows"])


# options that do not change a model batch's episodes: left out of its cell key
NOT_IN_CELL_KEY = ("out", "transcripts", "transcript_seeds", "progress", "tasks", "policies", "episodes", "models", "cell_cache",
                   "include_rows", "batch_size", "model_tasks")


def _cell_cache(config, sampling: SamplingConfig):
    """The market evaluation's ``CellCache`` (None without ``--cell_cache``): one cell per model, task and batch of
    seeds, keyed by the settings every batch shares (sampling, reasoning format, device...)."""
    if not config.cell_cache:
        return None
    import torch  # noqa: PLC0415

    from training.common.cells import CellCache  # noqa: PLC0415

    settings = {k: v for k, v in asdict(config).items() if k not in NOT_IN_CELL_KEY}
    settings.update(sampling=asdict(sampling), device=config.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    return CellCache(config.cell_cache, settings)


def _replayed(task: str, episodes: list[dict]) -> list:
    """A cached batch's finished games, replayed from lab 0's recorded actions; each must end with its recorded
    reward (a changed environment would not, and is refused rather than mixed in)."""
    from env.market.play import replay_market  # noqa: PLC0415

    envs = []
    for e in episodes:
        env = replay_market(task, e["seed"], e["actions"])
        if abs(env.outcome(0)["reward"] - e["reward"]) > 1e-9:
            raise ValueError(f"--cell_cache: {task}/{e['seed']} replays to reward {env.outcome(0)['reward']:+.4f}, "
                             f"recorded {e['reward']:+.4f}: the environment changed since; use a new cache file")
        envs.append(env)
    return envs


def _include(artifact: dict, path: str, config) -> int:
    """Add to ``artifact`` the model rows of the market artifact at ``path`` (policies not already there), played
    from the same seed base; rows on fewer seeds than this run's say so, and the scripted rows that artifact played
    on those seeds come along under ``same_seeds``, so the model rows are read beside the same episodes. Rows it
    had itself included come along with their own label and same-seed rows. Returns how many rows joined."""
    import json  # noqa: PLC0415

    from env.market import POLICIES  # noqa: PLC0415
    from training.common.provenance import RECORD_KEYS, relative  # noqa: PLC0415

    try:
        other = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"--include_rows: cannot read {path}: {exc}") from None
    prov = other.get("provenance", {})
    if (prov.get("seeds") or {}).get("base") != config.seed_base:
        raise ValueError(f"--include_rows: {path} was played from seed base {(prov.get('seeds') or {}).get('base')}, "
                         f"this run from {config.seed_base}")
    taken = {(r["policy"], r["task"]) for r in artifact["rows"]}
    models = [r for r in other.get("rows", []) if r["policy"] not in POLICIES
              and (r["policy"], r["task"]) not in taken and r["task"] in config.task_names]
    if more := [r for r in models if r["episodes"] > config.episodes]:
        raise ValueError(f"--include_rows: {path} played {more[0]['policy']} on {more[0]['episodes']} seeds, more than "
                         f"this run's {config.episodes}: rerun with --episodes {more[0]['episodes']}")
    label = relative(path)
    for r in models:  # a row the earlier artifact had itself included keeps its own label
        extra = {} if "from_artifact" in r else {"from_artifact": label}
        if r["episodes"] < config.episodes:
            extra["episodes_subset"] = f"the first {r['episodes']} of these {config.episodes} held-out seeds per task"
        artifact["rows"].append({**r, **extra})
    native = [r for r in models if "from_artifact" not in r]
    scripted = [r for r in other.get("rows", []) if r["policy"] in POLICIES and r["task"] in config.task_names]
    if any(r["episodes"] < config.episodes for r in native) and scripted:
        artifact.setdefault("same_seeds", []).append({"from_artifact": label, "episodes": scripted[0]["episodes"],
                                                      "rows": scripted})
    carried = {r["from_artifact"] for r in models if "from_artifact" in r}
    for block in other.get("same_seeds", []):  # the same-seed rows of the rows that come along
        if block["from_artifact"] in carried:
            artifact.setdefault("same_seeds", []).append(block)
    for earlier, record in other.get("included_rows", {}).items():
        if earlier in carried:
            artifact.setdefault("included_rows", {}).setdefault(earlier, record)
    if native:
        artifact.setdefault("included_rows", {})[label] = {k: prov.get(k) for k in RECORD_KEYS}
    return len(models)
