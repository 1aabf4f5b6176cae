"""Supervised fine-tuning on expert games (behaviour cloning of the rule-based expert buyer).

What it is: the scripted expert buyer plays the seller mix on the *train* split (products and
seeds the evaluation never uses). Each game is written in the model's own conversation format,
token for token the stream the rollout engine builds when the model plays (system prompt, the
seller's messages as user turns, the buyer's replies), and TRL's ``SFTTrainer`` trains on it with
the loss on the buyer's tokens only (``completion_mask`` = the engine's mask). Writes a checkpoint
and ``artifacts/sft_training_curve.json`` (every logged step). Interrupted runs resume from the
last checkpoint in ``--output_dir``.

    python training/sft.py                          # tiny model, offline, CPU (~20 min here)
    python training/sft.py --smoke                  # a few seconds: what the tests run
    python training/sft.py --model Qwen/Qwen3-0.6B --reasoning_mode option_b --bf16 --use_cpu false

``--teach verdicts`` trains on the model's own games instead, each false ask/offer-vs-budget verdict word of its Thoughts
replaced by the true one (``training/games/bargain/verdicts.py``); ``--verdict_weight W`` counts each verdict word's
loss W times (``training/games/bargain/verdict_trainer.py``).

``--teach comparisons`` is a drill: ``--games`` short examples of the buyer's ask-versus-budget verdict alone, in its
chat format, the loss on the Thought (``training/games/bargain/comparisons.py``); ``--teach verdicts --drill N`` mixes N
such examples, the loss on the verdict word, among the own games. The curve records the verdict accuracy on held-out
examples (test products' budgets, other asks) before and after.

``--teach dagger`` is DAgger (Ross, Gordon and Bagnell, 2011): the model plays ``--games`` of its own (greedy at
``--temperature 0``, the states the evaluation meets), and at each state its buyer reached there the expert buyer writes
the reply, which alone carries the loss (``BargainGame.dagger_games``). Behaviour cloning shows the expert's moves in
the expert's own games only; a student whose play drifts from them (one that never accepts an ask) meets states the
expert's games never reach. The curve records how often the model's own move there was of the expert's kind.

``--teacher steady`` clones ``SteadyBuyer`` instead of the expert: the expert's plan set to survive a student's
imprecise arithmetic (60% of the list held, 85% of the budget in the last round, no last-round grab of the ask).

``--model`` may name a LoRA adapter folder (an SFT or RL checkpoint): its adapter then goes on training on the
expert's games (a refresher: the expert's Thought changed after the adapter learned it), rather than a new one.
"""

from __future__ import annotations

import shutil
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from trl import SFTConfig, SFTTrainer, TrlParser

from env.bargain.players import TEACHERS
from env.bargain.protocol import REASONING_MODES
from env.bargain.sources import ScenarioDataError
from training.common.cli import parse
from training.common.provenance import command_line, provenance, write_json, write_lineage
from training.engine.backends import SamplingConfig, TransformersBackend
from training.engine.llamacpp import EngineUnavailable, LlamaCppBackend
from training.engine.models import (adapter_base, is_pretrained, load_model, lora_config, resolve_model_path,
                                   save_adapter_base)
from training.engine.precision import PRECISION_HELP, check_precision, set_training_precision
from training.engine.rollout import LLMAgent
from training.games import GameArguments, game_for
from training.games.bargain.comparisons import comparison_examples, stream_verdict_accuracy, verdict_accuracy
from training.games.bargain.verdicts import GAMES_A_BATCH

DEFAULT_CURVE = "artifacts/sft_training_curve.json"
DEFAULT_DIR = "runs/sft"


@dataclass
class SFTScriptArguments(GameArguments):
    model: str = field(default="tiny", metadata={
        "help": "tiny, a local path or a Hub id; a LoRA adapter folder (an SFT or RL checkpoint) trains that adapter on"})
    games: int = field(default=3000, metadata={"help": "expert games to clone (--teach comparisons: drill examples)"})
    reasoning_mode: str = field(default="option_a", metadata={
        "help": "option_a (Thought field), option_b (<think>), or both as 'option_a,option_b' (games alternate)"})
    curve: str = field(default=DEFAULT_CURVE, metadata={"help": "training-curve artifact path ('' for none)"})
    lora: str = field(default="auto", metadata={"help": "train a LoRA adapter (PEFT, r=16, every linear layer): auto "
                                                        "(for pretrained models, not the tiny one), yes or no"})
    role: str = field(default="buyer", metadata={
        "help": "buyer (clone the expert buyer against the seller mix) or seller (clone the scripted sellers of "
                "--sellers against the scripted buyers: a model seller, e.g. the frozen opponent of "
                "generalisation study (d)); bilateral game only"})
    precision: str = field(default="", metadata={"help": PRECISION_HELP})
    teacher: str = field(default="expert", metadata={
        "help": f"--teach expert, bilateral buyer: the scripted buyer whose games are cloned, one of "
                f"{', '.join(TEACHERS)} (steady: the expert's plan set to survive a student's imprecision, with no "
                f"last-round grab)"})
    teach: str = field(default="expert", metadata={
        "help": "expert: clone the expert's games; verdicts: the model plays --games of its own against the seller "
                "mix (sampled at --temperature, on llama.cpp where it runs) and learns them with each false "
                "ask/offer-vs-budget verdict word of its Thoughts replaced by the true one (bilateral buyer); "
                "comparisons: a drill of --games ask-versus-budget verdicts alone, half of each word, the loss on "
                "the Thought (bilateral buyer); dagger: the model plays --games of its own and learns the expert "
                "buyer's reply at each state it reached there (DAgger; bilateral buyer)"})
    temperature: float = field(default=0.7, metadata={
        "help": "sampling temperature of --teach verdicts' and dagger's own games (dagger: 0 plays them greedily)"})
    verdict_weight: float = field(default=1.0, metadata={
        "help": "--teach verdicts or dagger: each labelled verdict token's loss counts this many times (1: every "
                "trained token alike; the verdict words are about one token in sixty; dagger: the expert's verdict "
                "words, read at the policy's own states, where its history may hold false ones)"})
    verdict_balance: bool = field(default=False, metadata={
        "help": "--verdict_weight: the true words 'over' and 'within' carry half the verdicts' weight each (the "
                "policy's verdicts are mostly 'over'; the mean weight a verdict stays --verdict_weight)"})
    verdict_symbols: bool = field(default=False, metadata={
        "help": "--teach dagger --verdict_weight: the signs of the digit-by-digit comparison before each verdict word "
                "('1=1, 5<7: within') carry the weight too (the verdict word follows from them; a small model "
                "writes the sign wrong first)"})
    drill: int = field(default=0, metadata={
        "help": "--teach verdicts: this many comparison-drill examples (as --teach comparisons writes them, the loss "
                "on the verdict word alone) mixed among the own games, whose tokens hold the reply's form; the curve "
                "records the held-out verdict accuracy before and after"})
    drill_games: int = field(default=0, metadata={
        "help": "--teach verdicts: this many expert games against the seller cycle (train products), the loss on "
                "the verdict words of their Thoughts alone, mixed among the own games: the comparison drilled where "
                "the buyer meets it, after the game's earlier asks and verdicts; the curve records the verdict "
                "accuracy on held-out expert games (test products) before and after"})
    drill_flip: float = field(default=0.0, metadata={
        "help": "--drill_games: each verdict of the expert games turns to the wrong word with this probability and "
                "leaves the loss, so a later verdict cannot be copied from the earlier ones (a buyer's own history "
                "may be wrong); the curve also records the held-out games' accuracy with their histories so turned"})
    smoke: bool = field(default=False, metadata={"help": "tiny run for tests: 16 games, 2 steps (flags still win)"})

    def __post_init__(self):
        if self.role not in ("buyer", "seller"):
            raise ValueError(f"--role must be buyer or seller, got {self.role!r}")
        if self.role == "seller" and self.env != "bargain":
            raise ValueError("--role seller is for the bilateral game (--env bargain)")
        if self.games < 1:
            raise ValueError(f"--games must be at least 1, got {self.games}")
        if self.lora not in ("auto", "yes", "no"):
            raise ValueError(f"--lora must be auto, yes or no, got {self.lora!r}")
        check_precision(self.precision)
        if self.teach not in ("expert", "verdicts", "comparisons", "dagger"):
            raise ValueError(f"--teach must be expert, verdicts, comparisons or dagger, got {self.teach!r}")
        if self.teach != "expert" and (self.env != "bargain" or self.role != "buyer"):
            raise ValueError(f"--teach {self.teach} teaches the bilateral game's buyer only")
        if self.teacher not in TEACHERS:
            raise ValueError(f"--teacher must be one of {', '.join(TEACHERS)}, got {self.teacher!r}")
        if self.teacher != "expert" and (self.env != "bargain" or self.role != "buyer" or self.teach != "expert"):
            raise ValueError(f"--teacher {self.teacher} writes the bilateral buyer's games for --teach expert only")
        if not self.verdict_weight >= 1:
            raise ValueError(f"--verdict_weight must be at least 1, got {self.verdict_weight}")
        if self.drill and self.teach != "verdicts":
            raise ValueError("--drill mixes drill examples into --teach verdicts' own games (--teach comparisons is "
                             "the drill alone: --games examples)")
        if self.drill < 0 or self.drill_games < 0:
            raise ValueError(f"--drill and --drill_games must be 0 or more, got {self.drill} and {self.drill_games}")
        if self.drill_games and self.teach != "verdicts":
            raise ValueError("--drill_games mixes expert games' verdicts into --teach verdicts' own games")
        if not 0 <= self.drill_flip < 1:
            raise ValueError(f"--drill_flip is a probability below 1, got {self.drill_flip}")
        if self.drill_flip and not self.drill_games:
            raise ValueError("--drill_flip turns verdicts of --drill_games' expert games: give --drill_games")
        if self.verdict_weight != 1 and self.teach not in ("verdicts", "dagger"):
            raise ValueError("--verdict_weight weighs the verdict words of --teach verdicts or dagger")
        if self.verdict_symbols and (self.teach != "dagger" or self.verdict_weight == 1):
            raise ValueError("--verdict_symbols weighs the comparison signs of --teach dagger's labels: give "
                             "--verdict_weight above 1")
        if self.verdict_balance and self.verdict_weight == 1:
            raise ValueError("--verdict_balance weighs the verdict words: give --verdict_weight above 1")
        if not (self.temperature >= 0 if self.teach == "dagger" else self.temperature > 0):
            raise ValueError(f"--temperature must be above 0 (the games are sampled; --teach dagger also takes 0, "
                             f"greedy), got {self.temperature}")
        self.modes = [m.strip() for m in self.reasoning_mode.split(",") if m.strip()]
        if not self.modes or any(m not in REASONING_MODES for m in self.modes) or len(set(self.modes)) < len(self.modes):
            raise ValueError(f"--reasoning_mode takes one or more of {REASONING_MODES}, comma separated, "
                             f"got {self.reasoning_mode!r}")
        super().__post_init__()


@dataclass
class HaggleSFTConfig(SFTConfig):
    """TRL's SFTConfig with defaults for this task (CPU-friendly: no bf16, no checkpointing)."""

    output_dir: str = field(default=DEFAULT_DIR)
    per_device_train_batch_size: int = field(default=16)
    learning_rate: float = field(default=1e-3)
    num_train_epochs: float = field(default=2.0)
    lr_scheduler_type: str = field(default="cosine")
    warmup_steps: float = field(default=0.05)
    logging_steps: float = field(default=5)
    save_steps: float = field(default=50)
    save_total_limit: int = field(default=2)
    bf16: bool = field(default=False)
    gradient_checkpointing: bool = field(default=False)
    use_cpu: bool = field(default=not torch.cuda.is_available())
    completion_only_loss: bool = field(default=True)
    max_length: int = field(default=2048)
    report_to: str = field(default="none")
    dataloader_drop_last: bool = field(default=False)


def curve_points(log_history: list[dict]) -> list[dict]:
    keys = ("loss", "learning_rate", "grad_norm", "mean_token_accuracy", "verdict_accuracy",
            "verdict_accuracy_within", "num_tokens", "epoch", "entropy")
    return [{"step": e["step"], **{k: e[k] for k in keys if k in e}} for e in log_history if "loss" in e]


def main(argv: list[str] | None = None):
    (script, cfg), argv = parse(TrlParser((SFTScriptArguments, HaggleSFTConfig)), argv, "sft")
    try:
        game = game_for(script)
    except ScenarioDataError as exc:
        raise SystemExit(f"error: {exc}") from None
    game.defaults(cfg, DEFAULT_CURVE, DEFAULT_DIR)
    start = time.perf_counter()
    base = adapter_base(script.model)  # continuing an adapter: it trains, and no second one goes on top
    if base and script.lora == "no":
        raise SystemExit(f"error: --lora no, but {script.model} is a LoRA adapter: training it goes on with LoRA "
                         "(pass --lora auto), or give the base model to train all its weights")
    model, tok = load_model(script.model, device="cpu" if cfg.use_cpu else None, dtype="float32",
                            trainable=base is not None)
    measured = set_training_precision(script.precision, cfg, model.config.hidden_size)
    drill = streams_record = dagger = None  # the comparison drills' and DAgger's records, when trained
    if script.teach == "verdicts":
        with _own_games(model, tok, script, cfg.seed, cfg.max_length) as agent:
            dataset, verdicts, reward = game.verdict_games(agent, script.games)
        if not sum(verdicts):
            raise SystemExit(f"error: the model's {script.games} games state no checkable ask/offer-vs-budget "
                             "verdict in their Thoughts: nothing to teach (--teach verdicts)")
        print(f"the model's {script.games} games state {verdicts[0]} true and {verdicts[1]} false verdicts",
              file=sys.stderr)
        from datasets import concatenate_datasets  # noqa: PLC0415

        if script.drill:
            examples, held_out, drill = _drill(model, game, script, tok, cfg.seed, script.drill, loss="verdict")
            examples = examples.map(lambda row: {"verdicts": [row["verdict_at"]], "verdict_over": [row["verdict_over"]]},
                                    remove_columns=["verdict_at"])
            dataset = concatenate_datasets([dataset, examples.cast(dataset.features)])
            print(f"{script.drill} drill examples mixed in; held-out verdict accuracy before: "
                  f"{drill['before']['accuracy']:.1%}", file=sys.stderr)
        if script.drill_games:
            streams, held_streams, streams_record = _drill_games(model, game, script, tok)
            dataset = concatenate_datasets([dataset, streams.cast(dataset.features)])
            print(f"{script.drill_games} expert games' verdicts mixed in ({streams_record['train_verdicts']}); "
                  f"held-out accuracy in games before: {streams_record['before']['accuracy']:.1%}", file=sys.stderr)
            if script.drill_flip:
                print(f"... with their histories turned: {streams_record['flipped_history']['before']['accuracy']:.1%}",
                      file=sys.stderr)
    elif script.teach == "comparisons":
        verdicts = None
        dataset, held_out, drill = _drill(model, game, script, tok, cfg.seed, script.games)
        print(f"held-out verdict accuracy before the drill: {drill['before']['accuracy']:.1%}", file=sys.stderr)
    elif script.teach == "dagger":
        verdicts = None
        with _own_games(model, tok, script, cfg.seed, cfg.max_length) as agent:
            dataset, dagger = game.dagger_games(agent, script.games, symbols=script.verdict_symbols)
        if not len(dataset):
            raise SystemExit(f"error: the model's {script.games} games reached no state to label (--teach dagger)")
        reward = dagger["own_reward_mean"]
        print(f"the model's {script.games} games: {dagger['states']} states labelled with the expert's reply "
              f"(its moves {dagger['expert_moves']}); the model's own move there was of the same kind in "
              f"{dagger['own_move_agrees']:.1%}; the verdict tokens (by their word): {dagger['verdicts']}", file=sys.stderr)
    else:
        verdicts = None
        agents = [LLMAgent(TransformersBackend(model, tok), mode) for mode in script.modes]
        dataset, rewards = game.expert_games(agents, script.games, role=script.role)
        reward = sum(rewards) / len(rewards)
    kind = "own" if verdicts else {"comparisons": "drill", "dagger": "dagger"}.get(script.teach, "expert")
    longest = max(len(x) for x in dataset["input_ids"])
    if cfg.max_length and longest > cfg.max_length:
        print(f"note: {kind} games run to {longest} tokens; --max_length {cfg.max_length} truncates the longer "
              f"ones (their later moves carry no loss)", file=sys.stderr)
    what = ("examples" if kind == "drill" else f"states of the model's own games (their mean buyer reward {reward:+.3f})"
            if dagger else f"games (mean {script.role} reward {reward:+.3f})")
    mixed = script.drill + len(streams) if streams_record else script.drill
    count = (f"{len(dataset) - mixed} {kind} {what}" + (f", {script.drill} drill examples" if script.drill else "")
             + (f", {len(streams)} expert games' verdicts" if streams_record else ""))
    print(f"{count}; {sum(len(x) for x in dataset['input_ids']) / len(dataset):.0f} tokens each", file=sys.stderr)
    lora = base is not None or script.lora == "yes" or (script.lora == "auto" and is_pretrained(script.model))
    peft = lora_config() if lora and base is None else None
    if script.verdict_weight > 1:
        from training.games.bargain.verdict_trainer import VerdictWeightedSFTTrainer  # noqa: PLC0415

        trainer = VerdictWeightedSFTTrainer(model=model, args=cfg, train_dataset=dataset, processing_class=tok,
                                            peft_config=peft, verdict_weight=script.verdict_weight,
                                            balance=script.verdict_balance)
    else:
        dataset = dataset.select_columns(["input_ids", "completion_mask"])  # what the plain loss reads; no label columns
        trainer = SFTTrainer(model=model, args=cfg, train_dataset=dataset, processing_class=tok, peft_config=peft)
    resume = any(Path(cfg.output_dir).glob("checkpoint-*"))
    trainer.train(resume_from_checkpoint=True if resume else None)
    final = Path(cfg.output_dir) / "final"
    trainer.save_model(str(final))  # with LoRA: the adapter alone (a few MB), its base named for load_model
    trainer.accelerator.wait_for_everyone()
    if not trainer.accelerator.is_main_process:  # one writer: the main process records the run
        return trainer, final
    if drill:
        drill["after"] = verdict_accuracy(trainer.model, tok, held_out)
        print(f"held-out verdict accuracy after the drill: {drill['after']['accuracy']:.1%} (asks over the budget "
              f"{drill['after']['accuracy_over']:.1%}, within it {drill['after']['accuracy_within']:.1%})",
              file=sys.stderr)
    if streams_record:
        streams_record["after"] = stream_verdict_accuracy(trainer.model, tok, held_streams["as played"])
        print(f"held-out verdict accuracy in expert games after: {streams_record['after']['accuracy']:.1%} (over "
              f"{streams_record['after']['accuracy_over']:.1%}, within {streams_record['after']['accuracy_within']:.1%})",
              file=sys.stderr)
        if "flipped" in held_streams:
            lying = streams_record["flipped_history"]
            lying["after"] = stream_verdict_accuracy(trainer.model, tok, held_streams["flipped"])
            print(f"... with their histories turned: {lying['before']['accuracy']:.1%} before, "
                  f"{lying['after']['accuracy']:.1%} after", file=sys.stderr)
    tok.save_pretrained(final)
    save_adapter_base(final, base or script.model)
    write_lineage(final, resolve_model_path(script.model), "sft",
                  role=script.role if script.env == "bargain" else game.role)
    if script.curve:
        config = {"script": asdict(script), "sft": {k: v for k, v in cfg.to_dict().items() if "token" not in k},
                  "train_products": len(game.train), "checkpoint": str(final), "resumed": resume, "lora": lora,
                  "continued_adapter": script.model if base else None,
                  "precision": "bfloat16 autocast, float32 weights" if cfg.bf16 else "float32",
                  "precision_measured": measured,
                  "world_size": trainer.accelerator.num_processes}
        extra = ({"own_games": {"reward_mean": reward, "verdicts_true": verdicts[0], "verdicts_false": verdicts[1]}}
                 if verdicts else {"dagger": dagger} if dagger else {} if script.teach == "comparisons"
                 else {"expert_reward_mean": reward, **({"teacher": script.teacher} if script.teacher != "expert"
                                                         else {})})
        if drill:
            extra["comparisons"] = drill
        if streams_record:
            extra["comparisons_in_games"] = streams_record
        seeds = {"games": game.seed_rule("games") if verdicts or dagger else DRILL_SEEDS if script.teach == "comparisons"
                 else game.expert_seed_rule(len(script.modes)), "training_seed": cfg.seed}
        write_json(script.curve, {"provenance": provenance(config, seeds, time.perf_counter() - start,
                                                           command_line(__file__, [__file__, *argv])),
                                  "points": curve_points(trainer.state.log_history), **extra})
    return trainer, final


DRILL_HELD_OUT = 512  # held-out drill examples, on the test split's products
DRILL_SEEDS = ("drill example i: train product i mod n, asks drawn with the training seed; held out: "
               f"{DRILL_HELD_OUT} on the test products, asks drawn with the training seed + 1")


def _drill(model, game, script, tok, seed: int, n: int, loss: str = "thought"):
    """``n`` comparison-drill training examples (train products; the loss on ``loss``), held-out ones (test products,
    other asks) and the record the curve keeps of them, with ``model``'s held-out accuracy before training."""
    from training.games.bargain.adapter import training_products  # noqa: PLC0415

    held_products = training_products(script.scenarios, script.budget_factor, split="test")
    train = comparison_examples(tok, game.train, n, seed, script.max_turns, loss=loss)
    held_out = comparison_examples(tok, held_products, DRILL_HELD_OUT, seed + 1, script.max_turns)
    record = {"train_examples": len(train), "loss": loss, "held_out_examples": len(held_out),
              "held_out_products": len(held_products), "before": verdict_accuracy(model, tok, held_out)}
    return train.select_columns(["input_ids", "completion_mask", "verdict_at", "verdict_over"]), held_out, record


DRILL_GAMES_HELD_OUT = 48  # held-out expert games (test products) the in-game verdict accuracy is measured on
DRILL_GAMES_SEED = 1_000_000  # the expert drill games' seeds start here (the own games take seeds 0, 1, ...)
DRILL_FLIP_HELD_SEED = 7  # draws which held-out verdicts turn (--drill_flip), the same for every run


def _drill_games(model, game, script, tok):
    """``--drill_games``: the expert's games as verdict-only streams (train products), held-out ones (test
    products) and the record the curve keeps, with ``model``'s held-out accuracy before training."""
    from training.games.bargain.adapter import training_products  # noqa: PLC0415

    agent = LLMAgent(TransformersBackend(model, tok), script.modes[0])  # formats the expert's replies; samples nothing
    train, (over, within) = game.expert_verdict_games(agent, script.drill_games, seed=DRILL_GAMES_SEED)
    if script.drill_flip:
        train, (over, within, flipped) = game.flip_streams(train, tok, script.drill_flip, DRILL_GAMES_SEED)
    held_products = training_products(script.scenarios, script.budget_factor, split="test")
    held, (h_over, h_within) = game.expert_verdict_games(agent, DRILL_GAMES_HELD_OUT, products=held_products)
    record = {"train_games": len(train), "train_verdicts": {"over": over, "within": within},
              "seeds": f"game i: train product i mod {len(game.train)}, seed {DRILL_GAMES_SEED} + i, seller i mod "
                       f"{len(script.seller_names)}; held out: test product i mod {len(held_products)}, seed i",
              "held_out_games": len(held), "held_out_verdicts": {"over": h_over, "within": h_within},
              "before": stream_verdict_accuracy(model, tok, held)}
    held = {"as played": held}
    if script.drill_flip:  # the same held-out games, their histories turned as the training streams' are
        lying, (l_over, l_within, l_flipped) = game.flip_streams(held["as played"], tok, script.drill_flip,
                                                                 DRILL_FLIP_HELD_SEED)
        held["flipped"] = lying
        record["train_verdicts"]["flipped"] = flipped
        record["flipped_history"] = {"share": script.drill_flip, "held_out_games": len(lying), "held_out_verdicts": {
            "over": l_over, "within": l_within, "flipped": l_flipped}, "before": stream_verdict_accuracy(model, tok,
                                                                                                      lying)}
    return train, held, record


@contextmanager
def _own_games(model, tok, script, seed: int, context: int | None):
    """The agent the model's own games are played with (``--temperature``; 0 is greedy): llama.cpp over its current
    weights (an adapter merged into a copy), a slot for each game of a batch, each holding ``context`` tokens (the
    longest stream SFT trains on), else transformers where the engine or its converter cannot be had. The engine's
    context and export are gone after the block (never read again)."""
    from training.rl.engine import merged  # noqa: PLC0415

    sampling = SamplingConfig(temperature=script.temperature, seed=seed)
    try:
        sampler = LlamaCppBackend(merged(model), tok, sampling, slots=min(script.games, GAMES_A_BATCH),
                                  context=context or 0, batched=True)
    except EngineUnavailable as exc:
        print(f"note: playing the model's games with transformers ({exc})", file=sys.stderr)
        sampler = TransformersBackend(model, tok, sampling)
    try:
        yield LLMAgent(sampler, script.modes[0])
    finally:
        if isinstance(sampler, LlamaCppBackend):
            sampler.close()
            shutil.rmtree(sampler.path.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
