"""What GRPO and SDPO share: on-policy episodes of the live game as TRL's ``rollout_func``, the
policy and its frozen opponent, and what a finished run writes (the policy, its lineage, the
training curve, and the FP8 checkpoint with its card on the Hub when asked).

``training/grpo.py`` and ``training/sdpo.py`` are short scripts over this: ``prepare`` parses the
command line and sets up an ``RLRun``; the script builds its TRL trainer from it; ``train_and_finish``
trains (resuming from the run's last checkpoint) and writes what the run made.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import torch
from accelerate import PartialState
from accelerate.utils import gather_object
from datasets import Dataset
from transformers import TrainerCallback
from transformers.trainer_utils import get_last_checkpoint
from trl import GRPOConfig, ModelConfig, TrlParser

from env.bargain.protocol import REASONING_MODES
from env.bargain.sources import ScenarioDataError
from training.common.cli import parse
from training.common.provenance import (command_line, git_commit, machine, provenance, read_lineage, write_json,
                                        write_lineage)
from training.engine.backends import REPLY_TOKENS, SamplingConfig, TransformersBackend, TRLVLLMBackend
from training.engine.models import ModelNotFound, load_model, save_adapter_base
from training.engine.precision import PRECISION_HELP, check_precision, set_training_precision
from training.engine.rollout import LLMAgent
from training.games import GameArguments, game_for
from training.games.base import reward_stats
from training.rl.engine import PROMPT_ROOM, ROLLOUT_BACKENDS, ROLLOUT_PRECISIONS, LlamaCppPolicy, check_engine

PROCESS_SEED_STRIDE = 1_000_003  # process k samples with seed + k * this
DEFAULT_START = "runs/sft/final"  # where training/sft.py leaves the policy RL starts from


@dataclass
class GRPOScriptArguments(GameArguments):
    seller_model: str = field(default="", metadata={"help": "a frozen model seller instead of the scripted mix"})
    reasoning_mode: str = field(default="option_a", metadata={"help": "option_a or option_b"})
    max_new_tokens: int = field(default=REPLY_TOKENS, metadata={"help": "tokens per buyer reply (the evaluation's "
                                                                          "budget: replies as SFT taught them fit)"})
    think_tokens: int = field(default=64, metadata={"help": "cap on <think> tokens per reply (option_b)"})
    precision: str = field(default="", metadata={"help": PRECISION_HELP})
    curve: str = field(default="artifacts/grpo_training_curve.json", metadata={"help": "training-curve artifact "
                                                                                       "('' for none)"})
    episode_log: str = field(default="", metadata={
        "help": "write the episodes each process plays to PATH.rank<N>.jsonl (step, process, dataset row, the "
                "row's episode): how the tests check the split across processes ('' for none)"})
    refusal_weight: float = field(default=0.0, metadata={
        "help": "training-only shaping for games that refuse actions (the GPU market): a second TRL reward "
                "function, minus the episode's refused actions, weighted by this against the environment's "
                "reward (TRL's reward_weights [1, W]); 0 for none. The curves and evaluations report the "
                "environment's reward alone"})
    consistency_weight: float = field(default=0.0, metadata={
        "help": "training-only shaping for the bilateral game: a TRL reward function over the ask/offer-vs-budget "
                "comparisons the buyer's Thoughts stated in the episode (env/bargain/consistency.py; its form is "
                "--consistency_reward), weighted by this against the environment's reward; 0 for none. The curves "
                "and evaluations report the environment's reward alone, and thought_consistency beside it"})
    consistency_reward: str = field(default="per_false_claim", metadata={
        "help": "--consistency_weight's reward: per_false_claim (minus the episode's false claims: unbounded, and a "
                "claim left unsaid is never wrong, so a large weight teaches the buyer to stop stating comparisons) "
                "or signed_share ((true - false) / claims, in [-1, 1], 0 with no claim: a true comparison earns what "
                "a false one costs, whatever the episode's length)"})
    spare_groups: int = field(default=0, metadata={
        "help": "groups played per step beside the step's own, on fresh train rows, to stand in for groups whose "
                "episodes all scored the same (no group-relative signal): DAPO's dynamic sampling without a second "
                "round of generation. Each process plays its own spares in the same batch as its groups; a "
                "zero-variance group is replaced by the next spare that has variance (0 = none)"})
    spares_on_demand: bool = field(default=False, metadata={
        "help": "--spare_groups: play the step's own groups first, then only as many spare groups as there are flat "
                "ones, in rounds, until each flat group has a replacement with variance or the step's spares are spent "
                "(DAPO's resampling rounds): the same spares in the same order stand in, and a step plays about as "
                "many episodes as it trains on instead of all its spares every step"})
    expert_prefix: float = field(default=0.0, metadata={
        "help": "the bilateral game: the share of train rows that start late in the expert buyer's own game against the "
                "row's seller (start states from demonstrations): the expert writes the first replies, not trained on, "
                "and the policy plays its last --expert_prefix_replies, where the deals are closed or lost. Drawn from "
                "each row's seed; the episode's reward is the whole game's (0 = every row a whole game)"})
    expert_prefix_replies: int = field(default=2, metadata={
        "help": "--expert_prefix: the policy takes over for this many of the expert's last buyer replies at most "
                "(the handover drawn from the row's seed; one reply at least stays the expert's)"})
    greedy_prefix: float = field(default=0.0, metadata={
        "help": "bargain: the share of rows (drawn from each row's seed) that start late in the policy's own game: at "
                "each step the current policy plays the row once greedily (as it is evaluated), and the row's group "
                "replays that game's first replies (not trained on) and samples its last --greedy_prefix_replies, "
                "where the deals are closed or lost. The curve logs the share and the greedy games' reward"})
    greedy_prefix_replies: int = field(default=2, metadata={
        "help": "--greedy_prefix: the group samples this many of the greedy game's last buyer replies at most (the "
                "handover drawn from the row's seed)"})
    greedy_prefix_guide: int = field(default=0, metadata={
        "help": "--greedy_prefix: in each late-start group this many episodes have the expert buyer play on from the "
                "greedy game's state, its replies trained on (off-policy guidance in the group, as LUFFY mixes "
                "demonstrations into GRPO groups): where every sample of the policy loses, the expert's move gets the "
                "advantage. The curve logs the guided share and the policy's own episodes' reward apart"})
    time_budget_s: float = field(default=0.0, metadata={
        "help": "stop training at the end of the step after which another step would pass this many seconds since "
                "the run began (a lease on a lent machine); the final policy is saved as usual and the curve records "
                "the stop (0 = run to --max_steps)"})
    stop_at_step: int = field(default=0, metadata={
        "help": "end training after this step (its checkpoint saved, the curve recording the stop) while keeping what "
                "--max_steps sets: the dataset and its seeded order, the spare pool, the schedule. Short branches of "
                "a long run then play its rows step for step (0 = run to --max_steps)"})
    rollout_backend: str = field(default="transformers", metadata={
        "help": "what samples the episodes on a CPU: transformers (generate, the reference) or llamacpp (the policy "
                "exported to GGUF before each step, its episodes decoded together with a KV sequence each; the trainer "
                "still computes every log-prob: training/rl/engine.py). --use_vllm takes precedence"})
    rollout_precision: str = field(default="bfloat16", metadata={
        "help": "--rollout_backend llamacpp: the exported weights, float32 or bfloat16 (half the bytes a token reads)"})
    lm_head_trained_only: bool = field(default=True, metadata={
        "help": "score the LM head at the trained player's own completion tokens only (not the opponent's messages), "
                "in the policy's and the reference's forward: the same loss, less work (training/rl/trim.py)"})
    card_eval: str = field(default="artifacts/eval_results.json",
                           metadata={"help": "evaluation artifact whose table goes into the model card (--push_to_hub)"})
    smoke: bool = field(default=False, metadata={"help": "tiny run for tests (training/recipes/smoke/): 2 steps of 8 "
                                                         "episodes (flags still win)"})

    def __post_init__(self):
        if self.reasoning_mode not in REASONING_MODES:
            raise ValueError(f"--reasoning_mode must be one of {REASONING_MODES}")
        check_precision(self.precision)
        if not self.time_budget_s >= 0:
            raise ValueError(f"--time_budget_s must be 0 (none) or more, got {self.time_budget_s}")
        if self.stop_at_step < 0:
            raise ValueError(f"--stop_at_step must be 0 (none) or more, got {self.stop_at_step}")
        if self.rollout_backend not in ROLLOUT_BACKENDS:
            raise ValueError(f"--rollout_backend must be one of {', '.join(ROLLOUT_BACKENDS)}, got {self.rollout_backend!r}")
        if self.rollout_precision not in ROLLOUT_PRECISIONS:
            raise ValueError(f"--rollout_precision must be one of {', '.join(ROLLOUT_PRECISIONS)}, got "
                             f"{self.rollout_precision!r}")
        if not self.consistency_weight >= 0:
            raise ValueError(f"--consistency_weight must be 0 or more (a penalty per false claim), got "
                             f"{self.consistency_weight}")
        if self.consistency_reward not in CONSISTENCY_REWARDS:
            raise ValueError(f"--consistency_reward must be one of {', '.join(CONSISTENCY_REWARDS)}, got "
                             f"{self.consistency_reward!r}")
        if self.spare_groups < 0:
            raise ValueError(f"--spare_groups must be 0 or more, got {self.spare_groups}")
        if self.spares_on_demand and not self.spare_groups:
            raise ValueError("--spares_on_demand plays spare groups as they are needed: it needs --spare_groups 1 or more")
        for prefix in ("expert_prefix", "greedy_prefix"):  # late starts: a share of rows, a number of replies
            share, replies = getattr(self, prefix), getattr(self, f"{prefix}_replies")
            if not 0 <= share <= 1:  # also refuses NaN
                raise ValueError(f"--{prefix} must be a share from 0 to 1, got {share}")
            if replies < 1:
                raise ValueError(f"--{prefix}_replies must be 1 or more, got {replies}")
            if share and self.env != "bargain":
                raise ValueError(f"--{prefix} starts rows late in the bilateral game's buyer games (--env bargain)")
            if share and self.seller_model:
                raise ValueError(f"--{prefix} replays buyer games against the scripted sellers, not --seller_model")
        if self.greedy_prefix_guide < 0 or (self.greedy_prefix_guide and not self.greedy_prefix):
            raise ValueError(f"--greedy_prefix_guide must be 0 or more and needs --greedy_prefix, got "
                             f"{self.greedy_prefix_guide}")
        if self.greedy_prefix and self.expert_prefix:
            raise ValueError("--greedy_prefix and --expert_prefix each choose how a row starts late: one at a time")
        if not self.refusal_weight >= 0:  # also refuses NaN
            raise ValueError(f"--refusal_weight must be 0 or more (a penalty per refused action), got "
                             f"{self.refusal_weight}")
        super().__post_init__()


@dataclass
class HaggleGRPOConfig(GRPOConfig):
    """TRL's GRPOConfig with defaults for this task: 64 episodes per step in groups of 8, no KL."""

    output_dir: str = field(default="runs/grpo")
    per_device_train_batch_size: int = field(default=8)
    gradient_accumulation_steps: int = field(default=8)
    num_generations: int = field(default=8)
    max_completion_length: int = field(default=1024)
    learning_rate: float = field(default=3e-5)
    max_steps: int = field(default=30)
    beta: float = field(default=0.0)
    temperature: float = field(default=0.7)
    logging_steps: float = field(default=1)
    save_steps: float = field(default=10)
    save_total_limit: int = field(default=2)
    bf16: bool = field(default=False)
    gradient_checkpointing: bool = field(default=False)
    use_cpu: bool = field(default=not torch.cuda.is_available())
    report_to: str = field(default="none")
    seed: int = field(default=0)


class EpisodeRollouts:
    """The ``rollout_func``: plays whole episodes of the game with the current policy; keeps per-step
    stats. A dataset row's prompt is the index of its episode in ``episodes`` (typed records, made
    by the game's adapter)."""

    def __init__(self, script: "GRPOScriptArguments", cfg: GRPOConfig, game, episodes: list, opponent=None,
                 spares: list | None = None):
        self.script, self.cfg, self.game, self.episodes, self.opponent = script, cfg, game, episodes, opponent
        self.spares = spares or []  # --spare_groups: fresh train rows, row len(episodes) + j is spares[j]
        self.backend = self.agent = None
        self.steps: list[dict] = []
        if script.episode_log:  # its folder may be its own, outside --output_dir: made before any episode is played
            Path(script.episode_log).parent.mkdir(parents=True, exist_ok=True)

    def _policy(self, trainer):
        model = trainer.accelerator.unwrap_model(trainer.model)
        if self.backend is None or self.backend.model is not model:
            # each process samples its own episodes: its own generation seed
            sampling = SamplingConfig(temperature=self.cfg.temperature, top_p=self.cfg.top_p,
                                      max_new_tokens=self.script.max_new_tokens, think_tokens=self.script.think_tokens,
                                      seed=self.cfg.seed + PROCESS_SEED_STRIDE * trainer.accelerator.process_index)
            # --use_vllm: the turns are generated by the vLLM that TRL syncs (colocated or a server)
            if self.cfg.use_vllm:
                self.backend = TRLVLLMBackend(trainer, sampling)
            elif self.script.rollout_backend == "llamacpp":
                # sized to an episode's stream (its opening prompt and the completion the trainer keeps)
                self.backend = LlamaCppPolicy(model, trainer.processing_class, sampling, self.script.rollout_precision,
                                              context=self.cfg.max_completion_length + PROMPT_ROOM,
                                              cache=Path(self.cfg.output_dir) / "gguf" /
                                              f"process{trainer.accelerator.process_index}")
            else:
                self.backend = TransformersBackend(model, trainer.processing_class, sampling)
            self.agent = LLMAgent(self.backend, self.script.reasoning_mode, name="policy")
        return self.agent

    def __call__(self, prompts: list, trainer) -> dict:
        agent = self._policy(trainer)
        was_training = agent.backend.model.training
        agent.backend.model.eval()
        acc = trainer.accelerator
        rows = [int(p) for p in prompts]
        spare_rows = self._draw_spares(acc.process_index, acc.num_processes, trainer.state.global_step)
        synced = time.perf_counter()
        if isinstance(agent.backend, LlamaCppPolicy):  # this step's weights, a sequence for each episode
            agent.backend.sync(len(rows) + len(spare_rows), trainer.state.global_step)
        played_at = time.perf_counter()
        try:
            with _without_autocast(agent.backend.model):
                if self.script.spares_on_demand:
                    played_all, spare_rows = self._play_on_demand(agent, rows, spare_rows)
                else:
                    played_all = self.game.play(agent, [self._episode(r) for r in rows + spare_rows], self.opponent)
        finally:
            agent.backend.model.train(was_training)
        records, sampled_zero = list(played_all[:len(rows)]), None
        if spare_rows or self.script.spares_on_demand:  # on demand: logged even when no spare was needed
            records, rows, sampled_zero = replace_flat_groups(rows, records, spare_rows, played_all[len(rows):],
                                                              self.cfg.num_generations)
        self.last_records = records
        trainer._rollout_scored = [r.env_mask[:self.cfg.max_completion_length] for r in records]  # TrimmedBatches
        step = trainer.state.global_step + 1
        if self.script.episode_log:
            with open(f"{self.script.episode_log}.rank{acc.process_index}.jsonl", "a") as f:
                for r, rec in zip(rows, records):
                    f.write(json.dumps({"step": step, "process": acc.process_index, "row": r,
                                        "episode": asdict(self._episode(r)), "handover": rec.handover}) + "\n")
        # the curve covers every process's episodes (gathered), grouped by dataset row wherever played
        mine = [{"row": r, "reward": rec.reward, "metrics": rec.metrics, "prefixed": rec.handover > 0,
                 "guided": rec.guided} for r, rec in zip(rows, records)]
        everyone = gather_object(mine) if acc.num_processes > 1 else mine
        played = [SimpleNamespace(reward=e["reward"], metrics=e["metrics"]) for e in everyone]
        prefix = "expert_prefix" if self.script.expert_prefix else "greedy_prefix" if self.script.greedy_prefix else ""
        point = {**reward_stats(played, self.cfg.num_generations, step, keys=[e["row"] for e in everyone]),
                 **self.game.step_stats(played), "processes": acc.num_processes,
                 **({f"{prefix}_share": statistics.fmean(e["prefixed"] for e in everyone)} if prefix else {}),
                 "rollout_s": round(time.perf_counter() - played_at, 3)}
        if self.script.greedy_prefix_guide:  # the expert's guided episodes apart from the policy's own
            own = [e["reward"] for e in everyone if not e["guided"]]
            point.update({"guided_share": statistics.fmean(e["guided"] for e in everyone),
                          "reward_mean_policy": statistics.fmean(own) if own else None})
        if self.script.greedy_prefix:  # the policy's greedy games this step (train rows: a diagnostic, not an evaluation)
            greedy = [(g.reward, g.metrics["deal"]) for g in getattr(self.game, "last_greedy", [])]
            greedy = gather_object(greedy) if acc.num_processes > 1 else greedy
            if greedy:
                point.update({"greedy_games": len(greedy), "greedy_reward_mean": statistics.fmean(g[0] for g in greedy),
                              "greedy_deal_rate": statistics.fmean(g[1] for g in greedy)})
        if isinstance(agent.backend, LlamaCppPolicy):
            point["export_s"] = round(played_at - synced, 3)  # the merge, hash, GGUF export and opening before the episodes
            # episodes whose stream filled the engine's sequence: their last reply was cut (transformers would have
            # gone on; a stream that long is past --max_completion_length, where the trainer stops reading anyway)
            room = agent.backend.context - self.script.max_new_tokens
            point["context_full"] = sum(len(r.prompt_ids) + len(r.completion_ids) > room for r in played_all)
        if sampled_zero is not None:  # what was played before the flat groups were replaced (this process's share)
            # the step's own rows as sampled, before any replacement: the reward a run without spares would log
            sampled = [rec.reward for rec in played_all[:len(prompts)]]
            sampled = gather_object(sampled) if acc.num_processes > 1 else sampled
            counts = gather_object([len(played_all)]) if acc.num_processes > 1 else [len(played_all)]
            point.update({"episodes_played": sum(counts),
                          "reward_mean_sampled": statistics.fmean(sampled),
                          "frac_reward_zero_std_sampled": sampled_zero["frac_zero_std"],
                          "groups_replaced": sampled_zero["replaced"]})
        self.steps.append(point)
        limit = self.cfg.max_completion_length
        out = {
            "prompt_ids": [r.prompt_ids for r in records],
            "completion_ids": [r.completion_ids[:limit] for r in records],
            # None where the engine gives none: TRL then computes what it needs in the trainer's forward
            "logprobs": [r.logprobs[:limit] for r in records] if getattr(agent.backend, "logprobs", True) else None,
            "env_mask": [r.env_mask[:limit] for r in records],
            "episode_reward": [r.reward for r in records],
        }
        if self.script.refusal_weight:  # TRL hands each extra field to the reward functions by name
            out["refused"] = [r.metrics["invalid"] for r in records]
        if self.script.consistency_weight:
            out["claims"] = [r.metrics["thought_claims"] for r in records]
            out["true_claims"] = [r.metrics["thought_claims_true"] for r in records]
        return out

    def _play_on_demand(self, agent, rows: list[int], spare_rows: list[int]) -> tuple[list, list[int]]:
        """--spares_on_demand: the step's own rows, then rounds of spare groups (in the drawn order), each round as
        many groups as the flat groups still without a replacement, until none is left or the step's spares are
        spent. Returns every record played (the rows' first) and the spare rows played, in order."""
        g = self.cfg.num_generations
        played = list(self.game.play(agent, [self._episode(r) for r in rows], self.opponent))
        greedy = list(getattr(self.game, "last_greedy", []))

        # only whole groups are replaced (replace_flat_groups): a group split with another process stays
        wanted = sum(_flat(played, ix) for ix in _whole_groups(rows, g))
        spare_played: list[int] = []
        while wanted and len(spare_played) < len(spare_rows):
            batch = spare_rows[len(spare_played):len(spare_played) + wanted * g]
            records = list(self.game.play(agent, [self._episode(r) for r in batch], self.opponent))
            greedy += getattr(self.game, "last_greedy", [])
            wanted -= sum(not _flat(records, ix) for ix in _whole_groups(batch, g))
            played += records
            spare_played += batch
        if greedy:
            self.game.last_greedy = greedy
        return played, spare_played

    def _episode(self, row: int):
        n = len(self.episodes)
        return self.episodes[row] if row < n else self.spares[row - n]

    def _draw_spares(self, process: int, processes: int, step: int) -> list[int]:
        """This step's spare rows, each repeated num_generations times: process p takes spare rows p, p + P, ...
        (P processes), so no two processes play the same spare. ``step`` is the steps done before this one (one
        draw a step), so a run resumed in a new process draws on from where its steps left the pool."""
        g, n, k = self.cfg.num_generations, len(self.episodes), self.script.spare_groups
        drawn = (process + processes * i for i in range(step * k, (step + 1) * k))
        # the pool is sized for max_steps; a longer run plays without spares
        return [n + j for j in drawn if j < len(self.spares) for _ in range(g)]


def _whole_groups(keys: list[int], group: int) -> list[list[int]]:
    """The positions of each row's episodes, for the rows played ``group`` times here (a whole group)."""
    out: dict[int, list[int]] = {}
    for i, k in enumerate(keys):
        out.setdefault(k, []).append(i)
    return [ix for ix in out.values() if len(ix) == group]


def _flat(records, ix) -> bool:
    """Whether the episodes at ``ix`` all scored the same (no group-relative signal)."""
    return max(records[i].reward for i in ix) == min(records[i].reward for i in ix)


def replace_flat_groups(rows: list[int], records: list, spare_rows: list[int], spare_records: list,
                        group: int) -> tuple[list, list[int], dict]:
    """DAPO-style dynamic sampling in one round: each group of ``rows`` (``group`` consecutive equal rows, as TRL
    repeats a prompt) whose rewards are all equal is replaced, in place, by the next spare group whose rewards
    differ. A group split with another process (fewer than ``group`` rows here) is left alone. Returns the
    records and rows to train on, and the sampled batch's share of flat groups and how many were replaced."""
    records, rows = list(records), list(rows)
    mine = _whole_groups(rows, group)
    flat_groups = [ix for ix in mine if _flat(records, ix)]
    useful = iter([ix for ix in _whole_groups(spare_rows, group) if not _flat(spare_records, ix)])
    replaced = 0
    for ix in flat_groups:
        sx = next(useful, None)
        if sx is None:
            break
        for i, j in zip(ix, sx):
            records[i], rows[i] = spare_records[j], spare_rows[j]
        replaced += 1
    return records, rows, {"frac_zero_std": len(flat_groups) / len(mine) if mine else 0.0, "replaced": replaced}


@contextmanager
def _without_autocast(model):
    """The engine generates in the weights' precision (it chooses its own per phase), not in the trainer's bf16
    autocast (``--precision``): accelerate wraps a prepared model's ``forward`` in autocast, and a bf16 forward
    would write into caches in the weights' dtype. The forward as it was is put back while the engine plays."""
    original = model.__dict__.get("_original_forward")
    if original is None:
        yield
        return
    wrapped = model.forward
    model.forward = original
    try:
        with torch.autocast(device_type=model.device.type, enabled=False):
            yield
    finally:
        model.forward = wrapped


def episode_reward(completions, episode_reward, **_) -> list[float]:
    """The environment's verifiable buyer reward, computed when the episode ended."""
    return list(episode_reward)


def refused_actions(completions, refused, **_) -> list[float]:
    """Training-only shaping (``--refusal_weight``): minus the number of actions the environment refused in the
    episode. TRL weighs it against ``episode_reward`` by ``reward_weights``; the curves report both apart."""
    return [-float(n) for n in refused]


def false_thought_claims(completions, true_claims, claims, **_) -> list[float]:
    """Training-only shaping (``--consistency_weight``): minus the number of false ask/offer-vs-budget comparisons
    in the buyer's Thoughts in the episode. Weighed against ``episode_reward`` by ``reward_weights``."""
    return [float(t - n) for t, n in zip(true_claims, claims)]


def thought_claims_signed_share(completions, true_claims, claims, **_) -> list[float]:
    """Training-only shaping (``--consistency_reward signed_share``): (true - false) / claims over the buyer's
    Thoughts in the episode, in [-1, 1] (0 where it stated none). Weighed against ``episode_reward`` by
    ``reward_weights``."""
    return [(2 * t - n) / n if n else 0.0 for t, n in zip(true_claims, claims)]


CONSISTENCY_REWARDS = {"per_false_claim": false_thought_claims, "signed_share": thought_claims_signed_share}


def curve_points(steps: list[dict], log_history: list[dict]) -> list[dict]:
    """Our per-step rollout stats joined with TRL's logged loss and entropy for the same step."""
    trl = {e["step"]: e for e in log_history if "loss" in e}
    keys = ("loss", "learning_rate", "grad_norm", "entropy", "kl", "clip_ratio/region_mean", "sdpo/lambda",
            "sdpo/gap_mean", "sdpo/demo_rate", "rewards/refused_actions/mean", "rewards/false_thought_claims/mean",
            "rewards/thought_claims_signed_share/mean")
    return [{**s, **{k: trl[s["step"]][k] for k in keys if k in trl.get(s["step"], {})}} for s in steps]


@dataclass
class RLRun:
    """One GRPO-family run: what was asked (the parsed options, the command line), and what setup
    made of it (the game, the policy and its tokenizer, the episodes and their rollouts, the Hub
    target when publishing)."""

    script: GRPOScriptArguments
    cfg: GRPOConfig
    model_args: ModelConfig
    script_path: str
    argv: list[str]
    start: float = field(default_factory=time.perf_counter)
    commit: str = field(default_factory=git_commit)  # the code this process loaded (the tree may change while it runs)
    game: object = None
    model: object = None
    tokenizer: object = None
    dataset: Dataset | None = None
    rollouts: EpisodeRollouts | None = None
    hub: dict | None = None
    precision: dict | None = None  # --precision auto: the rates measured and the choice
    stopped: dict | None = None  # --time_budget_s, --stop_at_step: where and why training stopped before --max_steps

    @property
    def method(self) -> str:
        return Path(self.script_path).stem.upper()

    @property
    def start_model(self) -> str:
        return self.model_args.model_name_or_path or DEFAULT_START

    @property
    def reward_funcs(self) -> list:
        """TRL's reward functions: the environment's reward, and the refusal and consistency shaping when asked for
        (in that order: ``_set_shaping`` weighs them)."""
        return [episode_reward] + ([refused_actions] if self.script.refusal_weight else []) + \
            ([CONSISTENCY_REWARDS[self.script.consistency_reward]] if self.script.consistency_weight else [])


def prepare(script_cls, config_cls, argv: list[str] | None, script_path: str, default_curve: str,
            default_dir: str) -> RLRun:
    """Parse the command line (``--smoke`` reads ``training/recipes/smoke/<script>.yaml``) and set the
    run up: the game (whose defaults may move the curve and checkpoints away from ``default_curve`` /
    ``default_dir``), the publish checks (before any training), the policy, the frozen opponent, the
    episodes and their rollouts."""
    parser = TrlParser((script_cls, config_cls, ModelConfig))
    (script, cfg, model_args), argv = parse(parser, argv, Path(script_path).stem)
    run = RLRun(script, cfg, model_args, script_path, argv)
    try:
        run.game = game_for(script)
    except ScenarioDataError as exc:
        raise SystemExit(f"error: {exc}") from None
    run.game.defaults(cfg, default_curve, default_dir)
    _set_shaping(run)
    if script.rollout_backend == "llamacpp" and not cfg.use_vllm:
        try:  # before the model loads: a missing engine is one line now, not an error at the first step
            check_engine()
        except Exception as exc:  # noqa: BLE001  (EngineUnavailable, or pip failing to fetch the converter)
            raise SystemExit(f"error: --rollout_backend llamacpp: {exc}") from None
    if cfg.push_to_hub:  # every check a push needs happens before any training
        run.hub = _preflight(run)
    try:
        run.model, run.tokenizer = load_model(run.start_model, device="cpu" if cfg.use_cpu else None,
                                              dtype="float32", trainable=True)
    except ModelNotFound as exc:
        raise SystemExit(f"error: {exc}; RL starts from a trained policy: run python training/sft.py first (it "
                         f"writes {DEFAULT_START}), or pass --model_name_or_path, e.g. "
                         "artifacts/checkpoints/sft-smollm2") from None
    _set_precision(run)
    opponent = None
    if script.seller_model:
        sm, st = load_model(script.seller_model, device="cpu" if cfg.use_cpu else None, merge=True)  # frozen
        opponent = LLMAgent(TransformersBackend(sm, st, SamplingConfig(temperature=cfg.temperature)),
                            script.reasoning_mode, name="frozen-seller")
    # episodes per step across every process: TRL's sampler draws from a dataset of this length with one
    # seeded order, so N processes at 1/N of the per-device batch play exactly one process's episodes
    rows = cfg.max_steps * cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps * \
        PartialState().num_processes
    run.dataset = Dataset.from_dict({"prompt": [str(i) for i in range(rows)]})
    # --spare_groups: fresh train rows after the dataset's, enough for every step of every process
    spare = cfg.max_steps * script.spare_groups * PartialState().num_processes
    pool = run.game.rows(rows + spare)
    run.rollouts = EpisodeRollouts(script, cfg, run.game, pool[:rows], opponent, spares=pool[rows:])
    return run


def _set_shaping(run: RLRun) -> None:
    """``--refusal_weight`` and ``--consistency_weight``: TRL's ``reward_weights`` [1, W...] over ``reward_funcs``;
    each refused where its game does not count what it penalises (the bilateral game ends a protocol error with
    reward -1 instead of refusing it; the market scores no Thought)."""
    script, game = run.script, run.game
    if script.refusal_weight and not game.refuses_actions:
        _usage_error(f"--refusal_weight is for games that refuse actions (the GPU market); --env {game.name} "
                     "counts none")
    if script.consistency_weight and not game.checks_thoughts:
        _usage_error(f"--consistency_weight is for games that check the Thoughts' claims (the bilateral game); "
                     f"--env {game.name} checks none")
    weights = [w for w in (script.refusal_weight, script.consistency_weight) if w]
    if not weights:
        return
    if run.cfg.reward_weights is not None:
        _usage_error("--refusal_weight and --consistency_weight set TRL's reward_weights themselves ([1, W...]); "
                     "drop --reward_weights")
    run.cfg.reward_weights = [1.0, *weights]


def _usage_error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _set_precision(run: RLRun) -> None:
    """``--precision``: bf16 autocast or fp32 for training, measured on this machine when ``auto``."""
    run.precision = set_training_precision(run.script.precision, run.cfg, run.model.config.hidden_size)


def _preflight(run: RLRun) -> dict:
    from training.common.hub import HubError, preflight  # noqa: PLC0415  (huggingface_hub only when publishing)

    if not run.game.publishable:
        print(f"--push_to_hub publishes the bilateral buyer (its card reads eval_results.json); it is not "
              f"wired for --env {run.game.name}", file=sys.stderr)
        raise SystemExit(2)
    try:
        hub = preflight(run.cfg.hub_model_id)
    except HubError as exc:
        raise SystemExit(f"--push_to_hub: {exc}") from None
    print(f"will push the FP8 {run.method} buyer to {hub['repo_id']} as {hub['user']}", file=sys.stderr)
    run.cfg.push_to_hub = False  # TRL's trainer would push every checkpoint; we publish once, after training
    return hub


def reward_weights(run: RLRun) -> dict[str, float]:
    """What each segment trained on: every reward function by name with its weight (a shaping term's weight can
    change between the processes of one run, and the curve's config only shows the last)."""
    funcs = run.reward_funcs
    return dict(zip((f.__name__ for f in funcs), run.cfg.reward_weights or [1.0] * len(funcs), strict=True))


RUN_RECORD = "rollout_steps.json"  # in each checkpoint: the curve's steps so far and the run's segments


class RunRecord(TrainerCallback):
    """Keeps a run's curve whole across resumes, which may be on other machines and days: every checkpoint
    holds the rollout stats of each step so far (each with its wall time) and the run's segments (one per
    process that trained it: machine, commit, first and last step, wall time, reward weights, sampling temperature);
    a resumed run reads them back from the checkpoint it resumes. At every save the curve artifact is rewritten too
    (``complete: false`` until the run ends), so an unfinished run shows how far it got."""

    def __init__(self, trainer, run: RLRun, resumed_from: Path | None):
        self.trainer, self.run, self.clock = trainer, run, time.perf_counter()
        self.segments: list[dict] = []
        if resumed_from is not None and (resumed_from / RUN_RECORD).is_file():
            saved = json.loads((resumed_from / RUN_RECORD).read_text())
            run.rollouts.steps[:0] = saved["steps"]
            self.segments = saved["segments"]
        elif resumed_from is not None:
            print(f"warning: {resumed_from} has no {RUN_RECORD} (saved by older code): the curve starts at the "
                  "resumed step, and the steps before it are missing from it", file=sys.stderr)
        self.segments.append({"started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                              "commit": run.commit, "machine": machine(), "first_step": None, "last_step": None,
                              "wall_time_s": 0.0, "bf16": bool(run.cfg.bf16), "precision_measured": run.precision,
                              "reward_weights": reward_weights(run), "temperature": run.cfg.temperature,
                              **({"expert_prefix": run.script.expert_prefix,
                                  "expert_prefix_replies": run.script.expert_prefix_replies}
                                 if getattr(run.script, "expert_prefix", 0) else {}),
                              **({"greedy_prefix": run.script.greedy_prefix,
                                  "greedy_prefix_replies": run.script.greedy_prefix_replies,
                                  "greedy_prefix_guide": run.script.greedy_prefix_guide}
                                 if getattr(run.script, "greedy_prefix", 0) else {})})

    def on_step_end(self, args, state, control, **kwargs):
        now, seg = time.perf_counter(), self.segments[-1]
        if self.run.rollouts.steps:
            self.run.rollouts.steps[-1].setdefault("wall_s", now - self.clock)
        seg["first_step"] = seg["first_step"] or state.global_step
        seg["last_step"], seg["wall_time_s"] = state.global_step, now - self.run.start
        self.clock = now

    def on_save(self, args, state, control, **kwargs):
        if not self.trainer.accelerator.is_main_process:
            return
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if folder.is_dir():
            write_json(folder / RUN_RECORD, {"steps": self.run.rollouts.steps, "segments": self.segments})
        if self.run.script.curve:
            _write_curve(self.trainer, self.run, folder, complete=False, segments=self.segments)


class TimeBudget(TrainerCallback):
    """``--time_budget_s``: ends training at a step's end when one more step, as long as the longest so far,
    would pass the budget (counted from the run's start, loading included). The step it stopped at goes in the
    curve (``stopped``), beside ``max_steps``."""

    def __init__(self, run: RLRun, clock=time.perf_counter):
        self.run, self.clock, self.longest = run, clock, 0.0
        self.step_began = clock()

    def on_step_end(self, args, state, control, **kwargs):
        now = self.clock()
        self.longest, self.step_began = max(self.longest, now - self.step_began), now
        budget = self.run.script.time_budget_s
        if state.global_step < state.max_steps and now - self.run.start + self.longest > budget:
            control.should_training_stop = True
            self.run.stopped = {"reason": f"--time_budget_s {budget:g}: another step (the longest took "
                                          f"{self.longest:.0f} s) would pass it", "at_step": state.global_step,
                                "elapsed_s": round(now - self.run.start, 1)}
            print(f"[time budget] stopping after step {state.global_step} of {state.max_steps}: "
                  f"{now - self.run.start:.0f} s of {budget:g} s used", file=sys.stderr, flush=True)


class StopAtStep(TrainerCallback):
    """``--stop_at_step N``: ends training at step N's end, before ``--max_steps``, and records the stop in the
    curve (``stopped``); what ``--max_steps`` sized (rows, their order, spares, schedule) stays the full run's."""

    def __init__(self, run: RLRun):
        self.run = run

    def on_step_end(self, args, state, control, **kwargs):
        n = self.run.script.stop_at_step
        if n <= state.global_step < state.max_steps:
            control.should_training_stop = True
            self.run.stopped = {"reason": f"--stop_at_step {n}", "at_step": state.global_step,
                                "elapsed_s": round(time.perf_counter() - self.run.start, 1)}


def train_and_finish(trainer, run: RLRun) -> Path:
    """Train (resuming from the last checkpoint in ``--output_dir``, with the curve so far), then ``finish``."""
    last = get_last_checkpoint(run.cfg.output_dir) if Path(run.cfg.output_dir).is_dir() else None
    record = RunRecord(trainer, run, Path(last) if last else None)
    trainer.add_callback(record)
    if run.script.time_budget_s:
        trainer.add_callback(TimeBudget(run))
    if run.script.stop_at_step:
        trainer.add_callback(StopAtStep(run))
    try:
        trainer.train(resume_from_checkpoint=last)
    finally:
        if isinstance(run.rollouts.backend, LlamaCppPolicy):
            run.rollouts.backend.close()  # its export, hundreds of MB, is not needed after training
    return finish(trainer, run, last is not None, record)


def finish(trainer, run: RLRun, resumed: bool, record: RunRecord | None = None) -> Path:
    """Save the final policy (LoRA merged), its lineage and the training curve; publish when asked."""
    script, cfg = run.script, run.cfg
    final = Path(cfg.output_dir) / "final"
    acc = trainer.accelerator
    acc.wait_for_everyone()
    if not acc.is_main_process:  # one writer: the main process saves the policy, the curve and any push
        return final
    lora = hasattr(trainer.model, "merge_and_unload")
    trainer.model.save_pretrained(final)  # with LoRA: the adapter alone (a few MB) over its base
    trainer.processing_class.save_pretrained(final)
    write_lineage(final, run.start_model, Path(run.script_path).stem, role=run.game.role)
    if lora:  # name the base as load_model finds it anywhere: the lineage's base model, else PEFT's record
        upstream = read_lineage(run.start_model)
        base = upstream["base_model"] if upstream else \
            json.loads((final / "adapter_config.json").read_text())["base_model_name_or_path"]
        save_adapter_base(final, base)
    if script.curve:
        _write_curve(trainer, run, final, complete=True, segments=record.segments if record else None,
                     resumed=resumed)
    if run.hub:
        final = _publish(trainer, run, final, lora)
    return final


def _write_curve(trainer, run: RLRun, final: Path, complete: bool, segments: list[dict] | None = None,
                 resumed: bool = False) -> None:
    """The curve artifact; ``segments`` (RunRecord) when the run was trained in several processes, whose wall
    times it sums."""
    script, cfg = run.script, run.cfg
    config = {"script": {k: v for k, v in asdict(script).items() if k not in ("seller_names", "task_names")},
              "push_to_hub": bool(run.hub), "grpo": {k: v for k, v in cfg.to_dict().items() if "token" not in k},
              "model": run.start_model, "peft": run.model_args.use_peft, "train_products": len(run.game.train),
              "checkpoint": str(final), "resumed": resumed or len(segments or []) > 1,
              "world_size": trainer.accelerator.num_processes}
    seeds = {"rows": run.game.seed_rule("rows"), "training_seed": cfg.seed}
    wall = sum(s["wall_time_s"] for s in segments) if segments else time.perf_counter() - run.start
    out = {"provenance": provenance(config, seeds, wall, command_line(run.script_path, [run.script_path, *run.argv]),
                                    commit=run.commit),
           "complete": complete, "max_steps": cfg.max_steps, **({"stopped": run.stopped} if run.stopped else {}),
           "points": curve_points(run.rollouts.steps, trainer.state.log_history)}
    if segments:
        out["provenance"]["segments"] = segments
    write_json(script.curve, out)


def _publish(trainer, run: RLRun, final: Path, lora: bool) -> Path:
    from training.common.hub import publish  # noqa: PLC0415  (huggingface_hub only when publishing)

    if lora:  # the FP8 export needs whole weights: the adapter merged into its base, beside it
        merged = final.with_name("final-merged")
        trainer.model.merge_and_unload().save_pretrained(merged)
        trainer.processing_class.save_pretrained(merged)
        write_lineage(merged, str(final), "merge")
        final = merged
    url = publish(final, run.hub["repo_id"], method=run.method, reasoning_mode=run.script.reasoning_mode,
                  curve_path=run.script.curve, eval_path=run.script.card_eval, python=run.hub["quantize_python"],
                  private=run.cfg.hub_private_repo)
    print(f"pushed the FP8 {run.method} buyer, its model card, curve and evaluation: {url}", file=sys.stderr)
    return final
