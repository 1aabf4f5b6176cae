"""Evaluate buyers against sellers on held-out scenarios and write ``artifacts/eval_scripted.json``.

What it is: the paper's evaluation protocol (held-out test products x several seeds, mean
reward, deal rate, bargained ratio on deals, first-offer ratio, budget overshoot, all split by
mutual/conflicting interest) for every scripted buyer against the neutral seller and every
persona, plus a ``seller: "mix"`` row per buyer over all sellers. Evaluation seeds start at
``env.bargain.evaluation.EVAL_SEED_BASE`` so they never coincide with training seeds.

Run (from the repo root):

    python training/evaluate.py                       # everything, paper data if present
    python training/evaluate.py --scenarios builtin --buyers expert,lowballer --seeds 2
    python training/evaluate.py --buyer-model tiny --buyer-name base --out artifacts/eval_base.json
    python training/evaluate.py --buyer-model Qwen/Qwen3-0.6B --reasoning-mode option_b
    python training/evaluate.py --buyer-model gpt-4.1-mini --base-url https://api.openai.com/v1
    python training/evaluate.py --env market          # the GPU market -> artifacts/eval_market.json

Model players (``--buyer-model`` / ``--seller-model``: ``tiny``, a local path or a Hub id; with
``--base-url`` a model served behind an OpenAI-compatible endpoint, key from ``$OPENAI_API_KEY``)
replace the scripted buyer or seller list and play through the batched rollout engine.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from env.bargain.env import EpisodeMetrics
from env.bargain.evaluation import EVAL_SEED_BASE, episode_seed, format_table, mix_rows, play_cell, summarize_row
from env.bargain.players import BUYERS, SELLERS, make_player, parse_names
from env.bargain.protocol import REASONING_MODES
from env.bargain.scenarios import ScenarioDataError, check_budget_factor, get_split, resolve_source
from training.backends import SamplingConfig
from training.provenance import provenance, write_json, write_jsonl

DEFAULT_OUT = "artifacts/eval_scripted.json"
DEFAULT_TRANSCRIPTS = "artifacts/transcripts/eval_scripted.jsonl"


@dataclass
class EvalConfig:
    scenarios: str = field(default="auto", metadata={"help": "builtin, amazon, auto (amazon if present) or a JSON path"})
    split: str = field(default="test", metadata={"help": "test (held out), train or all"})
    budget_factor: float = field(default=0.8, metadata={"help": "buyer budget as a share of the list price (products "
                                                                "that give their own budget keep it)"})
    buyers: str = field(default="all", metadata={"help": f"scripted buyers, comma list, all or none: {', '.join(BUYERS)}"})
    sellers: str = field(default="all", metadata={"help": f"comma list or all: {', '.join(SELLERS)}"})
    seeds: int = field(default=4, metadata={"help": "episodes per product per cell (the paper: 4)"})
    seed_base: int = field(default=EVAL_SEED_BASE, metadata={"help": "first evaluation seed"})
    limit: int = field(default=0, metadata={"help": "use only the first N products of the split (0 = all)"})
    max_turns: int = field(default=6, metadata={"help": "exchanges (buyer reply + seller reply) per episode"})
    reasoning_mode: str = field(default="option_a", metadata={"help": "option_a (Thought field) or option_b (<think>)"})
    out: str = field(default=DEFAULT_OUT, metadata={"help": "artifact JSON path"})
    transcripts: str = field(default=DEFAULT_TRANSCRIPTS, metadata={"help": "JSONL transcripts path ('' for none)"})
    transcripts_per_cell: int = field(default=2, metadata={"help": "transcripts kept per buyer x seller cell"})
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})
    buyer_model: str = field(default="", metadata={"help": "model buyer: tiny, a path or a Hub id (replaces --buyers)"})
    buyer_name: str = field(default="", metadata={"help": "row label of the model buyer (base, sft, grpo, sdpo...)"})
    buyer_models: str = field(default="", metadata={"help": "model buyers added to --buyers: name=path,name=path "
                                                            "(e.g. base=tiny,sft=runs/sft/final)"})
    buyer_modes: str = field(default="", metadata={"help": "per-model reasoning modes overriding --reasoning_mode: "
                                                           "name=option_b,... (the option_a/option_b ablation)"})
    seller_model: str = field(default="", metadata={"help": "model seller (replaces --sellers)"})
    seller_name: str = field(default="", metadata={"help": "row label of the model seller"})
    base_url: str = field(default="", metadata={"help": "OpenAI-compatible endpoint serving the model(s)"})
    api_key_env: str = field(default="OPENAI_API_KEY", metadata={"help": "environment variable holding the key"})
    backend: str = field(default="transformers", metadata={"help": "transformers or vllm (local models)"})
    batch_size: int = field(default=64, metadata={"help": "episodes played in lockstep per batch (model players)"})
    device: str = field(default="", metadata={"help": "cpu, cuda... (default: cuda if available)"})

    def __post_init__(self):
        if self.split not in ("test", "train", "all"):
            raise ValueError(f"--split must be test, train or all, got {self.split!r}")
        if self.seeds < 1:
            raise ValueError(f"--seeds must be at least 1, got {self.seeds}")
        check_budget_factor(self.budget_factor)
        if self.limit < 0:
            raise ValueError(f"--limit must be 0 (all) or positive, got {self.limit}")
        if self.max_turns < 1:
            raise ValueError(f"--max_turns must be at least 1, got {self.max_turns}")
        if self.seed_base < 0:
            raise ValueError(f"--seed_base must be non-negative, got {self.seed_base}")
        if self.reasoning_mode not in REASONING_MODES:
            raise ValueError(f"--reasoning_mode must be one of {REASONING_MODES}, got {self.reasoning_mode!r}")
        if self.backend not in ("transformers", "vllm"):
            raise ValueError(f"--backend must be transformers or vllm, got {self.backend!r}")
        if self.batch_size < 1:
            raise ValueError(f"--batch_size must be at least 1, got {self.batch_size}")
        self.model_buyers = {}
        for item in (x.strip() for x in self.buyer_models.split(",") if x.strip()):
            name, path = name_path(item, "--buyer_models", BUYERS)
            self.model_buyers[name] = path
        if self.buyer_model:
            self.model_buyers = {self.buyer_name or _label(self.buyer_model): self.buyer_model}
            scripted = []
        else:
            scripted = [] if self.buyers == "none" else parse_names(self.buyers, BUYERS, "buyer")
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
        self.seller_names = ([self.seller_name or _label(self.seller_model)] if self.seller_model
                             else parse_names(self.sellers, SELLERS, "seller"))


def name_path(item: str, flag: str, taken) -> tuple[str, str]:
    """``name=path`` -> (name, path), refusing a malformed pair or a name a scripted player has."""
    name, sep, path = item.partition("=")
    name, path = name.strip(), path.strip()
    if not sep or not name or not path:
        raise ValueError(f"{flag} takes name=path pairs, got {item!r}")
    if name in taken:
        raise ValueError(f"model name {name!r} is taken by a scripted player")
    return name, path


def _label(model: str) -> str:
    return model.rstrip("/").rsplit("/", 1)[-1] or model


def build_agent(model: str, config: EvalConfig, sampling: SamplingConfig, reasoning_mode: str = ""):
    """An ``LLMAgent`` for a model name, on the configured backend (``--reasoning_mode`` unless given)."""
    from training.backends import OpenAIChatBackend, TransformersBackend, VLLMBackend  # noqa: PLC0415
    from training.models import load_model, resolve_model_path  # noqa: PLC0415
    from training.rollout import LLMAgent  # noqa: PLC0415

    if config.base_url:
        backend = OpenAIChatBackend(model, config.base_url, config.api_key_env, sampling)
    elif config.backend == "vllm":
        from transformers import AutoTokenizer  # noqa: PLC0415
        path = resolve_model_path(model)
        backend = VLLMBackend(path, AutoTokenizer.from_pretrained(path), sampling)
    else:
        m, tok = load_model(model, device=config.device or None)
        backend = TransformersBackend(m, tok, sampling)
    return LLMAgent(backend, reasoning_mode or config.reasoning_mode, name=_label(model))


def play_model_cell(scenarios, buyer, seller, config: EvalConfig, on_product) -> tuple[list[EpisodeMetrics], list[dict]]:
    """A cell with a model player: the same (product, seed) episodes, through the rollout engine."""
    from training.rollout import play_episodes  # noqa: PLC0415

    episodes = [(sc, episode_seed(i, k, config.seeds, config.seed_base))
                for i, sc in enumerate(scenarios) for k in range(config.seeds)]
    metrics, kept = [], []
    for start in range(0, len(episodes), config.batch_size):
        batch = episodes[start: start + config.batch_size]
        done = 0

        def tick(_i):
            nonlocal done
            done += 1
            if done % config.seeds == 0:
                on_product()
        records = play_episodes(batch, buyer, seller, config.max_turns, on_done=tick)
        metrics += [EpisodeMetrics(**r.metrics) for r in records]
        kept += [r.transcript for r in records][: max(0, config.transcripts_per_cell - len(kept))]
    return metrics, kept


def run(config: EvalConfig, command: str | None = None, sampling: SamplingConfig | None = None) -> dict:
    """Play every cell and return the artifact (also written to ``config.out`` when set)."""
    from tqdm.auto import tqdm  # noqa: PLC0415

    start = time.perf_counter()
    sampling = sampling or SamplingConfig()
    buyer_agents = {name: build_agent(path, config, sampling, config.model_modes.get(name, ""))
                    for name, path in config.model_buyers.items()}
    modes = {b: config.model_modes.get(b, config.reasoning_mode) for b in config.buyer_names}
    seller_agent = build_agent(config.seller_model, config, sampling) if config.seller_model else None
    dataset = resolve_source(config.scenarios)
    scenarios = get_split(dataset, config.split, config.budget_factor)
    if config.limit:
        scenarios = scenarios[: config.limit]
    cells, rows, transcripts = {}, [], []
    total = len(config.buyer_names) * len(config.seller_names) * len(scenarios)
    with tqdm(total=total, desc="evaluate", unit="product", disable=not config.progress, file=sys.stderr) as bar:
        for b in config.buyer_names:
            for s in config.seller_names:
                if b in buyer_agents or seller_agent:
                    metrics, kept = play_model_cell(
                        scenarios, buyer_agents.get(b, b), seller_agent or s, config, on_product=lambda: bar.update(1))
                else:
                    metrics, kept = play_cell(
                        scenarios, lambda: make_player("buyer", b, config.reasoning_mode),
                        lambda: make_player("seller", s, config.reasoning_mode), config.seeds, config.max_turns,
                        config.seed_base, config.transcripts_per_cell, on_product=lambda: bar.update(1))
                cells[(b, s)] = metrics
                rows.append(summarize_row(metrics, buyer=b, seller=s, split=config.split, dataset=dataset,
                                          reasoning_mode=modes[b]))
                transcripts.extend({"buyer": b, "seller": s, **t} for t in kept)
    if len(config.seller_names) > 1:
        rows.extend({**r, "reasoning_mode": modes[r["buyer"]]} for r in mix_rows(cells, config.split, dataset))
    cfg = {k: v for k, v in asdict(config).items() if k not in ("progress",)}
    if buyer_agents or seller_agent:
        cfg["sampling"] = asdict(sampling)
    cfg["dataset"] = dataset
    cfg["products"] = len(scenarios)
    seeds = {"base": config.seed_base, "per_product": config.seeds,
             "rule": "seed = base + product_index * per_product + k"}
    artifact = {"provenance": provenance(cfg, seeds, time.perf_counter() - start, command), "rows": rows}
    if (checks := target_checks(rows)) is not None:
        artifact["targets"] = checks
    if config.out:
        write_json(config.out, artifact)
    if config.transcripts and transcripts:
        write_jsonl(config.transcripts, transcripts)
    return artifact


SCRIPTED_BASELINES = ("always_accept", "split_difference", "lowballer", "offer_budget", "random_valid")


def target_checks(rows: list[dict]) -> dict | None:
    """The training issue's targets, checked on the seller-mix rows (None without sft and grpo rows):
    SFT format errors under 2%; GRPO above SFT beyond both 95% CIs; GRPO above every scripted
    baseline except the expert; a trained buyer above the expert (stretch); overshoot rates."""
    mix = {r["buyer"]: r for r in rows if r["seller"] == "mix"}
    if "sft" not in mix or "grpo" not in mix:
        return None
    sft, grpo = mix["sft"], mix["grpo"]
    trained = [b for b in ("sft", "grpo", "sdpo") if b in mix]
    below = [b for b in SCRIPTED_BASELINES if b in mix and grpo["reward_mean"] <= mix[b]["reward_mean"]]
    best_trained = max(trained, key=lambda b: mix[b]["reward_mean"])
    return {
        "sft_format_error_rate_below_2pct": {"met": sft["format_error_rate"] < 0.02,
                                             "value": sft["format_error_rate"]},
        "grpo_above_sft_beyond_ci": {"met": grpo["reward_ci95"][0] > sft["reward_ci95"][1],
                                     "grpo": grpo["reward_mean"], "sft": sft["reward_mean"]},
        "grpo_above_every_baseline_but_expert": {"met": not below, "grpo": grpo["reward_mean"],
                                                 "baselines_not_beaten": {b: mix[b]["reward_mean"] for b in below}},
        "trained_above_expert (stretch)": {"met": "expert" in mix and mix[best_trained]["reward_mean"]
                                           > mix["expert"]["reward_mean"], "best_trained": best_trained,
                                           "value": mix[best_trained]["reward_mean"],
                                           "expert": mix.get("expert", {}).get("reward_mean")},
        "overshoot_rate": {b: mix[b]["overshoot_rate"] for b in trained},
    }


def annotate_targets(path: str) -> dict:
    """Add the target checks to an existing evaluation artifact (rows untouched), with their own provenance."""
    data = json.loads(Path(path).read_text())
    checks = target_checks(data["rows"])
    if checks is None:
        raise SystemExit(f"{path}: no seller-mix rows for both sft and grpo; nothing to check")
    data["targets"] = checks
    data["targets_provenance"] = provenance({"artifact": path}, {}, 0.0)
    write_json(path, data)
    return checks


@dataclass
class MarketEvalConfig:
    env: str = field(default="market", metadata={"help": "market (this config) or bargain"})
    tasks: str = field(default="all", metadata={"help": "comma list or all: single_trade, market_round, "
                                                        "coalition_market"})
    policies: str = field(default="all", metadata={"help": "comma list or all (the expert, the baselines, idle)"})
    episodes: int = field(default=500, metadata={"help": "held-out seeds per task x policy"})
    seed_base: int = field(default=1_000_000, metadata={"help": "first evaluation seed (training uses lower ones)"})
    out: str = field(default="artifacts/eval_market.json", metadata={"help": "artifact JSON path"})
    transcripts: str = field(default="artifacts/transcripts/eval_market.jsonl",
                             metadata={"help": "one judged game per task, JSONL ('' for none)"})
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})
    models: str = field(default="", metadata={"help": "model labs added to --policies: name=path,... (tiny, a "
                                                      "checkpoint folder or a Hub id), through the rollout engine"})
    reasoning_mode: str = field(default="option_a", metadata={"help": "option_a or option_b (model labs)"})
    base_url: str = field(default="", metadata={"help": "OpenAI-compatible endpoint serving the model(s)"})
    api_key_env: str = field(default="OPENAI_API_KEY", metadata={"help": "environment variable holding the key"})
    backend: str = field(default="transformers", metadata={"help": "transformers or vllm (local models)"})
    batch_size: int = field(default=64, metadata={"help": "episodes played in lockstep per batch (model labs)"})
    device: str = field(default="", metadata={"help": "cpu, cuda... (default: cuda if available)"})

    def __post_init__(self):
        from env.market import POLICIES, TASKS  # noqa: PLC0415
        if self.env != "market":
            raise ValueError(f"--env must be market here, got {self.env!r}")
        self.task_names = parse_names(self.tasks, TASKS, "task")
        self.policy_names = [] if self.policies == "none" else parse_names(self.policies, POLICIES, "policy")
        self.model_paths = dict(name_path(x.strip(), "--models", POLICIES) for x in self.models.split(",") if x.strip())
        if not self.policy_names and not self.model_paths:
            raise ValueError("nothing to evaluate: give --policies or --models")
        if self.reasoning_mode not in REASONING_MODES:
            raise ValueError(f"--reasoning_mode must be one of {REASONING_MODES}")
        if self.episodes < 2:
            raise ValueError(f"--episodes must be at least 2 (a spread needs two), got {self.episodes}")
        if self.seed_base < 0:
            raise ValueError(f"--seed_base must be non-negative, got {self.seed_base}")


def run_market(config: MarketEvalConfig, command: str | None = None, sampling: SamplingConfig | None = None) -> dict:
    """Every task x policy over held-out seeds -> ``artifacts/eval_market.json`` (+ judged transcripts)."""
    from tqdm.auto import tqdm  # noqa: PLC0415

    from env.market.evaluation import evaluate, summarize, transcript  # noqa: PLC0415
    from env.market.players import make_policy  # noqa: PLC0415
    from training.market_rollout import play_market_episodes  # noqa: PLC0415

    start = time.perf_counter()
    total = len(config.task_names) * (len(config.policy_names) + len(config.model_paths)) * config.episodes
    with tqdm(total=total, desc="market", unit="episode", disable=not config.progress, file=sys.stderr) as bar:
        rows, judged = evaluate(config.task_names, {p: (lambda p=p: make_policy(p)) for p in config.policy_names},
                                config.episodes, config.seed_base, on_episode=lambda: bar.update(1))
        for name, path in config.model_paths.items():
            agent = build_agent(path, config, sampling or SamplingConfig())
            agent.name = name
            for task in config.task_names:
                envs = []
                for lo in range(0, config.episodes, config.batch_size):
                    batch = [(task, config.seed_base + k) for k in range(lo, min(lo + config.batch_size,
                                                                                  config.episodes))]
                    envs += [r.env for r in play_market_episodes(batch, agent, name=name,
                                                                 on_done=lambda _i: bar.update(1))]
                rows.append(summarize(task, name, envs))
                judged.setdefault(task, (name, envs[0]))
    cfg = {k: v for k, v in asdict(config).items() if k != "progress"}
    if config.model_paths:
        cfg["sampling"] = asdict(sampling or SamplingConfig())
    seeds = {"base": config.seed_base, "episodes": config.episodes, "rule": "episode k of every cell: seed base + k"}
    artifact = {"provenance": provenance(cfg, seeds, time.perf_counter() - start, command), "rows": rows}
    if config.out:
        write_json(config.out, artifact)
    if config.transcripts and judged:
        write_jsonl(config.transcripts, [transcript(env, policy) for policy, env in judged.values()])
    return artifact


def main(argv: list[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--env" in argv and argv[argv.index("--env") + 1:][:1] == ["market"]:
        from transformers import HfArgumentParser  # noqa: PLC0415

        from env.market.evaluation import format_market_table  # noqa: PLC0415
        parser = HfArgumentParser((MarketEvalConfig, SamplingConfig))
        try:
            config, sampling = parser.parse_args_into_dataclasses(args=argv)
        except ValueError as exc:
            parser.error(str(exc))
        artifact = run_market(config, sampling=sampling)
        print(format_market_table(artifact["rows"]))
        return artifact
    if "--env" in argv:  # --env bargain: the default evaluation
        i = argv.index("--env")
        if argv[i + 1:][:1] != ["bargain"]:
            raise SystemExit("--env must be bargain or market")
        del argv[i:i + 2]
    if argv[:1] == ["--check_targets"]:  # python training/evaluate.py --check_targets artifacts/eval_results.json
        if len(argv) != 2:
            raise SystemExit("usage: python training/evaluate.py --check_targets ARTIFACT.json")
        checks = annotate_targets(argv[1])
        print(json.dumps(checks, indent=1))
        return checks
    from transformers import HfArgumentParser  # noqa: PLC0415  (one config convention for all scripts)

    parser = HfArgumentParser((EvalConfig, SamplingConfig))
    try:
        config, sampling = parser.parse_args_into_dataclasses(args=argv)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        artifact = run(config, sampling=sampling)
    except ScenarioDataError as exc:  # the user's data: one clear line, not a traceback
        raise SystemExit(f"error: {exc}") from None
    print(format_table(artifact["rows"]))
    mix = [r for r in artifact["rows"] if r["seller"] == "mix"]
    if mix:
        best = max(mix, key=lambda r: r["reward_mean"])
        print(f"\nbest buyer against the seller mix: {best['buyer']} ({best['reward_mean']:+.3f})")
    if config.out:
        print(f"wrote {config.out}" + (f" and {config.transcripts}" if config.transcripts else ""))
    return artifact


if __name__ == "__main__":
    main()
